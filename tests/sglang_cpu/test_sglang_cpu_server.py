"""Real SGLang 0.5.23 servers on the CPU: a torch_native baseline and NEXTN (1-3 draft steps) on the echo MiMo model."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from sglang_cpu_server import PROMPTS, SGLangCPUServer, accept_length, baseline_args, nextn_args

MAX_NEW_TOKENS = 32


def ideal_accept_length(steps: int, n_tokens: int = MAX_NEW_TOKENS) -> float:
    """Every draft accepted: the first token comes from prefill, the rest in verify steps of steps+1 tokens."""
    return (n_tokens - 1) / math.ceil((n_tokens - 1) / (steps + 1))


def run_server(python: Path, model: Path, args: list[str], log: Path) -> tuple[SGLangCPUServer, list[dict]]:
    server = SGLangCPUServer(python=python, model=model, extra_args=args, log_path=log)
    try:
        server.start()
        print(f"[sglang_cpu] {log.stem}: healthy after {server.start_s:.1f} s")
        return server, server.greedy_outputs(MAX_NEW_TOKENS)
    finally:
        server.stop()


@pytest.fixture(scope="module")
def echo_baseline(sglang_cpu_python: Path, mimo_models: Path, tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """Greedy outputs of SGLang's own torch_native attention (no stand-in attention in the path): the oracle."""
    log = tmp_path_factory.mktemp("logs") / "echo_baseline.log"
    _, outs = run_server(sglang_cpu_python, mimo_models / "echo", baseline_args(), log)
    return outs


def test_baseline_serves_greedy_tokens(echo_baseline: list[dict]) -> None:
    assert len(echo_baseline) == len(PROMPTS)
    for out in echo_baseline:
        assert out["meta_info"]["completion_tokens"] == MAX_NEW_TOKENS
        assert out["meta_info"]["finish_reason"]["type"] == "length"
        assert "spec_verify_ct" not in out["meta_info"]


@pytest.mark.parametrize("steps", [3, pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow)])
def test_nextn_echo_matches_baseline_and_accepts_every_draft(
    sglang_cpu_python: Path, mimo_models: Path, echo_baseline: list[dict], steps: int, tmp_path: Path
) -> None:
    log = tmp_path / f"echo_nextn{steps}.log"
    server = SGLangCPUServer(python=sglang_cpu_python, model=mimo_models / "echo", extra_args=nextn_args(steps),
                             log_path=log)
    try:
        server.start()
        print(f"[sglang_cpu] NEXTN-{steps}: healthy after {server.start_s:.1f} s")
        outs = server.greedy_outputs(MAX_NEW_TOKENS)
        status, body = server.request("/server_info")
        assert status == 200
        info = json.loads(body)
        status, err = server.generate(PROMPTS[0], max_new_tokens=-1)
    finally:
        server.stop()
    assert [o["text"] for o in outs] == [o["text"] for o in echo_baseline], "NEXTN changed greedy outputs"
    acc = accept_length(outs)
    print(f"[sglang_cpu] NEXTN-{steps} echo accept length {acc:.3f} (ideal {ideal_accept_length(steps):.3f})")
    assert acc >= 0.97 * ideal_accept_length(steps), f"echo drafts should all be accepted, got {acc:.3f}"
    assert acc <= steps + 1 + 1e-9
    for out in outs:
        hist = out["meta_info"]["spec_correct_drafts_histogram"]
        assert len(hist) == steps + 1
    # What SGLang resolves for NEXTN on a CPU, observable for real.
    assert info["speculative_algorithm"] == "EAGLE"
    assert info["speculative_num_steps"] == steps
    assert info["attention_backend"] == "intel_amx"
    assert info["disable_overlap_schedule"] is True
    assert info["max_running_requests"] == 48
    assert status == 400 and "max_new_tokens" in err
