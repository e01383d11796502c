"""A concurrency above a variant's declared admission cap is said at validate (red-team F2: accepted silently)."""

from __future__ import annotations

from cluster.plan.load_cap import load_above_cap
from cluster.plan.runs import expand_variants
from cluster.config.loader import parse_spec_text
from tests.unit.config.test_bad_inputs import VALID


def _warnings(args: str, engine: str = "sim") -> list[str]:
    spec = parse_spec_text(VALID.replace("engine: sim", f"engine: {engine}") + f"server:\n  args:\n{args}")
    return load_above_cap(spec, expand_variants(spec))


def test_a_concurrency_above_the_cap_is_warned_for_every_variant() -> None:
    out = _warnings("    max_running_requests: 2\n")  # VALID's load.concurrency is [1, 4]
    assert len(out) == len(expand_variants(parse_spec_text(VALID))) and all(
        "load.concurrency 4 is above its --max-running-requests 2" in w for w in out)


def test_a_cap_at_or_above_the_largest_concurrency_or_no_cap_says_nothing() -> None:
    assert _warnings("    max-running-requests: 4\n") == []
    assert _warnings("    enable-metrics: true\n") == []


def test_each_engine_is_judged_by_its_own_cap_flag() -> None:
    assert _warnings("    max-num-seqs: 2\n", engine="vllm") and not _warnings("    max-num-seqs: 2\n")
