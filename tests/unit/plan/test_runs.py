"""make_plan's execution order: grouped and interleaved, the baseline's first segment first in both."""

from __future__ import annotations

from cluster.plan.runs import make_plan, server_segments
from cluster.spec.loader import parse_spec_text

SPEC = """
version: 1
name: order
model: {{path: sim://order, engine: sim}}
variants:
  - {{name: nextn, speculative: {{algorithm: NEXTN, num_steps: 1}}}}
  - {{name: base, baseline: true}}
  - {{name: other, args: {{max-running-requests: 4}}}}
workloads:
  - {{name: w, input_tokens: 16, output_tokens: 4, num_requests: 2}}
load: {{concurrency: [1, 2]}}
repeats: 2
order: {order}
"""


def _order(order: str) -> list[tuple[str, int]]:
    plans = make_plan(parse_spec_text(SPEC.format(order=order)))
    assert [p.order_index for p in plans] == list(range(len(plans)))
    return [(v.name, runs[0].repeat) for v, runs in server_segments(plans)]


def test_interleaved_alternates_with_the_baseline_first_in_every_repeat() -> None:
    assert _order("interleaved") == [("base", 0), ("nextn", 0), ("other", 0), ("base", 1), ("nextn", 1), ("other", 1)]


def test_grouped_starts_with_the_baseline_and_keeps_each_variant_contiguous() -> None:
    assert _order("grouped") == [("base", 0), ("nextn", 0), ("other", 0)]
