"""The bad-answer corpus (tests/data/bad_responses/): each raw answer replayed to a control call and to a load
window's streaming request; each ends as the error the EXPECTED table names, never a traceback or a good request."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Optional

import pytest

from cluster.kernel.records import RequestRecord
from cluster.engines.http_call import call
from cluster.engines.streams import SGLangNativeParser
from cluster.errors import SglbenchError, exit_code_of
from cluster.loadgen.client import StreamPool, stream_request
from tests.fuzz.replay_server import ReplayServer, whole

CORPUS = Path(__file__).resolve().parents[2] / "data" / "bad_responses"

EXPECTED: dict[str, tuple[Optional[str], str]] = {
    # file: (what a control call raises, exit 4; None: a well-formed HTTP answer), (the window request's error)
    "header_too_long.http": ("the answer's headers are longer than 65536 bytes",
                             "malformed answer: response headers longer than 65536 bytes"),
    "status_line_bad.http": ("expected an HTTP/1.x status line, got b'HTTP/1.1 2xx OK'",
                             "malformed answer: not an HTTP/1.x status line: b'HTTP/1.1 2xx OK'"),
    "body_truncated.http": ("the answer's body truncated: expected 100 bytes, got 16",
                            "stream broken: connection closed mid-response"),
    "chunk_size_bad.http": ("expected a chunk size in hex digits, got b'zz'",
                            "malformed answer: malformed chunked body: expected a chunk size in hex digits, got b'zz'"),
    "json_too_deep.http": ("expected JSON nested at most 64 levels", "stream ended without a finish_reason"),
    "meta_info_string.http": (None, "malformed answer: chunk.meta_info: expected an object, got a string 'done'"),
    "completion_tokens_string.http": (None, "malformed answer: chunk.meta_info.completion_tokens: expected a "
                                            "non-negative integer, got a string '2'"),
    "spec_verify_ct_negative.http": (None, "malformed answer: chunk.meta_info.spec_verify_ct: expected a "
                                           "non-negative integer, got an integer -1"),
    "completion_tokens_past_int32.http": (None, "malformed answer: completion_tokens 3000000000 is past 2147483647"),
    "no_status_line.http": ("expected an HTTP/1.x status line, got b'{\"a\": 1}'",
                            "malformed answer: expected an HTTP/1.x status line, got b'{\"a\": 1}'"),
}


def test_the_corpus_and_the_table_name_the_same_cases() -> None:
    assert sorted(p.name for p in CORPUS.glob("*.http")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_control_call_names_what_is_wrong(name: str) -> None:
    says, _ = EXPECTED[name]
    with ReplayServer(lambda m, p: whole((CORPUS / name).read_bytes())) as srv:
        try:
            reply = call(srv.url, "/server_info", timeout_s=5.0)
            if name.startswith("json"):
                reply.json()
            got: Optional[str] = None
        except SglbenchError as e:
            assert exit_code_of(e) == 4
            got = str(e)
    assert (got is None) is (says is None) and (says is None or says in (got or "")), got


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_window_request_records_it_as_its_error(name: str) -> None:
    _, says = EXPECTED[name]

    async def one(url: str) -> RequestRecord:
        rec = RequestRecord(request_index=0, intended_send_ns=0, actual_send_ns=0, prompt_tokens_sent=3, max_tokens=2)
        async with StreamPool(url, 1) as pool:
            await stream_request(pool, "/generate", b"{}", SGLangNativeParser(), time.monotonic_ns(), 5.0, rec)
        return rec

    with ReplayServer(lambda m, p: whole((CORPUS / name).read_bytes())) as srv:
        rec = asyncio.run(one(srv.url))
    assert rec.error is not None and rec.error.startswith(says), rec.error
    assert rec.completion_tokens in (None, 0, 1) and rec.spec_verify_ct is None
