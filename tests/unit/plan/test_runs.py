"""make_plan's execution order: grouped and interleaved, the baseline's first segment first in both."""

from __future__ import annotations

import pytest

from cluster.plan.runs import make_plan, server_segments
from cluster.config.loader import parse_spec_text

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


def test_read_batching_reaches_the_load_point_and_only_then_the_run_key() -> None:
    from pydantic import ValidationError

    from cluster.plan.runs import load_points
    from cluster.config.loader import parse_spec_text
    from cluster.config.load import LoadSpec

    text = ("version: 1\nname: e\nmodel: {path: sim://m, engine: sim}\nvariants: [{name: b}]\n"
            "workloads: [{name: w, input_tokens: 8, output_tokens: 8, num_requests: 4}]\n"
            "load: {concurrency: [4], request_rate: [2.0]%s}\n")
    batched = load_points(parse_spec_text(text % ", read_batch_ms: 1.5"))
    assert [p.read_batch_s for p in batched] == [0.0015, 0.0015]
    assert batched[0].identity()["read_batch_s"] == 0.0015  # it changes what the client does: a different run
    # unset, the points hash as before the field existed (resumable datasets keep their run keys)
    assert load_points(parse_spec_text(text % ""))[0].identity() == {"kind": "concurrency", "value": 4.0,
                                                                    "max_concurrency": None}
    with pytest.raises(ValidationError, match="read_batch_ms"):
        LoadSpec.model_validate({"concurrency": [4], "read_batch_ms": 50})
