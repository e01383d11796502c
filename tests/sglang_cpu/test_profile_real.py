"""A kernel profile of a real SGLang 0.5.23 server on the CPU: sglbench's /start_profile body (engines/sglang.py) is
accepted, the profiler stops by itself after num_steps, /stop_profile is then a bare 500, and the torch
profiler's chrome trace is summarised (CPU ops: there are no device kernels on a CPU)."""

from __future__ import annotations

import json
from pathlib import Path

from sglang_cpu_server import PROMPTS, SGLangCPUServer, baseline_args

from cluster.analysis.kernel_profile import summarize_traces
from cluster.engines.sglang import SGLangEngine
from cluster.telemetry.profile import archive_dir, wait_for_traces

STEPS = 4


def test_real_server_profile_is_summarised(sglang_cpu_python: Path, mimo_models: Path, tmp_path: Path) -> None:
    out = tmp_path / "profile"
    server = SGLangCPUServer(python=sglang_cpu_python, model=mimo_models / "echo", extra_args=baseline_args(),
                             log_path=tmp_path / "server.log")
    req = SGLangEngine().profile_request(str(out), STEPS, "sglbench-real", cpu=True)
    assert req is not None
    try:
        server.start()
        status, text = server.request(req.path, json.loads(req.body))
        assert status == 200, text
        for p in PROMPTS[:2]:
            assert server.generate(p, max_new_tokens=8)[0] == 200
        files = wait_for_traces(out, 1, timeout_s=120)
        status, text = server.request("/stop_profile", {})
    finally:
        server.stop()
    assert [f.name for f in files] == ["sglbench-real-TP-0.trace.json.gz"], server.log_tail()
    # num_steps stopped the profiler by itself: SGLang raises RuntimeError("Profiling is not in progress ...") in the
    # handler, which FastAPI answers as a bare 500 (the sim and the actor rely on this)
    assert status == 500 and text == "Internal Server Error", (status, text)
    s = summarize_traces(files)
    print(f"[sglang_cpu] profile: level {s.level}, {len(s.top)} top ops, first {s.top[0].kernel} "
          f"({s.top[0].share:.0%}), by category {({k: round(v) for k, v in s.by_category_us.items()})}")
    assert s.level in ("cpu_op", "kernel") and not s.simulated and s.top and s.total_us > 0
    data, sha, size, note = archive_dir(out, 64 << 20)
    assert data is not None and sha and note is None
