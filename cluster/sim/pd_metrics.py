"""The prefill/decode histograms a simulated PD server serves, in SGLang 0.5.23's names, labels and buckets.

`sglang:per_stage_req_latency_seconds{stage}` (observability/metrics_collector.py:884-890, exponential buckets from
1 ms by 1.62, 30 of them), `sglang:kv_transfer_latency_ms` (:644) and `sglang:kv_transfer_bootstrap_ms` (:683). The
values are the simulator's own stage times (cluster/sim/disagg.py), never an engine's."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

STAGE_BUCKETS_S = tuple(0.001 * 1.62 ** i for i in range(30))
TRANSFER_LATENCY_BUCKETS_MS = (1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0)
BOOTSTRAP_BUCKETS_MS = (1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0)
PREFILL_STAGES = ("prefill_bootstrap", "prefill_forward", "prefill_transfer_kv_cache")
DECODE_STAGES = ("decode_bootstrap", "decode_transferred", "decode_waiting")


@dataclass
class Histogram:
    """One labelled series of a Prometheus histogram: cumulative bucket counts, sum and count."""

    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    n: int = 0

    def observe(self, value: float) -> None:
        if not self.counts:
            self.counts = [0] * len(self.buckets)
        for i, upper in enumerate(self.buckets):
            if value <= upper:
                self.counts[i] += 1
        self.total += value
        self.n += 1

    def lines(self, name: str, labels: str) -> list[str]:
        counts = self.counts or [0] * len(self.buckets)
        out = [f'{name}_bucket{{{labels},le="{upper!r}"}} {float(c)!r}' for upper, c in zip(self.buckets, counts)]
        out.append(f'{name}_bucket{{{labels},le="+Inf"}} {float(self.n)!r}')
        out.append(f"{name}_count{{{labels}}} {float(self.n)!r}")
        out.append(f"{name}_sum{{{labels}}} {self.total!r}")
        return out


class PdMetrics:
    """A PD server's stage histograms (one series per stage of its role) and its KV-transfer histograms."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.stages = {s: Histogram(STAGE_BUCKETS_S) for s in (PREFILL_STAGES if mode == "prefill"
                                                                  else DECODE_STAGES)}
        self.transfer_latency_ms = Histogram(TRANSFER_LATENCY_BUCKETS_MS)
        self.bootstrap_ms = Histogram(BOOTSTRAP_BUCKETS_MS)

    def stage(self, name: str, seconds: float) -> None:
        self.stages[name].observe(max(0.0, seconds))

    def text(self, model_name: str) -> str:
        """Prometheus text for these series (labels sorted, as the simulator's other series)."""
        base = f'engine_type="{self.mode}",model_name={json.dumps(model_name)},moe_ep_rank="0",pp_rank="0"'
        out = ["# HELP sglang:per_stage_req_latency_seconds The latency of each stage of requests. (simulated)",
               "# TYPE sglang:per_stage_req_latency_seconds histogram"]
        for stage, hist in self.stages.items():
            out += hist.lines("sglang:per_stage_req_latency_seconds", f'{base},stage="{stage}",tp_rank="0"')
        series = [("kv_transfer_bootstrap_ms", "KV transfer bootstrap time in ms", self.bootstrap_ms)]
        if self.mode == "prefill":  # SGLang observes the transfer latency on the prefill side (prefill.py:1255)
            series.append(("kv_transfer_latency_ms", "KV cache transfer latency in ms", self.transfer_latency_ms))
        for name, help_text, hist in series:
            out += [f"# HELP sglang:{name} Histogram of {help_text}. (simulated)", f"# TYPE sglang:{name} histogram"]
            out += hist.lines(f"sglang:{name}", f'{base},tp_rank="0"')
        return "\n".join(out) + "\n"
