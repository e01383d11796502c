"""A real SGLang 0.5.23 server on the CPU, driven directly: the torch_native baseline on the echo MiMo model.

One server start (the session's `oracle_baseline`, conftest.py) serves every check here: greedy tokens, the recorded
wire shapes, and a kernel profile — sglbench's /start_profile body (engines/sglang.py) is accepted, the profiler stops
by itself after num_steps, /stop_profile is then a bare 500, and the torch profiler's chrome trace is summarised
(CPU ops: there are no device kernels on a CPU). NEXTN on the echo model (its greedy outputs against this oracle,
its transcript, its 400 on a negative budget) is asserted on the pipeline's NEXTN-3 server (test_pipeline.py), and
SGLang's speculative cap of 48 on the fault experiment's unset-cap server (test_pipeline_faults.py).
"""

from __future__ import annotations

from typing import Any

from record_transcripts import assert_keeps_recorded_shapes
from sglang_cpu_server import ORACLE_MAX_NEW_TOKENS, PROMPTS

from cluster.analysis.kernel_profile import summarize_traces
from cluster.telemetry.profile import archive_dir


def test_baseline_serves_greedy_tokens(oracle_baseline: dict[str, Any]) -> None:
    assert len(oracle_baseline["outputs"]) == len(PROMPTS)
    for out in oracle_baseline["outputs"]:
        assert out["meta_info"]["completion_tokens"] == ORACLE_MAX_NEW_TOKENS
        assert out["meta_info"]["finish_reason"]["type"] == "length"
        assert "spec_verify_ct" not in out["meta_info"]
    info = oracle_baseline["server_info"]
    assert info["speculative_algorithm"] is None and info["attention_backend"] == "torch_native"


def test_live_server_keeps_the_recorded_shapes(oracle_baseline: dict[str, Any]) -> None:
    """The committed contract fixture (recorded on the mix model) has the shapes a live server answers in."""
    assert_keeps_recorded_shapes("baseline", oracle_baseline["transcript"])


def test_real_server_profile_is_summarised(oracle_baseline: dict[str, Any]) -> None:
    prof = oracle_baseline["profile"]
    assert [f.name for f in prof["files"]] == ["sglbench-real-TP-0.trace.json.gz"], oracle_baseline["log_tail"]
    # num_steps stopped the profiler by itself: SGLang raises RuntimeError("Profiling is not in progress ...") in the
    # handler, which FastAPI answers as a bare 500 (the sim and the actor rely on this)
    assert prof["stop"] == (500, "Internal Server Error"), prof["stop"]
    s = summarize_traces(prof["files"])
    print(f"[sglang_cpu] profile: level {s.level}, {len(s.top)} top ops, first {s.top[0].kernel} "
          f"({s.top[0].share:.0%}), by category {({k: round(v) for k, v in s.by_category_us.items()})}")
    assert s.level in ("cpu_op", "kernel") and not s.simulated and s.top and s.total_us > 0
    data, sha, size, note = archive_dir(prof["out"], 64 << 20)
    assert data is not None and sha and note is None
