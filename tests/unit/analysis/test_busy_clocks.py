"""The clock rule compares busy samples only (issue 37): a faster variant that idles between requests is not marked
"ran at other clocks"; a throttled one (thermal reason, or busy clocks really lower) still is.

Every window here is 10 s with a sample every 0.1 s (t = 0.0, 0.1, ..., 10.0: 101 samples per GPU, all inside the
window). The baseline has a request in flight all the time; the fast variant one request per second, in flight
for the first half second ([k, k + 0.5] s), idle for the rest. A sample reports on the 0.1 s before it, so per
second the samples at k + 0.1 ... k + 0.5 are busy (5) and those at k + 0.6 ... k + 1.0 idle (5); the sample at 0.0
reports on the time before the window: idle. Over the window: 50 busy samples, 51 idle.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import pyarrow as pa
import pytest

from cluster.analysis.comparison import compare_with_ci
from cluster.analysis.gpu_metrics import summarize_gpu
from cluster.analysis.results import Results
from cluster.config.loader import parse_spec_text
from cluster.config.sim_knobs import Knobs
from cluster.dataset.store import DatasetStore
from cluster.kernel.records import REQUEST_BATCH_SCHEMA
from cluster.kernel.run_row import RunRow
from cluster.plan.runs import make_plan
from cluster.sim.device import SimDevice
from cluster.telemetry.readings import REASON_GPU_IDLE, REASON_SW_THERMAL, GpuReading
from cluster.telemetry.recorder import readings_table

WINDOW_S = 10.0
BOOST, IDLE, THROTTLED, LOW = 2430, 600, 1400, 2200
"""MHz: the simulator's boost, idle and injected-throttle clocks, and a busy clock 9.5 % under boost."""

SPEC = """
version: 1
name: clocks
model: {path: sim://qwen, engine: sim, tp: 1}
variants:
  - {name: baseline, baseline: true}
  - {name: fast}
  - {name: hot}
  - {name: low}
workloads:
  - {name: chat, input_tokens: 16, output_tokens: 16, num_requests: 10}
load: {concurrency: [1]}
repeats: 2
"""


def requests(spans_s: Sequence[tuple[float, float]]) -> pa.Table:
    """One request per (send, last chunk) span, seconds on the window's clock."""
    rows = [{"request_index": i, "intended_send_ns": int(a * 1e9), "actual_send_ns": int(a * 1e9),
             "first_chunk_ns": int(a * 1e9) + 20_000_000, "last_chunk_ns": int(b * 1e9), "num_chunks": 16,
             "client_tokens": 16, "prompt_tokens_sent": 16, "max_tokens": 16}
            for i, (a, b) in enumerate(spans_s)]
    return pa.Table.from_pylist(rows, schema=REQUEST_BATCH_SCHEMA)


BACK_TO_BACK = [(float(k), k + 1.0) for k in range(10)]
HALF_IDLE = [(float(k), k + 0.5) for k in range(10)]


def hand_samples(busy_clock: int, busy_reasons: int, busy: Callable[[int], bool]) -> pa.Table:
    """Samples i = 0..100 at t = i / 10 s on two GPUs: `busy_clock` and `busy_reasons` where busy(i), else the idle
    clock with the gpu_idle reason."""
    rows = [(i * 100_000_000, GpuReading(gpu=g, power_w=400.0 if busy(i) else 90.0, sm_clock_mhz=busy_clock if busy(i)
                                         else IDLE, clock_event_reasons=busy_reasons if busy(i) else REASON_GPU_IDLE))
            for i in range(101) for g in ("0", "1")]
    return readings_table(rows, "sim")


def first_half(i: int) -> bool:
    return i % 10 in (1, 2, 3, 4, 5)  # t = k + 0.1 ... k + 0.5


def always_but_first(i: int) -> bool:
    return i > 0


def test_busy_clocks_of_hand_built_samples() -> None:
    fast = summarize_gpu(hand_samples(BOOST, 0, first_half), WINDOW_S, 100.0, requests(HALF_IDLE))
    # before: the mean over all 101 samples, (50 x 2430 + 51 x 600) / 101 = 1506 MHz, 38 % under the boost clock
    assert fast["sm_clock_mhz_mean"] == BOOST and fast["sm_clock_mhz_p10"] == BOOST, fast
    assert fast["gpu_throttled"] == 0.0
    hot = summarize_gpu(hand_samples(THROTTLED, REASON_SW_THERMAL, first_half), WINDOW_S, 60.0, requests(HALF_IDLE))
    assert hot["sm_clock_mhz_mean"] == THROTTLED and hot["gpu_throttled"] == 1.0
    assert hot["gpu_throttled_share"] == pytest.approx(50 / 101)
    # without request records utilisation decides; these samples recorded none, so only the idle reason does
    assert summarize_gpu(hand_samples(BOOST, 0, first_half), WINDOW_S, 100.0)["sm_clock_mhz_mean"] == BOOST


def _compare(tmp_path: Path, figures: dict[str, dict[str, float | None]]) -> dict[str, list[str]]:
    """The variants' warnings from compare (the clock rule and the throttle flag) over runs holding `figures`."""
    store = DatasetStore(str(tmp_path), "clocks")
    for p in make_plan(parse_spec_text(SPEC)):
        metrics = dict(figures[p.variant.name], n_ok=10, n_requests=10)
        store.write_run(p, RunRow(status="ok", duration_s=WINDOW_S, metrics=metrics))
    df = compare_with_ci(Results.open(str(tmp_path), "clocks"), n_boot=200, request_level=False)
    return {r.variant: list(r.warnings) for r in df.itertuples()}


def _verdicts(warnings: dict[str, list[str]]) -> dict[str, tuple[bool, bool]]:
    """variant -> (clock rule fired, throttle flagged)."""
    return {v: (any("SM clock" in w and "vs the baseline" in w for w in ws), any("GPUs throttled" in w for w in ws))
            for v, ws in warnings.items()}


def test_the_clock_rule_on_hand_built_samples(tmp_path: Path) -> None:
    figures = {
        "baseline": summarize_gpu(hand_samples(BOOST, 0, always_but_first), WINDOW_S, 70.0, requests(BACK_TO_BACK)),
        "fast": summarize_gpu(hand_samples(BOOST, 0, first_half), WINDOW_S, 140.0, requests(HALF_IDLE)),
        "hot": summarize_gpu(hand_samples(THROTTLED, REASON_SW_THERMAL, first_half), WINDOW_S, 80.0,
                             requests(HALF_IDLE)),
        "low": summarize_gpu(hand_samples(LOW, 0, first_half), WINDOW_S, 130.0, requests(HALF_IDLE)),
    }
    warnings = _compare(tmp_path, figures)
    # before: fast's mean 1506 MHz against the baseline's (100 x 2430 + 600) / 101 = 2412 MHz (-38 %): fired
    assert _verdicts(warnings) == {"baseline": (False, False), "fast": (False, False), "hot": (True, True),
                                   "low": (True, False)}, warnings
    assert any("SM clock mean 2200 MHz vs the baseline's 2430 MHz (-9%" in w for w in warnings["low"])


def sim_window(knobs: Knobs, busy_ticks: int) -> pa.Table:
    """The simulator's device model (cluster/sim/device.py) over a 10 s window on a fake clock ticking 10 ms: each
    second the scheduler runs `busy_ticks` 10-ms steps at batch 1, then idles; the sampler reads every 100 ms."""
    now = [0.0]
    dev = SimDevice(knobs, n_gpus=2, clock=lambda: now[0])
    rows: list[tuple[int, GpuReading]] = []
    stepping = False
    for j in range(1001):
        now[0] = j / 100
        if stepping:
            dev.end_step()
            stepping = False
        if j % 10 == 0:
            rows += [(j * 10_000_000, r) for r in dev.read()]
        if j < 1000 and j % 100 < busy_ticks:
            dev.begin_step(1)
            stepping = True
    return readings_table(rows, "sim")


def test_the_clock_rule_on_the_simulators_device_model(tmp_path: Path) -> None:
    knobs = Knobs()
    assert (knobs.gpu_sm_clock_mhz, knobs.gpu_idle_sm_clock_mhz, knobs.gpu_throttle_clock_mhz) == (BOOST, IDLE,
                                                                                                   THROTTLED)
    hot = Knobs(gpu_throttle_after_s=0.0)  # thermal from the start: 1400 MHz while busy
    capped = Knobs(gpu_power_limit_w=380.0)  # busy demand 420 W: 2430 x 380 / 420 = 2199 MHz, sw_power_cap
    figures = {
        "baseline": summarize_gpu(sim_window(knobs, 100), WINDOW_S, 70.0, requests(BACK_TO_BACK)),
        "fast": summarize_gpu(sim_window(knobs, 50), WINDOW_S, 140.0, requests(HALF_IDLE)),
        "hot": summarize_gpu(sim_window(hot, 50), WINDOW_S, 80.0, requests(HALF_IDLE)),
        "low": summarize_gpu(sim_window(capped, 50), WINDOW_S, 130.0, requests(HALF_IDLE)),
    }
    # the device model idles between steps: the fast variant's window holds 51 idle-clock samples of 101
    fast_clocks = sim_window(knobs, 50).column("sm_clock_mhz").to_pylist()
    assert fast_clocks.count(IDLE) == 2 * 51 and fast_clocks.count(BOOST) == 2 * 50
    assert figures["fast"]["sm_clock_mhz_mean"] == BOOST and figures["hot"]["sm_clock_mhz_mean"] == THROTTLED
    assert figures["low"]["sm_clock_mhz_mean"] == 2199
    # before: fast's mean (50 x 2430 + 51 x 600) / 101 = 1506 MHz against the baseline's 2412 MHz: fired
    assert _verdicts(_compare(tmp_path, figures)) == {"baseline": (False, False), "fast": (False, False),
                                                      "hot": (True, True), "low": (True, True)}


def test_a_throttled_run_without_busy_samples_names_no_clock(tmp_path: Path) -> None:
    # thermal reasons on the first half of each second, but the only request ran after the window (20-21 s): no
    # sample inside is busy, so there is no clock figure to quote (before: "SM clock down to nan MHz")
    idle_hot = summarize_gpu(hand_samples(THROTTLED, REASON_SW_THERMAL, first_half), WINDOW_S, 60.0,
                             requests([(20.0, 21.0)]))
    assert idle_hot["gpu_throttled"] == 1.0 and idle_hot["sm_clock_mhz_min"] is None
    base = summarize_gpu(hand_samples(BOOST, 0, always_but_first), WINDOW_S, 70.0, requests(BACK_TO_BACK))
    warnings = _compare(tmp_path, {"baseline": base, "fast": base, "hot": idle_hot, "low": base})
    throttled = [w for w in warnings["hot"] if "GPUs throttled" in w]
    assert throttled and not any("nan" in w or "MHz" in w for w in throttled), throttled
