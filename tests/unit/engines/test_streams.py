"""SSE payload parsers on hand-written SGLang native and OpenAI-compatible chunks."""

from __future__ import annotations

import json
from typing import Any

from cluster.engines.streams import OpenAIStreamParser, SGLangNativeParser


def _native(text: str, ids: list[int], ct: int, finish: Any = None, **extra: Any) -> bytes:
    meta: dict[str, Any] = {
        "id": "r1", "finish_reason": finish, "prompt_tokens": 7, "weight_version": "default",
        "num_retractions": 0, "reasoning_tokens": 0, "completion_tokens": ct, "cached_tokens": 2,
    }
    meta.update(extra)
    return json.dumps({"text": text, "output_ids": ids, "meta_info": meta}).encode()


def test_native_cumulative_one_token_per_chunk() -> None:
    p = SGLangNativeParser()
    counts = [p.feed(_native("a" * k, list(range(k)), k)) for k in range(1, 5)]
    counts.append(p.feed(_native("a" * 5, list(range(5)), 5, {"type": "length", "length": 5}, e2e_latency=0.5)))
    assert counts == [1, 1, 1, 1, 1]
    m = p.meta()
    assert (m.completion_tokens, m.prompt_tokens, m.cached_tokens) == (5, 7, 2)
    assert m.finish_reason == "length"
    assert m.server_e2e_s == 0.5
    assert m.error is None
    assert m.output_ids_tail == [0, 1, 2, 3, 4]


def test_native_speculative_chunks_carry_several_tokens() -> None:
    p = SGLangNativeParser(keep_text=True)
    counts = [
        p.feed(_native("x", [1], 1)),
        p.feed(_native("xyz", [1, 2, 3], 3)),
        p.feed(_native("xyzuvw", [1, 2, 3, 4, 5, 6], 6)),
        p.feed(_native("xyzuvwq", [1, 2, 3, 4, 5, 6, 7], 7, {"type": "stop", "matched": 2},
                       spec_verify_ct=3, spec_accept_length=7 / 3)),
    ]
    assert counts == [1, 2, 3, 1]
    m = p.meta()
    assert m.completion_tokens == 7 and m.spec_verify_ct == 3
    assert m.finish_reason == "stop"
    assert abs((m.spec_accept_length_server or 0) - 7 / 3) < 1e-9
    assert p.text() == "xyzuvwq"


def test_native_fast_path_with_spaces_and_without() -> None:
    p = SGLangNativeParser()
    spaced = b'{"text": "ab", "output_ids": [1, 2], "meta_info": {"finish_reason": null, "completion_tokens": 2}}'
    compact = b'{"text":"abcd","output_ids":[1,2,3,4],"meta_info":{"finish_reason":null,"completion_tokens":4}}'
    assert p.feed(spaced) == 2
    assert p.feed(compact) == 2
    assert p.meta().completion_tokens == 4


def test_native_incremental_chunks() -> None:
    # --incremental-streaming-output: text/ids are deltas but completion_tokens stays cumulative
    p = SGLangNativeParser(keep_text=True)
    assert p.feed(_native("he", [1], 1)) == 1
    assert p.feed(_native("llo", [2, 3], 3)) == 2
    assert p.feed(_native("!", [4], 4, {"type": "length", "length": 4})) == 1
    assert p.text() == "hello!"
    assert p.meta().completion_tokens == 4


def test_native_error_and_abort_chunks() -> None:
    p = SGLangNativeParser()
    assert p.feed(_native("a", [1], 1)) == 1
    err = {"error": {"message": "prompt too long", "type": "invalid_request_error", "code": 400}}
    assert p.feed(json.dumps(err).encode()) == 0
    assert p.meta().error == "prompt too long"

    p2 = SGLangNativeParser()
    assert p2.feed(_native("a", [1], 1, {"type": "abort", "message": "server shutting down"})) == 1
    assert p2.meta().error == "server shutting down"
    assert p2.meta().finish_reason == "abort"

    p3 = SGLangNativeParser()
    assert p3.feed(b"{truncated") == 0
    assert "undecodable" in (p3.meta().malformed or "")


def _oai(content: str | None, usage_ct: int | None = None, finish: str | None = None, chat: bool = True,
         choices: bool = True, **extra: Any) -> bytes:
    obj: dict[str, Any] = {"id": "cmpl-1", "object": "chat.completion.chunk" if chat else "text_completion"}
    if choices:
        ch: dict[str, Any] = {"index": 0, "finish_reason": finish}
        if chat:
            ch["delta"] = {"content": content} if content is not None else {"role": "assistant"}
        else:
            ch["text"] = content or ""
        obj["choices"] = [ch]
    else:
        obj["choices"] = []
    if usage_ct is not None:
        obj["usage"] = {"prompt_tokens": 9, "completion_tokens": usage_ct, "total_tokens": 9 + usage_ct,
                        "prompt_tokens_details": {"cached_tokens": 4}}
    obj.update(extra)
    return json.dumps(obj).encode()


def test_openai_continuous_usage_spec_chunks_and_usage_chunk() -> None:
    p = OpenAIStreamParser(keep_text=True)
    counts = [
        p.feed(_oai(None, 0)),  # role-only first chunk carries no token
        p.feed(_oai("a", 1)),
        p.feed(_oai("bcd", 4)),  # speculative chunk: three tokens
        p.feed(_oai("e", 5, finish="length")),
        p.feed(_oai(None, 5, choices=False)),  # final usage chunk
        p.feed(_oai(None, choices=False, sglext={"spec_tokens_details": {"spec_verify_ct": 3,
                                                                          "spec_accept_length": 5 / 3}})),
    ]
    assert counts == [0, 1, 3, 1, 0, 0]
    m = p.meta()
    assert (m.completion_tokens, m.prompt_tokens, m.cached_tokens, m.spec_verify_ct) == (5, 9, 4, 3)
    assert m.finish_reason == "length"
    assert p.text() == "abcde"


def test_openai_without_continuous_usage_counts_content_chunks() -> None:
    p = OpenAIStreamParser()
    counts = [p.feed(_oai(t, chat=False)) for t in ["a", "b", "c"]]
    counts.append(p.feed(_oai("", chat=False, finish="stop")))
    counts.append(p.feed(_oai(None, 4, choices=False, chat=False)))
    assert counts == [1, 1, 1, 0, 0]
    m = p.meta()
    assert m.completion_tokens == 4  # the server's usage wins over the client's chunk count
    assert m.finish_reason == "stop"


def test_openai_error_chunk() -> None:
    p = OpenAIStreamParser()
    assert p.feed(_oai("a", 1)) == 1
    assert p.feed(json.dumps({"error": {"message": "boom", "code": 500}}).encode()) == 0
    assert p.meta().error == "boom"


def test_fast_paths_agree_with_full_json_path() -> None:
    """keep_text=True forces the full JSON decode of every chunk: counts and meta must match the hot path."""
    oai = [
        _oai(None, 0), _oai("a", 1), _oai('say "error" and "completion_tokens": 9', 3), _oai("bcd", 6),
        _oai("", 6), _oai("e", 7, finish="stop"), _oai(None, 7, choices=False),
    ]
    compact = [json.dumps(json.loads(c), separators=(",", ":")).encode() for c in oai]
    for seq in (oai, compact):
        fast, full = OpenAIStreamParser(), OpenAIStreamParser(keep_text=True)
        assert [fast.feed(c) for c in seq] == [full.feed(c) for c in seq] == [0, 1, 2, 3, 0, 1, 0]
        assert fast.meta() == full.meta()
    native = [_native("a", [1], 1), _native('"completion_tokens": 99', [1, 2, 3], 3),
              _native("abcd", [1, 2, 3, 4], 4, {"type": "length", "length": 4}, spec_verify_ct=2)]
    fast_n, full_n = SGLangNativeParser(), SGLangNativeParser(keep_text=True)
    assert [fast_n.feed(c) for c in native] == [full_n.feed(c) for c in native] == [1, 2, 1]
    assert fast_n.meta() == full_n.meta()


def _spy_full_decodes(p: OpenAIStreamParser | SGLangNativeParser) -> list[bytes]:
    """The payloads `p` hands to its full JSON decode from now on (the fast paths never do)."""
    decoded: list[bytes] = []
    full = p._feed_full

    def spy(payload: bytes) -> int:
        decoded.append(payload)
        return full(payload)

    p._feed_full = spy  # type: ignore[method-assign]
    return decoded


def test_openai_without_usage_counts_content_chunks_without_decoding_them() -> None:
    """A stream without per-chunk usage (continuous usage off): one token per non-empty text/content chunk, found
    by a key search; the empty, role-only, finishing and usage chunks take the JSON path and agree with it."""
    for chat in (True, False):
        seq = [_oai(None, chat=chat), _oai("a", chat=chat), _oai('say \\"text\\":\\"x', chat=chat),
               _oai("", chat=chat), _oai("b", chat=chat), _oai("c", chat=chat, finish="length"),
               _oai(None, 5, choices=False, chat=chat)]
        # the compact form of a content chunk, before the finishing one (an event after it is decoded, to be judged)
        seq[5:5] = [json.dumps(json.loads(c), separators=(",", ":")).encode() for c in seq[1:2]]
        fast, full = OpenAIStreamParser(), OpenAIStreamParser(keep_text=True)
        decoded = _spy_full_decodes(fast)
        counts = [fast.feed(c) for c in seq]
        assert counts == [full.feed(c) for c in seq] == [0, 1, 1, 0, 1, 1, 1, 0]
        assert fast.meta() == full.meta() and fast.meta().completion_tokens == 5
        # only the role-only or empty chunk, the empty one, the finishing and the usage chunk decode
        assert len(decoded) == 4


def test_sglang_mid_chunks_with_usage_null_take_the_fast_path() -> None:
    """SGLang 0.5.23 writes `"usage":null` (and `"matched_stop":null` after finish_reason) into every mid-stream
    completions chunk when continuous usage is off (CompletionStreamResponse.model_dump_json): a null usage is no
    usage, so each such chunk is one token found by the key search, not a full JSON decode. A chunk that names
    "usage" twice is not read by the fast path."""
    def sgl(text: str) -> bytes:
        return (b'{"id":"7f3a","object":"text_completion","created":1764720000,"model":"m","choices":[{"index":0,'
                b'"text":"' + text.encode() + b'","logprobs":null,"finish_reason":null,"matched_stop":null}],'
                b'"usage":null}')
    fast, full = OpenAIStreamParser(), OpenAIStreamParser(keep_text=True)
    decoded = _spy_full_decodes(fast)
    seq = [sgl("a"), sgl("b"), sgl("")]
    assert [fast.feed(c) for c in seq] == [full.feed(c) for c in seq] == [1, 1, 0]
    assert len(decoded) == 1  # the empty chunk only
    both = sgl("c")[:-1] + b',"usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8}}'
    p = OpenAIStreamParser()
    decoded = _spy_full_decodes(p)
    assert p.feed(both) == 5 and decoded == [both]  # JSON keeps the last "usage": its cumulative count


def test_native_fast_path_reads_meta_from_the_end_and_never_decodes_mid_stream_chunks() -> None:
    p = SGLangNativeParser()
    decoded = _spy_full_decodes(p)
    # text that quotes the key names (escaped in JSON) must not fool the search from the end
    tricky = json.dumps({"text": 'say \\"completion_tokens\\": 99, \\"finish_reason\\": 1', "output_ids": [1, 2, 3],
                         "meta_info": {"id": "r", "finish_reason": None, "completion_tokens": 3}}).encode()
    last_key = b'{"text":"a","meta_info":{"finish_reason":null,"completion_tokens":  5}}'
    assert p.feed(tricky) == 3
    assert p.feed(last_key) == 2
    assert decoded == []  # both took the fast path
    fin = _native("abcdef", [1, 2, 3, 4, 5, 6], 6, {"type": "length", "length": 6})
    assert p.feed(fin) == 1 and len(decoded) == 1  # only the finishing chunk is decoded in full
    assert p.meta().finish_reason == "length" and p.meta().completion_tokens == 6


def test_native_malformed_count_falls_back_to_full_decode() -> None:
    # a quoted count is not read as a number: the fast path falls back and the full decode names the field
    p = SGLangNativeParser()
    assert p.feed(b'{"meta_info":{"finish_reason":null,"completion_tokens":"7"}}') == 0
    assert p.meta().malformed == ("chunk.meta_info.completion_tokens: expected a non-negative integer, "
                                  "got a string '7'")
    p = SGLangNativeParser()
    assert p.feed(b'{"meta_info":{"finish_reason":null,"completion_tokens":8') == 0  # truncated: undecodable
    assert "undecodable" in (p.meta().malformed or "")
