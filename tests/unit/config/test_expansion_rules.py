"""The spec's expansion checks and the planner share one rule (cluster/config/expansion.py): the names validate
predicts are the names the plan gives, a baseline stays one variant, and no flag value is lost to a second name."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster.engines.sglang import version_adjusted_args
from cluster.errors import UserError
from cluster.plan.runs import expand_variants
from cluster.config.loader import load_spec, parse_spec_text
from cluster.config.variants import expanded_names
from cluster.config.fields import SpecError
from tests.unit.config.test_bad_inputs import VALID

REPO = Path(__file__).resolve().parents[3]
SWEEP = VALID.replace("  - name: nextn\n", """\
  - name: sweep
    tuning:
      kind: backend_sweep
      options:
        moe_runner_backend: [triton, flashinfer_cutlass]
        fp4_gemm_backend: [flashinfer_cudnn]
  - name: nextn
""")


@pytest.mark.parametrize("text", [VALID, SWEEP] + [p.read_text() for p in sorted((REPO / "experiments").glob("*.yaml"))])
def test_validate_predicts_the_planned_names(text: str) -> None:
    spec = parse_spec_text(text, "x.yaml")
    predicted = [n for v in spec.variants for n in expanded_names(v)]
    assert predicted == [v.name for v in expand_variants(spec)]


def test_a_one_pair_sweep_marked_baseline_stays_the_baseline() -> None:
    text = SWEEP.replace("        moe_runner_backend: [triton, flashinfer_cutlass]\n",
                         "        moe_runner_backend: [triton]\n").replace("  - name: sweep\n",
                                                                          "  - name: sweep\n    baseline: true\n")
    variants = expand_variants(parse_spec_text(text, "x.yaml"))
    assert [v.name for v in variants if v.is_baseline] == ["sweep-triton-fi_cudnn"]


def test_a_sweep_of_several_pairs_cannot_be_the_baseline() -> None:
    with pytest.raises(SpecError) as info:
        parse_spec_text(SWEEP.replace("  - name: sweep\n", "  - name: sweep\n    baseline: true\n"), "x.yaml")
    assert (info.value.line, info.value.field) == (10, "variants.1.baseline")
    assert "expands into 2 (sweep-triton-fi_cudnn, sweep-fi_cutlass-fi_cudnn)" in info.value.message


def test_a_swept_name_colliding_with_a_declared_one_is_located() -> None:
    text = SWEEP.replace("  - name: nextn\n", "  - name: sweep-triton-fi_cudnn\n", 1)
    with pytest.raises(SpecError) as info:
        parse_spec_text(text, "x.yaml")
    assert info.value.field == "variants.2.name" and "produced twice" in info.value.message


@pytest.mark.parametrize("args", [{"mem-frac": 0.7, "mem-fraction-static": 0.8}, {"dp": 2, "dp-size": 2},
                                  {"mem_frac": 0.7, "mem-fraction-static": 0.8}])
def test_an_sglang_alias_beside_its_full_name_is_refused(args: dict[str, object]) -> None:
    with pytest.raises(UserError) as info:
        version_adjusted_args(args, (0, 5, 23))  # type: ignore[arg-type]
    assert "under two names" in str(info.value)


def test_shipped_experiments_still_load() -> None:
    for p in sorted((REPO / "experiments").glob("*.yaml")):
        assert load_spec(p).variants
