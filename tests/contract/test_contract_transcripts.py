"""The wire-contract assertions accept SGLang 0.5.23 transcripts and reject broken variants of them."""

from __future__ import annotations

import json

import pytest

import sglang_transcripts as T
from sglang_wire_contract import (
    check_flush,
    check_model_info,
    check_native_response,
    check_native_stream,
    check_openai_stream,
    check_server_info,
    split_sse,
)

from cluster.engines.streams import OpenAIStreamParser, SGLangNativeParser


def test_native_cumulative_transcript() -> None:
    chunks = check_native_stream(split_sse(T.NATIVE_STREAM_CUMULATIVE), speculative=True)
    assert chunks[-1]["meta_info"]["spec_accept_length"] == 2.5


def test_native_incremental_transcript() -> None:
    check_native_stream(split_sse(T.NATIVE_STREAM_INCREMENTAL), incremental=True)


def test_native_non_stream_transcript() -> None:
    check_native_response(T.NATIVE_NON_STREAM, speculative=False)


def test_openai_transcripts() -> None:
    check_openai_stream(split_sse(T.COMPLETIONS_STREAM_USAGE), chat=False, include_usage=True)
    check_openai_stream(split_sse(T.CHAT_STREAM_SPEC_USAGE), chat=True, include_usage=True, continuous_usage=True)


def test_info_and_flush_transcripts() -> None:
    check_server_info(T.SERVER_INFO)
    check_model_info(T.MODEL_INFO)
    check_flush(*T.FLUSH_OK, busy=False)
    check_flush(*T.FLUSH_BUSY, busy=True)


def test_parsers_on_transcripts() -> None:
    p = SGLangNativeParser()
    assert sum(p.feed(x) for x in split_sse(T.NATIVE_STREAM_CUMULATIVE)) == 5
    assert p.meta().spec_verify_ct == 2
    q = OpenAIStreamParser()
    assert sum(q.feed(x) for x in split_sse(T.CHAT_STREAM_SPEC_USAGE)) == 3
    assert q.meta().completion_tokens == 3 and q.meta().spec_verify_ct == 1


def _events(body: bytes) -> list[dict]:
    return [json.loads(p) for p in split_sse(body)]


def _sse(objs: list[dict]) -> bytes:
    return b"".join(b"data: " + json.dumps(o).encode() + b"\n\n" for o in objs) + b"data: [DONE]\n\n"


def test_rejects_missing_done() -> None:
    with pytest.raises(AssertionError):
        split_sse(T.NATIVE_STREAM_CUMULATIVE[: -len(b"data: [DONE]\n\n")])


def test_rejects_early_finish_reason_and_decreasing_tokens() -> None:
    ev = _events(T.NATIVE_STREAM_CUMULATIVE)
    bad = [dict(e, meta_info=dict(e["meta_info"])) for e in ev]
    bad[0]["meta_info"]["finish_reason"] = {"type": "length", "length": 1}
    with pytest.raises(AssertionError):
        check_native_stream(split_sse(_sse(bad)))
    bad2 = [dict(e, meta_info=dict(e["meta_info"])) for e in ev]
    bad2[1]["meta_info"]["completion_tokens"] = 0
    with pytest.raises(AssertionError):
        check_native_stream(split_sse(_sse(bad2)))


def test_rejects_usage_chunk_not_last() -> None:
    ev = _events(T.COMPLETIONS_STREAM_USAGE)
    reordered = [ev[0], ev[2], ev[1]]
    with pytest.raises(AssertionError):
        check_openai_stream(split_sse(_sse(reordered)), chat=False, include_usage=True)


def test_rejects_wrong_spec_accept_length() -> None:
    ev = _events(T.NATIVE_STREAM_CUMULATIVE)
    ev[-1]["meta_info"]["spec_accept_length"] = 3.0
    with pytest.raises(AssertionError):
        check_native_stream(split_sse(_sse(ev)))
