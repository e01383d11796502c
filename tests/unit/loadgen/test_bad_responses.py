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
    # well-typed and impossible: one per answer invariant (cluster/engines/answer_invariants.py), the request's
    # error names it (and the run that holds it is invalid naming it: tests/unit/analysis/test_run_row_answers.py)
    "spec_verify_ct_above_completion.http": (None, "answer invariant verify_steps_at_most_tokens: spec_verify_ct 2 > "
                                                   "completion_tokens 2 - 1"),
    "cached_tokens_above_prompt.http": (None, "answer invariant cached_within_prompt: cached_tokens 4 > "
                                              "prompt_tokens 3"),
    "prompt_tokens_zero.http": (None, "answer invariant prompt_tokens_positive: prompt_tokens 0"),
    "completion_tokens_went_down.http": (None, "answer invariant completion_matches_events: the cumulative "
                                               "completion_tokens went down from 2 to 1"),
    "finish_reason_mid_stream.http": (None, "answer invariant finish_reason_last: 1 event(s) with output after"),
    "output_ids_disagree.http": (None, "answer invariant output_ids_match_count: 5 output_ids but "
                                       "completion_tokens 2"),
    "verify_steps_below_events.http": (None, "answer invariant verify_steps_cover_events: 3 token-carrying events "
                                             "but spec_verify_ct 1 + num_retractions 0"),
    "error_object_in_stream.http": (None, "error chunk: max_new_tokens must be at least 0, got -1."),
    "content_encoding_br.http": ("Content-Encoding 'br', which sglbench does not decode",
                                 "malformed answer: the answer is in Content-Encoding 'br'"),
}
BROKEN_INVARIANT = {name for name, (_, says) in EXPECTED.items() if says.startswith("answer invariant ")}
"""Cases whose record keeps the counts the server sent (as evidence): the request is an error, so no figure uses
them."""


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
    if name not in BROKEN_INVARIANT:
        assert rec.completion_tokens in (None, 0, 1) and rec.spec_verify_ct is None
