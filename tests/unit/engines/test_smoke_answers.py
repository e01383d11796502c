"""`smoke` against answers that are well-typed but impossible, or framed in ways SGLang's are not: each is one row
that names the real cause (the invariant, the encoding, the URL), never another check's failure."""

from __future__ import annotations

import gzip
import json
from typing import Any, Callable, Optional

import pytest

from cluster.engines.answer_invariants import INVARIANTS
from cluster.engines.http_call import ServerURLError
from cluster.engines.smoke import Check, run_smoke
from tests.fuzz.replay_server import ReplayServer, http, whole

SERVER_INFO = {"version": "0.5.23", "max_running_requests": 64, "internal_states": [{"x": 1}],
               "speculative_algorithm": "EAGLE", "speculative_num_steps": 2, "speculative_eagle_topk": 1,
               "speculative_num_draft_tokens": 3}


def _chunk(ct: int, fin: bool, **meta: Any) -> dict[str, Any]:
    m: dict[str, Any] = {"id": "r", "finish_reason": {"type": "length", "length": 16} if fin else None,
                         "prompt_tokens": 8, "num_retractions": 0, "completion_tokens": ct, "cached_tokens": 0}
    if fin:
        m["spec_verify_ct"] = 5
    m.update(meta)
    return {"text": "OK" * ct, "output_ids": list(range(ct)), "meta_info": m}


GOOD = [_chunk(ct, ct == 16) for ct in (1, 4, 7, 10, 13, 16)]
"""16 tokens (smoke's ignore_eos request) in 6 events: the prefill's and 5 verify steps of up to 3 tokens."""


def sse(chunks: list[dict[str, Any]], end: bytes = b"\n\n") -> bytes:
    return b"".join(b"data: " + json.dumps(c).encode() + end for c in chunks) + b"data: [DONE]" + end


def server(stream: bytes, encode: Optional[Callable[[bytes], bytes]] = None) -> Callable[[str, str], Any]:
    def answer(method: str, path: str) -> Any:
        body, ctype = {"/health": (b"", b"text/plain"), "/model_info": (b'{"model_path": "/m"}', b"application/json"),
                       "/server_info": (json.dumps(SERVER_INFO).encode(), b"application/json"),
                       "/generate": (stream, b"text/event-stream"),
                       "/flush_cache": (b"Cache flushed.", b"text/plain")}.get(path, (b"{}", b"application/json"))
        extra = b""
        if encode is not None:
            body, extra = encode(body), b"Content-Encoding: gzip\r\n"
        return whole(http(b"200 OK" if path != "/nope" else b"404 Not Found", body, ctype=ctype, extra=extra))
    return answer


def smoke(stream: bytes, encode: Optional[Callable[[bytes], bytes]] = None) -> list[Check]:
    with ReplayServer(server(stream, encode)) as srv:
        return run_smoke(srv.url, 5.0)


def failing(checks: list[Check]) -> dict[str, str]:
    return {c.name: c.found for c in checks if not c.ok}


def test_a_good_stream_passes_every_check_and_each_invariant_is_its_own_row() -> None:
    checks = smoke(sse(GOOD))
    assert failing(checks) == {}
    names = [c.name for c in checks]
    assert [f"invariant {i.name}" for i in INVARIANTS] == [n for n in names if n.startswith("invariant ")]


@pytest.mark.parametrize("chunks, invariant", [
    ([*GOOD[:-1], _chunk(16, True, spec_verify_ct=16)], "verify_steps_at_most_tokens"),
    ([*GOOD[:-1], _chunk(16, True, cached_tokens=9)], "cached_within_prompt"),
    ([_chunk(c["meta_info"]["completion_tokens"], c["meta_info"]["finish_reason"] is not None, prompt_tokens=0)
      for c in GOOD], "prompt_tokens_positive"),
    ([*GOOD[:3], _chunk(5, False), *GOOD[3:]], "completion_matches_events"),
    ([*GOOD[:2], _chunk(7, True), *GOOD[3:]], "finish_reason_last"),
    ([*GOOD[:-1], {**GOOD[-1], "output_ids": list(range(12))}], "output_ids_match_count"),
    ([_chunk(ct, ct == 16, spec_verify_ct=3) for ct in (1, 4, 7, 10, 13, 16)], "verify_steps_cover_events"),
])
def test_an_impossible_answer_fails_the_row_of_the_invariant_it_breaks(chunks: list[dict[str, Any]],
                                                                       invariant: str) -> None:
    bad = failing(smoke(sse(chunks)))
    assert f"invariant {invariant}" in bad, bad
    assert not any(c.startswith("invariant ") for c in bad if c != f"invariant {invariant}"), bad


def test_an_error_object_inside_the_stream_is_named_not_blamed_on_the_counts() -> None:
    stream = sse([{"error": {"message": "max_new_tokens must be at least 0, got -1.", "code": 400}}])
    bad = failing(smoke(stream))
    assert list(bad) == ["invariant no_error_event"] and "max_new_tokens must be at least 0" in bad[
        "invariant no_error_event"], bad


def test_crlf_event_ends_are_sse_and_pass() -> None:
    assert failing(smoke(sse(GOOD, end=b"\r\n\r\n"))) == {}


def test_a_gzip_body_is_decoded_and_passes() -> None:
    assert failing(smoke(sse(GOOD), encode=gzip.compress)) == {}


@pytest.mark.parametrize("encoding, body, says", [
    (b"br", b"xx", "Content-Encoding 'br', which sglbench does not decode"),
    (b"gzip", b"not gzip at all", "not valid gzip"),
    (b"gzip", gzip.compress(b"{}", mtime=0)[:-6], "gzip body is truncated"),
    (b"gzip", gzip.compress(b"0" * 5000, mtime=0), "larger than 1000 bytes once gzip-decoded"),
], ids=["br", "not-gzip", "gzip-truncated", "gzip-too-large"])  # gzip's header holds a time: the same ids on every
# xdist worker need fixed ids (and mtime=0), or the workers collect different tests and the run stops
def test_an_encoding_a_control_call_cannot_decode_is_refused_by_name(encoding: bytes, body: bytes,
                                                                       says: str) -> None:
    from cluster.engines.http_call import call
    from cluster.errors import SglbenchError, exit_code_of

    with ReplayServer(lambda m, p: whole(http(b"200 OK", body, extra=b"Content-Encoding: " + encoding + b"\r\n"))
                      ) as srv:
        with pytest.raises(SglbenchError, match=says) as e:
            call(srv.url, "/server_info", timeout_s=5.0, max_body_bytes=1000)
    assert exit_code_of(e.value) == 4


def test_a_v1_suffix_is_refused_naming_the_openai_prefix_before_any_call() -> None:
    with ReplayServer(server(sse(GOOD))) as srv:
        with pytest.raises(ServerURLError, match=r"ends in /v1.*give http://127\.0\.0\.1:\d+"):
            run_smoke(srv.url + "/v1", 5.0)
        assert srv.requests == []


@pytest.mark.parametrize("url", ["http://[::1:30000", "http://[::1", "http://[fe80::1/x"])
def test_an_ipv6_url_with_an_unclosed_bracket_is_a_url_error(url: str) -> None:
    with pytest.raises(ServerURLError, match=r"'\[' is not closed"):
        run_smoke(url, 1.0)


def test_the_cli_exits_1_and_its_error_line_names_the_broken_invariant() -> None:
    from typer.testing import CliRunner

    from cluster.cli import app

    chunks = [*GOOD[:-1], _chunk(16, True, spec_verify_ct=16)]
    with ReplayServer(server(sse(chunks))) as srv:
        res = CliRunner().invoke(app, ["smoke", srv.url, "--timeout", "5"])
    assert res.exit_code == 1, res.output
    flat = " ".join(res.output.split())
    assert "error: smoke: 1 check(s) of" in flat and "answer invariant(s) broken: verify_steps_at_most_tokens" in flat


def test_the_idle_flush_waits_for_the_server_to_release_its_last_request() -> None:
    """Real SGLang 0.5.23 answered '400 Flush cache failed.' right after smoke's own streams (a request still being
    released: tests/sglang_cpu/test_pipeline.py failed once on it); the load runner's flush asks again, and so does
    smoke's, within FLUSH_IDLE_WAIT_S. Before: one POST, the row failed."""
    good = server(sse(GOOD))
    refused = {"left": 2}

    def answer(method: str, path: str) -> Any:
        if path == "/flush_cache" and refused["left"] > 0:
            refused["left"] -= 1
            return whole(http(b"400 Bad Request", b"Flush cache failed.\n", ctype=b"text/plain"))
        return good(method, path)

    with ReplayServer(answer) as srv:
        checks = run_smoke(srv.url, 5.0)
    row = next(c for c in checks if c.name == "POST /flush_cache when idle")
    assert row.ok and "(after 3 tries)" in row.found, row
