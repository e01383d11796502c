"""GPU tier: NVML sampling of the real device for a few seconds under a BF16 GEMM load (needs torch + nvidia-ml-py).

The energy counter must advance, power and SM clock must be read, the recorder must keep ~10 Hz. An H200 (sm90) is
not the SM120 RTX PRO 6000 the Qwen3.5 NVFP4 study targets: its figures are the sampler's check, not the study's.
"""

from __future__ import annotations

import os
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pynvml")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]

LOAD_S = 3.0


def test_nvml_samples_a_gemm_load() -> None:
    from cluster.analysis.gpu_metrics import summarize_gpu
    from cluster.telemetry.nvml import NvmlSampler
    from cluster.telemetry.recorder import TelemetryRecorder

    gpu = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0]
    rec = TelemetryRecorder(NvmlSampler([gpu]), 10.0).start()
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t0 = time.monotonic_ns()
    while time.monotonic_ns() - t0 < LOAD_S * 1e9:
        for _ in range(8):
            a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()
    t1 = time.monotonic_ns()
    cap = rec.stop()
    samples = cap.aligned(t0)
    m = summarize_gpu(samples, (t1 - t0) / 1e9, output_tok_s=None)
    cc = torch.cuda.get_device_capability(0)
    print(f"{torch.cuda.get_device_name(0)} sm{cc[0]}{cc[1]}{'' if cc == (12, 0) else ' (not the SM120 target)'}: "
          f"{m['gpu_energy_j']:.0f} J in {LOAD_S:g} s, {m['gpu_power_w_mean']:.0f} W mean, SM clock mean "
          f"{m['sm_clock_mhz_mean']:.0f} / min {m['sm_clock_mhz_min']:.0f} MHz, {samples.num_rows} samples, "
          f"throttled {m['gpu_throttled']}")
    assert cap.source == "nvml" and cap.errors == 0, cap.error
    assert samples.num_rows >= 0.8 * LOAD_S * 10
    energy = [e for e in samples.column("energy_j").to_pylist() if e is not None]
    assert energy and energy[-1] > energy[0], "the energy counter advances under load"
    assert m["gpu_energy_j"] is not None and m["gpu_energy_j"] > 0
    assert m["gpu_power_w_mean"] is not None and m["gpu_power_w_mean"] > 50, "a GEMM load draws well above idle"
    assert m["sm_clock_mhz_mean"] is not None and m["sm_clock_mhz_mean"] > 100
    assert all(t is not None for t in samples.column("temperature_c").to_pylist())
