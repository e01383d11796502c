"""GPU check (Ray-free; needs only torch, Triton and the standard library; < 5 min on one GPU).

Device discovery, device-to-device copy bandwidth, BF16/FP8 GEMM throughput (roofline inputs), NVML telemetry under a
GEMM load (energy counter, power, clocks, throttle reasons; needs nvidia-ml-py), and the tuning
stage's GPU part (the fused-MoE Triton config search on a small shape, checked against a torch reference).
Prints a short table, and a note when the GPU is not the SM120 the Qwen3.5 NVFP4 study targets.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TARGET_SM = (12, 0)


def bench_ms(fn: Any, iters: int = 20) -> float:
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return float(start.elapsed_time(end)) / iters


def copy_ms(n_bytes: int) -> float:
    """Device-to-device copy time of n_bytes (the buffers are freed when this returns)."""
    import torch

    src = torch.empty(n_bytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return bench_ms(lambda: dst.copy_(src), 10)


def nvml_rows(load_s: float = 3.0) -> list[tuple[str, str]]:
    """NVML telemetry (cluster/telemetry/nvml.py, needs only nvidia-ml-py) read at ~10 Hz between batches of BF16
    GEMMs for a few seconds: the energy counter advancing, power, SM clock and the clock-event reasons."""
    import torch

    try:
        from cluster.telemetry.nvml import NvmlSampler
        from cluster.telemetry.readings import reason_names

        sampler = NvmlSampler([(os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0]])
    except Exception as e:  # noqa: BLE001 - nvidia-ml-py missing or NVML down: say so, keep going
        return [("NVML telemetry", f"unavailable: {type(e).__name__}: {e}")]
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    readings = [(time.monotonic(), sampler.sample()[0])]
    t0 = time.monotonic()
    while time.monotonic() - t0 < load_s:
        for _ in range(4):
            a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()
        if time.monotonic() - readings[-1][0] >= 0.1:
            readings.append((time.monotonic(), sampler.sample()[0]))
    sampler.close()
    span_s = readings[-1][0] - readings[0][0]
    e0, e1 = readings[0][1].energy_j, readings[-1][1].energy_j
    power = [r.power_w for _, r in readings if r.power_w is not None]
    clocks = [r.sm_clock_mhz for _, r in readings[1:] if r.sm_clock_mhz is not None]
    reasons = sorted({n for _, r in readings for n in reason_names(r.clock_event_reasons)})
    energy = f"{e1 - e0:.0f} J in {span_s:.1f} s ({(e1 - e0) / span_s:.0f} W)" if e0 is not None and e1 is not None \
        and span_s > 0 else "no energy counter"
    return [("NVML samples under GEMM load", f"{len(readings)} in {span_s:.1f} s"),
            ("NVML energy counter", ("advanced: " if e0 is not None and e1 is not None and e1 > e0 else "NOT advancing: ")
             + energy),
            ("NVML power W mean / max", f"{sum(power) / len(power):.0f} / {max(power):.0f}" if power else "n/a"),
            ("NVML SM clock MHz mean / min", f"{sum(clocks) / len(clocks):.0f} / {min(clocks)}" if clocks else "n/a"),
            ("NVML clock-event reasons seen", ", ".join(reasons) or "none")]


def main() -> int:
    try:
        import torch
    except ImportError:
        print("gpu_check: torch is not installed; nothing to check")
        return 2
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device visible to torch")
        return 2
    rows: list[tuple[str, str]] = []
    t_all = time.monotonic()
    props = torch.cuda.get_device_properties(0)
    cap = torch.cuda.get_device_capability(0)
    rows += [("device", torch.cuda.get_device_name(0)), ("devices visible", str(torch.cuda.device_count())),
             ("compute capability", f"sm{cap[0]}{cap[1]}"), ("memory GiB", f"{props.total_memory / 2**30:.1f}"),
             ("SMs", str(props.multi_processor_count)), ("torch / CUDA", f"{torch.__version__} / {torch.version.cuda}")]
    try:
        import triton

        rows.append(("triton", triton.__version__))
    except ImportError:
        rows.append(("triton", "missing"))
    n_bytes = 1 << 30
    rows.append(("d2d copy GB/s (read+write)", f"{2 * n_bytes / copy_ms(n_bytes) / 1e6:.0f}"))
    for m in (16, 4096):
        a = torch.randn(m, 8192, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        ms = bench_ms(lambda: a @ b)
        tf = 2 * m * 8192 * 8192 / ms / 1e9
        rows.append((f"BF16 GEMM M={m} K=N=8192", f"{tf:.1f} TFLOP/s, {(8192 * 8192 * 2) / ms / 1e6:.0f} GB/s weights"))
    if hasattr(torch, "_scaled_mm") and cap >= (8, 9):
        try:
            a8 = torch.randn(4096, 8192, device="cuda").to(torch.float8_e4m3fn)
            b8 = torch.randn(8192, 8192, device="cuda").to(torch.float8_e4m3fn).t()
            one = torch.ones((), device="cuda")
            ms = bench_ms(lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
            rows.append(("FP8 GEMM M=4096 K=N=8192", f"{2 * 4096 * 8192 * 8192 / ms / 1e9:.1f} TFLOP/s"))
        except Exception as e:  # noqa: BLE001 - report, keep going
            rows.append(("FP8 GEMM", f"unavailable: {type(e).__name__}"))
    rows += nvml_rows()
    from cluster.tuning.moe_search import tune_batch_sizes

    shape = {"num_experts": 64, "shard_n": 128, "hidden_size": 2048, "top_k": 8, "dtype": "auto"}
    t0 = time.monotonic()
    res = tune_batch_sizes(shape, [1, 16, 64], mode="cuda", max_configs=24, seed=0)
    for bs, r in res["results"].items():
        rows.append((f"triton_moe search bs={bs}", f"{r['time_us']:.1f} us best of {r['tried']} "
                     f"({r['skipped']} skipped), max err {r['max_abs_err']:.3g}"))
    rows.append(("triton_moe search s", f"{time.monotonic() - t0:.1f}"))
    rows.append(("total s", f"{time.monotonic() - t_all:.1f}"))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    if cap != TARGET_SM:
        note = f"NOTE: this GPU is sm{cap[0]}{cap[1]}, not the SM120 RTX PRO 6000 the Qwen3.5 NVFP4 study targets."
        if cap < (10, 0):
            note += (" On SM80-SM90 (e.g. H200) SGLang runs NVFP4 as weight-only W4A16 Marlin, so these figures say "
                     "nothing about SM120 FP4 tensor-core throughput.")
        print(note)
    errs = [r["max_abs_err"] for r in res["results"].values()]
    print(json.dumps({"ok": all(e < 0.05 for e in errs), "moe_configs": {k: r["config"] for k, r in res["results"].items()}}))
    return 0 if all(e < 0.05 for e in errs) else 1


if __name__ == "__main__":
    sys.exit(main())
