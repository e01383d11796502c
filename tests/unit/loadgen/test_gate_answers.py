"""The correctness gate's calls against a loopback server replaying broken answers: each prompt ends within its own
deadline (a trickle or a never-ending body included) and a malformed answer is that prompt's error, never a raise."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from cluster.kernel.gate import GATE_PROMPTS
from cluster.engines.sglang import SGLangEngine
from cluster.loadgen.gate import collect_gate_answers
from tests.fuzz.replay_server import ReplayServer, Script, http, whole

GOOD = json.dumps({"text": "OK", "output_ids": [1, 2], "meta_info": {
    "completion_tokens": 2, "finish_reason": {"type": "length"}, "spec_verify_ct": 1}}).encode()


@pytest.mark.parametrize("script, says", [
    (whole(http(b"200 OK", json.dumps({"text": "OK", "meta_info": "m"}).encode())),
     "malformed answer: the /generate answer.meta_info: expected an object, got a string 'm'"),
    (whole(http(b"200 OK", json.dumps({"text": "OK", "meta_info": {"completion_tokens": "2"}}).encode())),
     "malformed answer: the /generate answer.meta_info.completion_tokens: expected a non-negative integer"),
    (whole(http(b"200 OK", b"[" * 100_000)), "nested at most 64 levels"),
    (whole(http(b"200 OK", b"not json")), "the answer's body: expected JSON"),
    (whole(b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 10_000_000 + b"\r\n\r\n"), "ClientResponseError"),
    (whole(b"NOT HTTP\r\n\r\n"), "ClientResponseError"),
    (whole(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"text\""), "ClientPayloadError"),
    (Script((b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n",), gap_s=0.05, then="trickle"),
     "timed out after 0.5 s (the call's whole deadline)"),
    (Script((b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{",), gap_s=0.05, then="trickle"),
     "timed out after 0.5 s (the call's whole deadline)"),
    (Script((b"HTTP/1.1 200 OK\r\n",), then="hang"), "timed out after 0.5 s (the call's whole deadline)"),
], ids=["meta-str", "count-str", "deep-json", "not-json", "10MB-header", "bad-status", "truncated", "trickle-body",
        "endless-body", "silent"])
def test_each_gate_prompt_ends_by_its_deadline_with_its_error(script: Script, says: str) -> None:
    with ReplayServer(lambda m, p: script) as srv:
        t0 = time.monotonic()
        answers = asyncio.run(collect_gate_answers(SGLangEngine(), srv.url, "m", timeout_s=0.5))
        took_s = time.monotonic() - t0
    assert len(answers.outputs) == len(GATE_PROMPTS)
    for out in answers.outputs.values():
        assert out.error is not None and says in out.error, out.error
        assert out.completion_tokens is None
    assert took_s < len(GATE_PROMPTS) * 0.5 + 1.5


def test_a_good_answer_still_parses() -> None:
    with ReplayServer(lambda m, p: whole(http(b"200 OK", GOOD))) as srv:
        answers = asyncio.run(collect_gate_answers(SGLangEngine(), srv.url, "m", timeout_s=5.0))
    assert {(o.text, o.completion_tokens, o.error) for o in answers.outputs.values()} == {("OK", 2, None)}
