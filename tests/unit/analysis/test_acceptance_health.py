"""The acceptance-collapsed verdict (analysis/acceptance_health.py) on hand-built per-position figures, the probe's
MTP evidence it quotes, the shipped family figures and their sources, and the `acceptance_reference:` field."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from cluster.analysis.acceptance_health import (COLLAPSED, HEALTHY, NOT_JUDGED, AcceptanceHealth, ReferenceCurve,
                                                ReferencePoint, judge, position_collapsed, probe_evidence)
from cluster.analysis.acceptance_positions import positions
from cluster.analysis.accuracy import wilson
from cluster.config.acceptance import FAMILIES, FIGURES_FILE, AcceptanceReferenceSpec, family_of
from cluster.config.loader import parse_spec_text
from cluster.errors import UserError
from cluster.probe.checkpoint import probe_checkpoint
from tests.checkpoints import qwen35_nvfp4

QWEN = FAMILIES["qwen3.5-mtp"].positions[0].accept_rate  # 0.706: (3.12 - 1) / 3 rounded down


def test_the_predicate_is_the_interval_wholly_below_reference_minus_margin() -> None:
    # reference 0.706, margin 0.1: a position collapses when its Wilson 95 % upper bound < 0.606
    assert position_collapsed(wilson(2, 100), QWEN, 0.1)       # 2/100: [0.0055, 0.0700], 0.070 < 0.606
    assert position_collapsed(wilson(50, 100), QWEN, 0.1)      # 50/100: [0.404, 0.5962], 0.5962 < 0.606
    assert not position_collapsed(wilson(55, 100), QWEN, 0.1)  # 55/100: [0.452, 0.6439]: the point 0.55 is below
    # 0.606 but the interval is not wholly below it: not collapsed
    assert not position_collapsed(wilson(80, 100), QWEN, 0.1)  # 80/100: [0.711, 0.867]
    assert not position_collapsed(wilson(50, 100), QWEN, 0.15)  # margin 0.15: 0.5962 >= 0.706 - 0.15 = 0.556
    assert position_collapsed(wilson(0, 40), QWEN, 0.1)        # 0/40 (a dropped head): [0, 0.0876] < 0.606
    assert not position_collapsed(wilson(0, 0), QWEN, 0.0)     # no trials: nothing to judge


def _curve(*rates: float, margin: float = 0.1) -> ReferenceCurve:
    return ReferenceCurve("test", tuple(ReferencePoint(k, r, "hand-built") for k, r in enumerate(rates, 1)), margin)


def test_judge_per_position_from_histograms() -> None:
    # 100 verify steps at depth 2: 10 accepted none, 20 one draft, 70 both: P(1) = 90/100 [0.826, 0.945],
    # P(2 | 1) = 70/90 = 0.778 [0.682, 0.851]
    measured = positions([[10, 20, 70]], 2)
    ok = judge(measured, _curve(0.8, 0.7))
    assert [j.collapsed for j in ok] == [False, False]  # 0.945 >= 0.7; 0.851 >= 0.6
    # a reference of 0.95 at position 2: 0.851 < 0.95 - 0.05 = 0.90, so position 2 alone collapses
    bad = judge(measured, _curve(0.8, 0.95, margin=0.05))
    assert [j.collapsed for j in bad] == [False, True]
    # a reference of one position judges only position 1
    assert [j.position for j in judge(measured, _curve(0.8))] == [1]
    # a degraded head: 100 steps, 85 accepted none, 15 one, 0 two: P(1) = 15/100 [0.093, 0.233] < 0.606;
    # P(2 | 1) = 0/15 [0, 0.204] < 0.7 - 0.1
    degraded = judge(positions([[85, 15, 0]], 2), _curve(QWEN, 0.7))
    assert [j.collapsed for j in degraded] == [True, True]


def test_summary_lines_say_the_arithmetic_the_probe_and_what_to_try(tmp_path: Path) -> None:
    meta = {"preflight": {str(tmp_path / "m"): probe_checkpoint(str(qwen35_nvfp4(tmp_path / "m", mtp_quantized=True)))
                          .to_json()}}
    ev = probe_evidence(meta, str(tmp_path / "m"))
    assert ev is not None and ev.quantized and not ev.excluded and ev.exclude_pattern is None
    curve = _curve(QWEN)
    h = AcceptanceHealth("w", "nextn-1", COLLAPSED, curve, judge(positions([[85, 15]], 1), curve), "", ev)
    lines = h.lines()
    assert lines[0] == ("w nextn-1: acceptance-collapsed against test: position 1 accepts 0.150 [0.093, 0.233], "
                        "wholly below 0.706 - margin 0.1 = 0.606")
    assert lines[1].startswith("  probe: MTP head present, 65 tensors, weight format mixed (dtypes BF16 ×17, "
                               "F32 ×24, F8_E4M3 ×12, U8 ×12), NOT excluded from NVFP4 quantization")
    assert lines[2] == "  the head is present but quantized: the quantization likely damaged it"
    assert lines[3].startswith("  try: keep the MTP layers in BF16")
    # the excluded head: the pattern that covers it is named
    meta = {"preflight": {"m2": probe_checkpoint(str(qwen35_nvfp4(tmp_path / "m2"))).to_json()}}
    ok = probe_evidence(meta, "m2")
    assert ok is not None and ok.excluded and ok.exclude_pattern == "mtp*" and not ok.quantized
    assert "excluded from quantization by pattern 'mtp*'" in ok.line()
    # collapsed with an excluded BF16 head: quantization is not blamed, and its advice is not given
    unquantized = AcceptanceHealth("w", "nextn-1", COLLAPSED, curve, judge(positions([[85, 15]], 1), curve), "", ok)
    assert unquantized.lines()[2].startswith("  the head's weights are BF16, not quantized: quantization does not "
                                             "explain it")
    assert len(unquantized.lines()) == 3
    healthy = AcceptanceHealth("w", "nextn-1", HEALTHY, curve, judge(positions([[10, 90]], 1), curve), "", ok)
    assert healthy.lines() == ["w nextn-1: acceptance-healthy against test (margin 0.1): k1 0.900 [0.826, 0.945]"]
    assert AcceptanceHealth("w", "v", NOT_JUDGED, None, (), "no reference", None).lines() == [
        "w v: acceptance-not-judged (no reference)"]


def test_shipped_figures_carry_sources_and_their_arithmetic() -> None:
    doc = json.loads(FIGURES_FILE.read_text(encoding="utf-8"))
    assert set(doc["families"]) == set(FAMILIES)
    for fam in FAMILIES.values():
        assert fam.architectures and fam.positions
        for p in fam.positions:
            assert 0 < p.accept_rate <= 1 and p.position >= 1 and len(p.source) > 40 and p.derivation
    # Qwen3.5: acceptance length 3.12 at 3 steps, AL <= 1 + 3·p1, so p1 >= 0.7067, rounded down
    assert FAMILIES["qwen3.5-mtp"].positions[0].accept_rate == math.floor((3.12 - 1) / 3 * 1000) / 1000
    assert "3.12" in FAMILIES["qwen3.5-mtp"].positions[0].source
    # DeepSeek-V3: the low end of the report's 85-90 % second-token acceptance
    assert FAMILIES["deepseek-v3-mtp"].positions[0].accept_rate == 0.85
    assert "2412.19437" in FAMILIES["deepseek-v3-mtp"].positions[0].source
    assert family_of(["Qwen3_5MoeForConditionalGeneration"]) is FAMILIES["qwen3.5-mtp"]
    assert family_of(["LlamaForCausalLM"]) is None


_SPEC = """
version: 1
name: e
model: {{path: sim://m, engine: sim}}
variants:
  - {{name: base, baseline: true}}
  {spec_variant}
workloads: [{{name: w, input_tokens: 8, output_tokens: 8, num_requests: 2}}]
load: {{concurrency: [1]}}
acceptance_reference: {ref}
"""
_NEXTN = "- {name: nextn, speculative: {num_steps: 1}}"


@pytest.mark.parametrize("ref, variant, needle", [
    ("{family: qwen3.6}", _NEXTN, "unknown family 'qwen3.6': expected one of deepseek-v3-mtp, qwen3.5-mtp"),
    ("{positions: [0.8], family: qwen3.5-mtp}", _NEXTN, "give exactly one reference"),
    ("{margin: 0.1}", _NEXTN, "give exactly one reference"),
    ("{positions: [1.5]}", _NEXTN, "acceptance_reference.positions.0"),
    ("{positions: []}", _NEXTN, "acceptance_reference.positions"),
    ("{experiment: e}", _NEXTN, "'e' is this experiment"),
    ("{experiment: ../x}", _NEXTN, "acceptance_reference name '../x' must be"),
    ("{positions: [0.8], variant: v}", _NEXTN, "variant names a variant of the reference experiment"),
    ("{family: qwen3.5-mtp, margins: 0.1}", _NEXTN, "acceptance_reference.margins"),
    ("{family: qwen3.5-mtp}", "", "no variant is speculative"),
])
def test_acceptance_reference_refuses_bad_input(ref: str, variant: str, needle: str) -> None:
    with pytest.raises(UserError) as err:
        parse_spec_text(_SPEC.format(ref=ref, spec_variant=variant), "exp.yaml")
    assert needle in str(err.value) and "exp.yaml" in str(err.value)


def test_acceptance_reference_accepted() -> None:
    spec = parse_spec_text(_SPEC.format(ref="{experiment: unquantized, variant: nextn, margin: 0.05}",
                                        spec_variant=_NEXTN), "exp.yaml")
    assert spec.acceptance_reference == AcceptanceReferenceSpec(experiment="unquantized", variant="nextn", margin=0.05)


def test_the_reference_is_the_declared_one_else_the_probed_family_else_none(tmp_path: Path) -> None:
    from cluster.analysis.acceptance_health import reference_for

    meta = {"preflight": {"m": probe_checkpoint(str(qwen35_nvfp4(tmp_path / "m"))).to_json()}}
    probe = probe_evidence(meta, "m")
    assert probe is not None and probe.architectures == ("Qwen3_5MoeForConditionalGeneration",)
    results = None  # read only for an `experiment:` reference
    declared, _ = reference_for(results, AcceptanceReferenceSpec(positions=[0.9, 0.8], margin=0.05), probe, "w", "v")  # type: ignore[arg-type]
    assert declared is not None and [(p.position, p.accept_rate) for p in declared.points] == [(1, 0.9), (2, 0.8)]
    assert declared.margin == 0.05
    named, _ = reference_for(results, AcceptanceReferenceSpec(family="deepseek-v3-mtp"), probe, "w", "v")  # type: ignore[arg-type]
    assert named is not None and named.points == FAMILIES["deepseek-v3-mtp"].positions
    # nothing declared: the family the probe's architectures belong to, at the default margin
    probed, _ = reference_for(results, None, probe, "w", "v")  # type: ignore[arg-type]
    assert probed is not None and probed.label == "qwen3.5-mtp published figures" and probed.margin == 0.1
    none, why = reference_for(results, None, None, "w", "v")  # type: ignore[arg-type]
    assert none is None and why.startswith("no reference: declare acceptance_reference")


def test_runs_invalid_by_the_gate_floor_alone_are_judged_others_are_not() -> None:
    import pandas as pd

    from cluster.analysis.acceptance_positions import acceptance_by_position
    from cluster.analysis.correctness import evaluate_gate, gate_failed_reason, only_acceptance_floor
    from tests.unit.analysis.test_acceptance_positions import _requests

    # the gate's own reason for a head accepting ~2 % (acceptance length 1.02), as the run records it
    floor = evaluate_gate({}, None, 1.02, True, prompts=()).reasons
    assert floor == ("acceptance length 1.020 <= 1.05: the MTP draft accepts nothing (weights not loaded? SGLang "
                     "#35797)",)
    floor_run = gate_failed_reason(floor)
    assert only_acceptance_floor(floor_run)
    # the gate's notes are no reasons (gate_stage.py)
    assert only_acceptance_floor(gate_failed_reason(floor + ("note: prefix compared with the baseline's gate answers "
                                                             "stored in the dataset",)))
    # the floor beside another gate reason, or beside a run's own reason, or another reason alone: not judged
    assert not only_acceptance_floor(gate_failed_reason(("p1: no output",) + floor))
    assert not only_acceptance_floor(floor_run + "; client fell behind its schedule: send lag p99 9.00 ms > 5 ms")
    assert not only_acceptance_floor(gate_failed_reason(("NEXTN variant without a measured acceptance length",)))
    assert not only_acceptance_floor(floor[0]) and not only_acceptance_floor(None)

    runs = pd.DataFrame({"run_key": ["ok", "floor", "other"], "status": ["ok", "invalid", "invalid"],
                         "spec_num_steps": [1, 1, 1], "invalid_reasons": [None, floor_run,
                                                                          gate_failed_reason(("p1: no output",))]})
    # nextn-a's runs are invalid by the floor alone (2 of 100 steps accepted at position 1), nextn-b's for another
    # reason, nextn-c's ok
    reqs = _requests([
        {"run_key": "floor", "variant": "nextn-a", "spec_verify_ct": 100, "spec_correct_drafts_histogram": [98, 2]},
        {"run_key": "other", "variant": "nextn-b", "spec_verify_ct": 100, "spec_correct_drafts_histogram": [98, 2]},
        {"run_key": "ok", "variant": "nextn-c", "spec_verify_ct": 10, "spec_correct_drafts_histogram": [2, 8]},
    ])
    assert [g.variant for g in acceptance_by_position(reqs, runs)] == ["nextn-c"]  # per-position tables: ok only
    judged = {g.variant: g for g in acceptance_by_position(reqs, runs, with_floor_invalid=True)}
    assert set(judged) == {"nextn-a", "nextn-c"}
    (j,) = judge(judged["nextn-a"].positions, _curve(QWEN))
    assert j.collapsed and (j.measured.correct, j.measured.counted) == (2, 100)


def test_the_verdict_in_json_carries_positions_reference_and_evidence(tmp_path: Path) -> None:
    from cluster.analysis.acceptance_health import health_json

    meta = {"preflight": {"m": probe_checkpoint(str(qwen35_nvfp4(tmp_path / "m", mtp_quantized=True))).to_json()}}
    curve = _curve(QWEN)
    h = AcceptanceHealth("w", "nextn-1", COLLAPSED, curve, judge(positions([[98, 2]], 1), curve), "",
                         probe_evidence(meta, "m"), floor_invalid_runs=3)
    doc = json.loads(json.dumps(health_json(h)))
    assert doc["verdict"] == COLLAPSED and doc["floor_invalid_runs"] == 3
    assert doc["summary"].startswith("w nextn-1 (3 runs invalid: the gate's acceptance floor; judged, never "
                                     "compared): acceptance-collapsed against test: position 1 accepts 0.020")
    (p,) = doc["positions"]
    assert (p["position"], p["accepted"], p["steps"], p["rate"], p["collapsed"]) == (1, 2, 100, 0.02, True)
    assert p["reference_rate"] == QWEN and doc["reference"]["margin"] == 0.1
    assert doc["reference"]["points"][0] == {"position": 1, "accept_rate": QWEN, "source": "hand-built",
                                             "derivation": ""}
    assert doc["probe"]["quantized"] is True and doc["probe"]["quant_algo"] == "NVFP4"
    assert doc["probe"]["excluded"] is False and doc["probe"]["dtypes"]["U8"] == 12
    assert doc["detail"][-1].startswith("try: keep the MTP layers in BF16")
