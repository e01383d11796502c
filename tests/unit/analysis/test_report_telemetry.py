"""The report shows power and SM clock over time per variant and the kernel breakdown, labelled simulated."""

from __future__ import annotations

from pathlib import Path

from cluster.analysis.kernel_profile import kernel_profile_rows
from cluster.kernel.profile_summary import ProfileSummary, KernelTime
from cluster.analysis.report import build_report
from cluster.dataset.store import DatasetStore
from cluster.plan.runs import make_plan
from cluster.config.loader import parse_spec_text
from cluster.telemetry.readings import GpuReading
from cluster.telemetry.recorder import readings_table
from cluster.analysis.results import Results
from cluster.kernel.run_row import RunRow

SPEC = """
version: 1
name: tele
model: {path: sim://qwen, engine: sim, tp: 2}
variants:
  - {name: baseline, baseline: true}
  - {name: hot}
workloads:
  - {name: chat, input_tokens: 16, output_tokens: 16, num_requests: 8}
load: {concurrency: [1, 4]}
"""


def test_report_has_telemetry_and_kernel_figures(tmp_path: Path) -> None:
    spec = parse_spec_text(SPEC)
    store = DatasetStore(str(tmp_path), "tele")
    for p in make_plan(spec):
        clock = 1400 if p.variant.name == "hot" else 2400
        rows = [(i * 100_000_000, GpuReading(gpu=g, power_w=300.0 + i, energy_j=300.0 * i / 10, sm_clock_mhz=clock))
                for i in range(0, 60) for g in ("0", "1")]
        metrics = {"output_tok_s": 70.0, "n_ok": 8, "n_requests": 8, "energy_j_per_output_token": 8.5,
                   "sm_clock_mhz_mean": float(clock), "sm_clock_mhz_p10": float(clock)}
        store.commit_run(p, RunRow(status="ok", duration_s=5.0, metrics=metrics), store.new_staging(p.run_key),
                         tables={"gpu_metrics": readings_table(rows, "sim")})
    for v, moe in (("baseline", 0.5), ("hot", 0.4)):
        summary = ProfileSummary("kernel", (KernelTime("fused_moe_kernel", "moe", 10, moe * 100, moe),
                                            KernelTime("nvjet_gemm", "gemm", 10, (1 - moe) * 100, 1 - moe)),
                                 {"moe": moe * 100, "gemm": (1 - moe) * 100}, 100.0, ("p-TP-0.trace.json.gz",), True)
        store.write_variant_table("kernel_profile", v, f"profile-{v}", kernel_profile_rows("tele", "sim", 5, summary,
                                                                                          None))
    page = build_report(Results.open(str(tmp_path), "tele"), out_dir=str(tmp_path / "rep"), n_boot=50).read_text()
    assert (tmp_path / "rep" / "telemetry_chat_concurrency.png").stat().st_size > 1000
    assert (tmp_path / "rep" / "kernel_breakdown.png").stat().st_size > 1000
    assert "SIMULATED device model" in page and "SIMULATED trace" in page
    assert "J/token" in page and "8.50" in page
    assert "SM clock mean 1400 MHz vs the baseline&#x27;s 2400 MHz" in page or "SM clock mean 1400" in page
