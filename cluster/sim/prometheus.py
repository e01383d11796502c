"""The simulator's /metrics: Prometheus text in SGLang 0.5.23's names, and what streamed requests added to it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional

from cluster.sim.model import Scheduler, SimRequest
from cluster.engines.sim_launch import SpecParams


def metrics_text(sched: Scheduler, spec: Optional[SpecParams], model_name: str, gen_throughput: float,
                 streaming: "StreamingCounts", max_total_num_tokens: int, engine_type: str = "unified") -> str:
    """Prometheus text with SGLang 0.5.23's `sglang:` names and labels (sorted, as prometheus_client writes them)
    for the gauges and counters the simulator models.

    Gauges carry the rank labels; the token and request counters carry `is_streaming` instead, and
    `spec_verify_calls_total` neither (it counts verify steps, the sum of meta_info spec_verify_ct)."""
    c = sched.counters
    name = json.dumps(model_name)
    gauge = f'engine_type="{engine_type}",model_name={name},moe_ep_rank="0",pp_rank="0",tp_rank="0"'
    plain = f'engine_type="{engine_type}",model_name={name}'

    def split(label: str) -> str:
        return f'engine_type="{engine_type}",is_streaming="{label}",model_name={name}'

    rows: list[tuple[str, str, str, float]] = [
        ("num_running_reqs", "gauge", gauge, len(sched.running)),
        ("num_queue_reqs", "gauge", gauge, len(sched.waiting)),
        ("gen_throughput", "gauge", gauge, gen_throughput),
        ("token_usage", "gauge", gauge, sched.tokens_in_use() / max_total_num_tokens),
    ]
    if spec is not None:
        acc = c.last_interval_accept_length
        rate = (acc - 1.0) / max(1, spec.num_draft_tokens - 1) if acc is not None else 0.0
        rows += [("spec_accept_length", "gauge", gauge, acc if acc is not None else 0.0),
                 ("spec_accept_rate", "gauge", gauge, rate),
                 ("spec_num_steps", "gauge", gauge, spec.num_steps),
                 ("spec_num_draft_tokens", "gauge", gauge, spec.num_draft_tokens),
                 ("spec_verify_calls_total", "counter", plain, c.spec_verify_calls_total)]
    totals = {"generation_tokens_total": (c.generation_tokens_total, streaming.tokens),
              "prompt_tokens_total": (c.prompt_tokens_total, streaming.prompt_tokens),
              "num_requests_total": (c.num_requests_total, streaming.requests)}
    for metric, (total, streamed) in totals.items():
        rows += [(metric, "counter", split("false"), total - streamed),
                 (metric, "counter", split("true"), streamed)]
    out: list[str] = []
    seen: set[str] = set()
    for metric, kind, labels, val in rows:
        full = "sglang:" + metric
        if full not in seen:
            seen.add(full)
            out.append(f"# HELP {full} {metric.replace('_', ' ')} (simulated engine)")
            out.append(f"# TYPE {full} {kind}")
        out.append(f"{full}{{{labels}}} {float(val)!r}")
    return "\n".join(out) + "\n"


@dataclass
class StreamingCounts:
    """What streamed requests contributed to the token and request counters (SGLang's is_streaming="true")."""

    tokens: int = 0
    prompt_tokens: int = 0
    requests: int = 0

    def add(self, req: SimRequest, tokens: int) -> None:
        self.tokens += tokens
        self.prompt_tokens += req.prompt_tokens
        self.requests += 1
