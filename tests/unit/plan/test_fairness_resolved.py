"""Fairness over what real SGLang 0.5.23 resolved (tests/data/sglang_0.5.23_cpu): caps and intended differences."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cluster.engines.sglang import SGLangEngine
from cluster.engines.sglang_server_info import RESOLVED_CAP_KEY
from cluster.plan.fairness import resolved_cap_findings, resolved_differences
from cluster.kernel.runs import ResolvedVariant, SpecDecode

DATA = Path(__file__).resolve().parents[2] / "data" / "sglang_0.5.23_cpu"


def resolved(tag: str) -> dict[str, Any]:
    return SGLangEngine().resolved_args({"server_info": json.loads((DATA / f"server_info_{tag}.json").read_text())})


def v(name: str, args: dict[str, Any], spec: bool = False, base: bool = False, engine: str = "sglang"
      ) -> ResolvedVariant:
    sp = SpecDecode("NEXTN", 1, 1, 2) if spec else None
    return ResolvedVariant(name=name, engine=engine, tp=1, model_path="/m", args=args, env={}, speculative=sp,
                           is_baseline=base)  # type: ignore[arg-type]


def test_real_baseline_and_nextn_resolve_different_caps_and_that_is_an_error() -> None:
    # both launched without --max-running-requests: the declared args agree (unset), the resolved caps do not
    caps = {"base": resolved("echo_baseline"), "nextn-1": resolved("echo_nextn1")}
    assert (caps["base"][RESOLVED_CAP_KEY], caps["nextn-1"][RESOLVED_CAP_KEY]) == (2048, 48)
    f = resolved_cap_findings([v("base", {}, base=True), v("nextn-1", {}, spec=True)], caps)
    assert [(x.level, x.variant, x.rule) for x in f] == [("error", "nextn-1", "resolved-max-running-requests")]
    assert "48 here but 2048 on 'base'" in f[0].message and "effective_max_running_requests_per_dp" in f[0].message


def test_equal_resolved_caps_pass_and_missing_figures_are_skipped() -> None:
    caps = {"a": {RESOLVED_CAP_KEY: 64}, "b": {RESOLVED_CAP_KEY: 64}, "c": {}}
    assert resolved_cap_findings([v("a", {}, base=True), v("b", {}, spec=True), v("c", {})], caps) == []
    sim = resolved_cap_findings([v("a", {}, base=True, engine="sim"), v("b", {}, spec=True, engine="sim")],
                                {"a": {RESOLVED_CAP_KEY: 1024}, "b": {RESOLVED_CAP_KEY: 48}})
    assert [x.level for x in sim] == ["warning"]


def test_nextn_resolved_as_eagle_is_an_intended_difference() -> None:
    base, nextn = resolved("echo_baseline"), resolved("echo_nextn1")
    assert nextn["speculative_algorithm"] == "EAGLE" and base["speculative_algorithm"] is None
    # what analysis/comparison.py passes: the speculative settings plus every arg the spec declares differently
    d = resolved_differences(base, nextn, {"speculative_*", "attention_backend", "disable_cuda_graph"})
    assert not any(k.startswith("speculative_") for k in d)
    # what is left is what SGLang resolved on its own, and each is real: the speculative cap, overlap scheduling
    # off for speculative decoding on CPU, and an unset mem_fraction_static computed from the free memory at launch
    assert d == {"max_running_requests": (None, 48), RESOLVED_CAP_KEY: (2048, 48),
                 "disable_overlap_schedule": (False, True), "mem_fraction_static": (0.716, 0.719)}
