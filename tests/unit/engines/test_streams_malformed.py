"""meta_info, usage and choices of the wrong type or range: the stream parsers record a malformed answer that names
the field (RequestMeta.malformed), count no tokens from that chunk and never raise; the gate's answer parsers raise
MalformedAnswerError (exit 4) instead of a TypeError or a str in an int column."""

from __future__ import annotations

import json
from typing import Any, Optional

import pytest

from cluster.engines.answer_fields import MalformedAnswerError
from cluster.engines.base import Engine
from cluster.engines.sglang import SGLangEngine
from cluster.engines.streams import OpenAIStreamParser, SGLangNativeParser
from cluster.engines.vllm import VLLMEngine
from cluster.kernel.gate import GateOutput

FIN = {"type": "length", "length": 4}


def _native(meta: Any, **top: Any) -> bytes:
    return json.dumps({"text": "abcd", "output_ids": [1, 2, 3, 4], "meta_info": meta, **top}).encode()


def _meta(**kw: Any) -> dict[str, Any]:
    return {"id": "r", "finish_reason": FIN, "prompt_tokens": 3, "completion_tokens": 4, "cached_tokens": 0, **kw}


NATIVE_BAD = [
    (_native("oops"), "chunk.meta_info: expected an object, got a string 'oops'"),
    (_native([1, 2]), "chunk.meta_info: expected an object, got a list [1, 2]"),
    (_native(5), "chunk.meta_info: expected an object, got an integer 5"),
    (_native(_meta(completion_tokens="4")), "chunk.meta_info.completion_tokens: expected a non-negative integer, "
                                            "got a string '4'"),
    (_native(_meta(completion_tokens=[4])), "chunk.meta_info.completion_tokens: expected a non-negative integer"),
    (_native(_meta(completion_tokens=True)), "completion_tokens: expected a non-negative integer, got a boolean"),
    (_native(_meta(completion_tokens=4.5)), "completion_tokens: expected a non-negative integer, got a number 4.5"),
    (_native(_meta(completion_tokens=-4)), "completion_tokens: expected a non-negative integer, got an integer -4"),
    (_native(_meta(completion_tokens=2**31)), "completion_tokens: expected a count of at most 2147483647, got an "
                                              "integer 2147483648"),
    (_native(_meta(spec_verify_ct=10**30)), "chunk.meta_info.spec_verify_ct: expected a count of at most 2147483647"),
    (_native(_meta(prompt_tokens={"n": 3})), "chunk.meta_info.prompt_tokens: expected a non-negative integer"),
    (_native(_meta(cached_tokens="0")), "chunk.meta_info.cached_tokens: expected a non-negative integer"),
    (_native(_meta(spec_verify_ct=-1)), "chunk.meta_info.spec_verify_ct: expected a non-negative integer"),
    (_native(_meta(spec_verify_ct="2")), "chunk.meta_info.spec_verify_ct: expected a non-negative integer"),
    (_native(_meta(spec_accept_length="x")), "chunk.meta_info.spec_accept_length: expected a finite non-negative"),
    (_native(_meta(e2e_latency=[1])), "chunk.meta_info.e2e_latency: expected a finite non-negative number"),
    (_native(_meta(finish_reason=7)), "chunk.meta_info.finish_reason: expected an object, got an integer 7"),
    (_native(_meta(finish_reason={"type": 3})), "chunk.meta_info.finish_reason.type: expected a string"),
    (_native(_meta(finish_reason={})), "chunk.meta_info.finish_reason.type: expected a string, got null"),
    (_native(_meta(id=12)), "chunk.meta_info.id: expected a string, got an integer 12"),
    (_native(_meta(), output_ids=[1, "2"]), "chunk.output_ids[1]: expected a non-negative integer token id"),
    (_native(_meta(), output_ids="1 2"), "chunk.output_ids: expected a list"),
    (_native(_meta(), text=5), "chunk.text: expected a string"),
    (b"[1, 2]", "chunk: expected a JSON object, got a list [1, 2]"),
    (b"[" * 100_000 + b"]" * 100_000, "undecodable chunk"),
    (b'{"meta_info": {"completion_tokens": ' + b"9" * 5000 + b"}}", "undecodable chunk"),
    (b'{"meta_info": {"completion_tokens": 1e999, "finish_reason": null}}', "expected a non-negative integer"),
    # nested far less than the decoder's limit but far more than any repr or encoder downstream should recurse into
    (b'{"meta_info": {"completion_tokens": ' + b"[" * 900 + b"]" * 900 + b'}}',
     "completion_tokens: expected a non-negative integer, got a list [[[[...]]]]"),
    (b'{"error": {"message": ' + b"[" * 900 + b"]" * 900 + b'}}', None),
    (b'{"meta_info": {"finish_reason": {"type": "abort", "message": ' + b"[" * 900 + b"]" * 900 + b'}}}', None),
]


@pytest.mark.parametrize("keep_text", [False, True])
@pytest.mark.parametrize("chunk, says", NATIVE_BAD)
def test_a_native_chunk_of_the_wrong_type_is_a_malformed_answer_naming_its_field(chunk: bytes, says: Optional[str],
                                                                                   keep_text: bool) -> None:
    p = SGLangNativeParser(keep_text)
    assert p.feed(_native(_meta(finish_reason=None, completion_tokens=1))) == 1
    assert p.feed(chunk) == 0
    m = p.meta()
    if says is None:  # the server's own error: recorded as its error, shortened
        assert m.malformed is None and m.error is not None and m.error.endswith("[[[[...]]]]"), m.error
        return
    assert m.malformed is not None and says in m.malformed, m.malformed
    assert m.completion_tokens == 1  # nothing of the malformed chunk was taken
    assert all(v is None or isinstance(v, (int, float, str, list)) and not isinstance(v, bool)
               for v in (m.prompt_tokens, m.cached_tokens, m.spec_verify_ct, m.finish_reason))


def _oai(**top: Any) -> bytes:
    doc = {"id": "c", "choices": [{"index": 0, "text": "a", "finish_reason": "length"}],
           "usage": {"prompt_tokens": 3, "completion_tokens": 4}}
    doc.update(top)
    return json.dumps(doc).encode()


OPENAI_BAD = [
    (_oai(choices="a"), "chunk.choices: expected a list, got a string 'a'"),
    (_oai(choices=[5]), "chunk.choices[0]: expected an object, got an integer 5"),
    (_oai(choices=[{"text": 5, "finish_reason": "stop"}]), "chunk.choices[0].text: expected a string"),
    (_oai(choices=[{"delta": "x", "finish_reason": "stop"}]), "chunk.choices[0].delta: expected an object"),
    (_oai(choices=[{"delta": {"content": 1}}]), "chunk.choices[0].delta.content: expected a string"),
    (_oai(choices=[{"text": "a", "finish_reason": 1}]), "chunk.choices[0].finish_reason: expected a string"),
    (_oai(usage=[4]), "chunk.usage: expected an object, got a list [4]"),
    (_oai(usage={"completion_tokens": "4"}), "chunk.usage.completion_tokens: expected a non-negative integer"),
    (_oai(usage={"completion_tokens": 4, "prompt_tokens": -3}), "chunk.usage.prompt_tokens: expected a non-negative"),
    (_oai(usage={"completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": "1"}}),
     "chunk.usage.prompt_tokens_details.cached_tokens: expected a non-negative integer"),
    (_oai(sglext={"spec_tokens_details": {"spec_verify_ct": -2}}),
     "chunk.sglext.spec_tokens_details.spec_verify_ct: expected a non-negative integer, got an integer -2"),
    (_oai(sglext="x"), "chunk.sglext: expected an object"),
    (_oai(id=["c"]), "chunk.id: expected a string"),
    (b'"just a string"', "chunk: expected a JSON object, got a string"),
]


@pytest.mark.parametrize("keep_text", [False, True])
@pytest.mark.parametrize("chunk, says", OPENAI_BAD)
def test_an_openai_chunk_of_the_wrong_type_is_a_malformed_answer_naming_its_field(chunk: bytes, says: str,
                                                                                   keep_text: bool) -> None:
    p = OpenAIStreamParser(keep_text)
    assert p.feed(b'{"id":"c","choices":[{"index":0,"text":"x","finish_reason":null}],"usage":null}') == 1
    assert p.feed(chunk) == 0
    m = p.meta()
    assert m.malformed is not None and says in m.malformed, m.malformed
    assert m.finish_reason is None and m.completion_tokens == 1


@pytest.mark.parametrize("engine, doc, says", [
    (SGLangEngine(), "text", "the /generate answer: expected an object, got a string 'text'"),
    (SGLangEngine(), [], "expected an object or a one-element list, got an empty list"),
    (SGLangEngine(), [5], "the /generate answer[0]: expected an object, got an integer 5"),
    (SGLangEngine(), {"text": "a", "meta_info": "m"}, "the /generate answer.meta_info: expected an object"),
    (SGLangEngine(), {"text": "a", "meta_info": {"completion_tokens": "3"}},
     "the /generate answer.meta_info.completion_tokens: expected a non-negative integer, got a string '3'"),
    (SGLangEngine(), {"text": "a", "meta_info": {"spec_verify_ct": -1}}, "spec_verify_ct: expected a non-negative"),
    (SGLangEngine(), {"text": ["a"], "meta_info": {}}, "the /generate answer.text: expected a string"),
    (SGLangEngine(), {"text": "a", "output_ids": 3, "meta_info": {}}, "output_ids: expected a list"),
    (VLLMEngine(), [1], "the /v1/completions answer: expected an object, got a list"),
    (VLLMEngine(), {"choices": "a"}, "the /v1/completions answer.choices: expected a list"),
    (VLLMEngine(), {"choices": [1]}, "the /v1/completions answer.choices[0]: expected an object"),
    (VLLMEngine(), {"choices": [{"text": "a"}], "usage": {"completion_tokens": 2.5}}, "usage.completion_tokens"),
])
def test_a_gate_answer_of_the_wrong_type_is_malformed(engine: Engine, doc: Any, says: str) -> None:
    with pytest.raises(MalformedAnswerError, match=says.replace("[", r"\[").replace("]", r"\]")):
        engine.parse_gate_response(doc)


def test_well_typed_gate_answers_still_parse() -> None:
    got = SGLangEngine().parse_gate_response([{"text": "ok", "output_ids": [5, 6], "meta_info": {
        "completion_tokens": 2, "finish_reason": {"type": "stop"}, "spec_verify_ct": 1}}])
    assert got == GateOutput(text="ok", token_ids=(5, 6), completion_tokens=2, finish_reason="stop", spec_verify_ct=1)
    got = VLLMEngine().parse_gate_response({"choices": [{"text": "ok", "finish_reason": "length"}],
                                            "usage": {"completion_tokens": 2}})
    assert got == GateOutput(text="ok", completion_tokens=2, finish_reason="length")
    # an empty id list is no ids (the prefix rule then compares words)
    got = SGLangEngine().parse_gate_response({"text": "ok", "output_ids": [], "meta_info": {}})
    assert got.token_ids is None and got.error is None
