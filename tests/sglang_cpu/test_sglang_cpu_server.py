"""Real SGLang 0.5.23 servers on the CPU, driven directly: a torch_native baseline and NEXTN-3 on the echo MiMo model.

Two server starts serve every check of this module (one server at a time: each fixture gathers what its tests assert
on, then stops its server). The NEXTN-1/2 acceptance on echo is asserted through the pipeline (test_pipeline.py).
The baseline server is also profiled last: sglbench's /start_profile body (engines/sglang.py) is accepted, the
profiler stops by itself after num_steps, /stop_profile is then a bare 500, and the torch profiler's chrome trace is
summarised (CPU ops: there are no device kernels on a CPU).
"""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from record_transcripts import FIXTURE_DIR, record_running, redaction_paths, shape_diffs
from sglang_cpu_server import PROMPTS, SGLangCPUServer, accept_length, baseline_args, nextn_args

from cluster.analysis.kernel_profile import summarize_traces
from cluster.dataset.run_rows import _peak_per_scrape, _series
from cluster.engines.sglang import SGLangEngine
from cluster.loadgen.server_metrics import MetricsScraper
from cluster.telemetry.profile import archive_dir, wait_for_traces

MAX_NEW_TOKENS = 32
STEPS = 3
OFFERED = 64
PROFILE_STEPS = 4


def ideal_accept_length(steps: int, n_tokens: int = MAX_NEW_TOKENS) -> float:
    """Every draft accepted: the first token comes from prefill, the rest in verify steps of steps+1 tokens."""
    return (n_tokens - 1) / math.ceil((n_tokens - 1) / (steps + 1))


def _burst(server: SGLangCPUServer) -> dict[str, Any]:
    """OFFERED concurrent requests with /metrics scraped at 10 Hz: what really ran at once, what queued."""
    engine = SGLangEngine()
    scraper = MetricsScraper(server.url + "/metrics", interval_s=0.1).start()
    t0 = time.time()
    codes: list[int] = []

    def one(i: int) -> None:
        codes.append(server.generate(PROMPTS[i % len(PROMPTS)] + f" {i}", max_new_tokens=64)[0])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(OFFERED)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=300)
    duration_s = time.time() - t0
    scraper.halt()
    batch = scraper.batch(t0)
    queue = _series(batch, engine.queue_gauge, duration_s)
    return {"codes": codes, "duration_s": duration_s,
            "running": _peak_per_scrape(batch, engine.running_gauge, duration_s),
            "queued": _peak_per_scrape(batch, engine.queue_gauge, duration_s),
            "queue_share": sum(1 for x in queue.values() if x > 0) / max(1, len(queue)), "scrapes": len(queue)}


def _serve(python: Path, models: Path, tag: str, args: list[str], log_dir: Path, nextn: bool) -> dict[str, Any]:
    server = SGLangCPUServer(python=python, model=models / "echo", extra_args=args, log_path=log_dir / f"{tag}.log")
    got: dict[str, Any] = {}
    try:
        server.start()
        print(f"[sglang_cpu] {tag}: healthy after {server.start_s:.1f} s")
        got["outputs"] = server.greedy_outputs(MAX_NEW_TOKENS)
        status, body = server.request("/server_info")
        assert status == 200, body[:500]
        got["server_info"] = json.loads(body)
        got["transcript"] = record_running(server, tag, redaction_paths(python, models, log_dir))
        if nextn:
            got["bad_max_new_tokens"] = server.generate(PROMPTS[0], max_new_tokens=-1)
            got["burst"] = _burst(server)
        else:
            got["profile"] = _profile(server, log_dir / "profile")
    finally:
        server.stop()
    got["log_tail"] = server.log_tail()
    return got


def _profile(server: SGLangCPUServer, out: Path) -> dict[str, Any]:
    """sglbench's own /start_profile body, two short requests, then the traces and /stop_profile's answer."""
    req = SGLangEngine().profile_request(str(out), PROFILE_STEPS, "sglbench-real", cpu=True)
    assert req is not None
    status, text = server.request(req.path, json.loads(req.body))
    assert status == 200, text
    for p in PROMPTS[:2]:
        assert server.generate(p, max_new_tokens=8)[0] == 200
    files = wait_for_traces(out, 1, timeout_s=120)
    stop = server.request("/stop_profile", {})
    return {"out": out, "files": files, "stop": stop}


@pytest.fixture(scope="module")
def baseline(sglang_cpu_python: Path, mimo_models: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """SGLang's own torch_native attention (no stand-in attention in the path): the oracle for greedy outputs."""
    return _serve(sglang_cpu_python, mimo_models, "baseline", baseline_args(), tmp_path_factory.mktemp("base"), False)


@pytest.fixture(scope="module")
def nextn(sglang_cpu_python: Path, mimo_models: Path, baseline: dict[str, Any],
          tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _serve(sglang_cpu_python, mimo_models, f"nextn{STEPS}", nextn_args(STEPS), tmp_path_factory.mktemp("nx"),
                  True)


def test_baseline_serves_greedy_tokens(baseline: dict[str, Any]) -> None:
    assert len(baseline["outputs"]) == len(PROMPTS)
    for out in baseline["outputs"]:
        assert out["meta_info"]["completion_tokens"] == MAX_NEW_TOKENS
        assert out["meta_info"]["finish_reason"]["type"] == "length"
        assert "spec_verify_ct" not in out["meta_info"]


def test_nextn_echo_matches_baseline_and_accepts_every_draft(baseline: dict[str, Any], nextn: dict[str, Any]) -> None:
    outs = nextn["outputs"]
    assert [o["text"] for o in outs] == [o["text"] for o in baseline["outputs"]], "NEXTN changed greedy outputs"
    acc = accept_length(outs)
    print(f"[sglang_cpu] NEXTN-{STEPS} echo accept length {acc:.3f} (ideal {ideal_accept_length(STEPS):.3f})")
    assert acc >= 0.97 * ideal_accept_length(STEPS), f"echo drafts should all be accepted, got {acc:.3f}"
    assert acc <= STEPS + 1 + 1e-9
    for out in outs:
        assert len(out["meta_info"]["spec_correct_drafts_histogram"]) == STEPS + 1


def test_server_info_shows_what_sglang_resolves_for_nextn_on_a_cpu(nextn: dict[str, Any]) -> None:
    info = nextn["server_info"]
    assert info["speculative_algorithm"] == "EAGLE"
    assert info["speculative_num_steps"] == STEPS
    assert info["attention_backend"] == "intel_amx"
    assert info["disable_overlap_schedule"] is True
    assert info["max_running_requests"] == 48
    status, err = nextn["bad_max_new_tokens"]
    assert status == 400 and "max_new_tokens" in err


def test_live_server_keeps_the_recorded_shapes(baseline: dict[str, Any], nextn: dict[str, Any]) -> None:
    """The committed contract fixtures (recorded on the mix model) have the shapes a live server answers in."""
    problems = []
    for tag, got in (("baseline", baseline), (f"nextn{STEPS}", nextn)):
        recorded = json.loads((FIXTURE_DIR / f"{tag}.json").read_text())
        problems += [f"{tag}.json: {d}" for d in shape_diffs(recorded, got["transcript"])]
    assert not problems, "SGLang's wire shapes changed; re-record with tests/sglang_cpu/record_transcripts.py " \
                         "and update the contract assertions:\n" + "\n".join(problems)


def test_real_nextn_server_caps_running_requests_at_48(nextn: dict[str, Any]) -> None:
    """The adapter reads the speculative cap of 48 with its source, and a burst of 64 really runs 48 at a time."""
    cap = SGLangEngine().concurrency_cap({"server_info": nextn["server_info"]})
    assert cap is not None and cap.value == 48 and cap.declared == 48
    assert cap.source == "server_info.internal_states[0].effective_max_running_requests_per_dp"
    b = nextn["burst"]
    assert b["codes"] == [200] * OFFERED
    print(f"[sglang_cpu] NEXTN-{STEPS} burst of {OFFERED} in {b['duration_s']:.1f} s: scraped max running "
          f"{b['running']}, max queued {b['queued']} (non-empty on {b['queue_share']:.0%} of {b['scrapes']} scrapes)")
    assert b["running"] is not None and b["queued"] is not None
    assert b["running"] <= 48 < OFFERED and b["queued"] > 0


def test_real_server_profile_is_summarised(baseline: dict[str, Any]) -> None:
    prof = baseline["profile"]
    assert [f.name for f in prof["files"]] == ["sglbench-real-TP-0.trace.json.gz"], baseline["log_tail"]
    # num_steps stopped the profiler by itself: SGLang raises RuntimeError("Profiling is not in progress ...") in the
    # handler, which FastAPI answers as a bare 500 (the sim and the actor rely on this)
    assert prof["stop"] == (500, "Internal Server Error"), prof["stop"]
    s = summarize_traces(prof["files"])
    print(f"[sglang_cpu] profile: level {s.level}, {len(s.top)} top ops, first {s.top[0].kernel} "
          f"({s.top[0].share:.0%}), by category {({k: round(v) for k, v in s.by_category_us.items()})}")
    assert s.level in ("cpu_op", "kernel") and not s.simulated and s.top and s.total_us > 0
    data, sha, size, note = archive_dir(prof["out"], 64 << 20)
    assert data is not None and sha and note is None
