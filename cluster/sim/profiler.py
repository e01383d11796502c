"""The simulator's /start_profile and /stop_profile: a synthetic torch-profiler chrome trace of the next N steps.

SGLang 0.5.23 (managers/scheduler_components/profiler_manager.py, io_struct.ProfileReq) takes `output_dir`
(default env SGLANG_TORCH_PROFILER_DIR, else /tmp), `num_steps` (stop by itself after that many forward steps;
/stop_profile then raises "Profiling is not in progress. Call /start_profile first.", a bare 500), `activities`
and `profile_id` (default str(time.time())), and writes one `<profile_id>-TP-<rank>.trace.json.gz` per TP rank.
The simulator does the same with made-up kernels: each step's time is split over one GEMM, MoE, attention,
all-reduce and norm kernel in fixed shares (MoE about half of decode time, as sglang PR #29190 measured on SM120),
and the trace says `"sglbench_simulated": true` in its otherData.
"""

from __future__ import annotations

import gzip
import json
import os
import time
from pathlib import Path
from typing import Optional

from cluster.input_files import JsonObject, JsonValue

SIM_KERNELS: tuple[tuple[str, float], ...] = (
    ("fused_moe_kernel", 0.48),
    ("nvjet_tst_128x64_64x5_1x2_h_bz_coopA_NNT", 0.2),
    ("BatchDecodeWithPagedKVCacheKernel", 0.15),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 0.1),
    ("triton_red_fused_add_rms_norm_0", 0.07),
)
"""(kernel, share of a step's time): made-up names in the style of real SGLang traces."""
NOT_IN_PROGRESS = "Profiling is not in progress. Call /start_profile first."
ALREADY = "Profiling is already in progress. Call /stop_profile first."


class SimProfiler:
    def __init__(self, tp_size: int) -> None:
        self.tp_size = max(1, tp_size)
        self.active = False
        self.output_dir = Path("/tmp")
        self.profile_id = ""
        self.num_steps: Optional[int] = None
        self.steps: list[tuple[float, float, int]] = []
        """(start wall s, duration s, batch) of each recorded step."""

    def start(self, body: JsonObject) -> Optional[str]:
        """Start recording; the error message SGLang would give, or None."""
        if self.active:
            return ALREADY
        out = body.get("output_dir") or os.environ.get("SGLANG_TORCH_PROFILER_DIR", "/tmp")
        self.output_dir = Path(str(out)).expanduser()
        self.profile_id = str(body.get("profile_id") or time.time())
        n = body.get("num_steps")
        if not n:
            self.num_steps = None
        elif isinstance(n, (int, float, str)):
            self.num_steps = int(n)
        else:
            raise TypeError(f"int() argument must be a string or a number, not '{type(n).__name__}'")  # as int(n)
        self.steps = []
        self.active = True
        return None

    def on_step(self, start_s: float, duration_s: float, batch: int) -> None:
        if not self.active:
            return
        self.steps.append((start_s, duration_s, batch))
        if self.num_steps is not None and len(self.steps) >= self.num_steps:
            self.stop()

    def stop(self) -> Optional[str]:
        """Stop and write the traces; the error message SGLang would give, or None."""
        if not self.active:
            return NOT_IN_PROGRESS
        self.active = False
        self.output_dir.mkdir(parents=True, exist_ok=True)
        for rank in range(self.tp_size):
            events: list[dict[str, JsonValue]] = []
            for start_s, dur_s, batch in self.steps:
                t_us = start_s * 1e6
                for name, share in SIM_KERNELS:
                    d_us = dur_s * 1e6 * share
                    events.append({"ph": "X", "cat": "kernel", "name": name, "pid": rank, "tid": 7, "ts": t_us,
                                   "dur": d_us, "args": {"batch": batch, "device": rank}})
                    t_us += d_us
            doc = {"schemaVersion": 1, "traceEvents": events,
                   "otherData": {"sglbench_simulated": True, "profile_id": self.profile_id}}
            path = self.output_dir / f"{self.profile_id}-TP-{rank}.trace.json.gz"
            tmp = path.with_name("." + path.name + ".tmp")
            tmp.write_bytes(gzip.compress(json.dumps(doc).encode()))
            os.replace(tmp, path)
        return None
