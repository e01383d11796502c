"""Kernel profiles: the simulator's synthetic chrome trace, its summary by category, the reproducible archive."""

from __future__ import annotations

import gzip
import json
import tarfile
import io
from pathlib import Path

import pytest

from cluster.analysis.kernel_profile import category, kernel_profile_rows, summarize_traces, trace_files
from cluster.kernel.records import KERNEL_PROFILE_SCHEMA
from cluster.sim.profiler import NOT_IN_PROGRESS, SIM_KERNELS, SimProfiler
from cluster.telemetry.profile import archive_dir, wait_for_traces


def test_sim_profiler_stops_by_itself_after_num_steps_like_sglang(tmp_path: Path) -> None:
    prof = SimProfiler(tp_size=2)
    assert prof.start({"output_dir": str(tmp_path), "num_steps": 3, "profile_id": "p1"}) is None
    assert prof.start({}) is not None, "a second start is refused"
    for i in range(5):
        prof.on_step(100.0 + i * 0.02, 0.014, batch=4)
    assert not prof.active and len(prof.steps) == 3
    assert prof.stop() == NOT_IN_PROGRESS
    files = trace_files(tmp_path)
    assert [p.name for p in files] == ["p1-TP-0.trace.json.gz", "p1-TP-1.trace.json.gz"]
    doc = json.loads(gzip.decompress(files[0].read_bytes()))
    assert doc["otherData"]["sglbench_simulated"] is True
    assert len(doc["traceEvents"]) == 3 * len(SIM_KERNELS)
    s = summarize_traces(files)
    assert s.level == "kernel" and s.simulated and s.top[0].kernel == "fused_moe_kernel"
    assert s.top[0].calls == 6 and s.top[0].share == pytest.approx(0.48)
    assert s.by_category_us["moe"] == pytest.approx(0.48 * s.total_us)
    assert {k.category for k in s.top} == {"moe", "gemm", "attention", "communication", "other"}
    rows = kernel_profile_rows("e", "sim", 3, s, "/x/a.tar.gz")
    assert rows.schema == KERNEL_PROFILE_SCHEMA and rows.column("rank").to_pylist() == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("name,cat", [
    ("fused_moe_kernel", "moe"), ("void cutlass::Kernel2<cutlass_moe_grouped_gemm>", "moe"),
    ("nvjet_tst_128x64_64x5_1x2_h_bz_coopA_NNT", "gemm"), ("ampere_bf16_s16816gemm_bf16_128x128", "gemm"),
    ("BatchDecodeWithPagedKVCacheKernel", "attention"), ("flash_fwd_splitkv_kernel", "attention"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "communication"), ("cross_device_reduce_1stage", "communication"),
    ("triton_red_fused_add_rms_norm_0", "other")])
def test_categories(name: str, cat: str) -> None:
    assert category(name) == cat


def test_cpu_only_trace_is_summarised_over_cpu_ops(tmp_path: Path) -> None:
    doc = {"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "dur": 30.0},
                           {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "dur": 10.0},
                           {"ph": "X", "cat": "python_function", "name": "forward", "dur": 99.0},
                           {"ph": "i", "cat": "cpu_op", "name": "marker"}]}
    (tmp_path / "t.json").write_text(json.dumps(doc))
    s = summarize_traces([tmp_path / "t.json"])
    assert s.level == "cpu_op" and not s.simulated and s.top[0].calls == 2 and s.top[0].total_us == 40.0
    assert s.top[0].category == "gemm"


def test_archive_is_reproducible_and_capped(tmp_path: Path) -> None:
    (tmp_path / "a.trace.json.gz").write_bytes(gzip.compress(b"{}"))
    (tmp_path / ".partial.tmp").write_bytes(b"x")
    assert [p.name for p in wait_for_traces(tmp_path, 1, timeout_s=5, poll_s=0.05)] == ["a.trace.json.gz"]
    data, sha, size, note = archive_dir(tmp_path, 1 << 20)
    again = archive_dir(tmp_path, 1 << 20)
    assert data is not None and sha == again[1] and note is None and size == len(data)
    names = tarfile.open(fileobj=io.BytesIO(data), mode="r:gz").getnames()
    assert names == ["a.trace.json.gz"]
    none, no_sha, _, over = archive_dir(tmp_path, 10)
    assert none is None and no_sha is None and over is not None and "over the cap" in over
