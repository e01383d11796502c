"""`correctness: {check_answers: false}` turns off only the task-answer check; the other gate rules still decide."""

from __future__ import annotations

import pytest

from cluster.analysis.correctness import evaluate_gate
from cluster.kernel.gate import GATE_PROMPTS, GateOutput
from cluster.config.loader import parse_spec_text

GIBBERISH = "alpha beta gamma delta epsilon zeta eta theta iota kappa"
"""What a random-weight model answers: no task answer, but not degenerate either."""


def gibberish(ids_from: int = 100, drift_after: int | None = None) -> dict[str, GateOutput]:
    out = {}
    for p in GATE_PROMPTS:
        ids = [ids_from + i for i in range(32)]
        if drift_after is not None:
            ids = ids[:drift_after] + [900 + i for i in range(32 - drift_after)]
        out[p.prompt_id] = GateOutput(text=GIBBERISH, token_ids=tuple(ids), completion_tokens=32)
    return out


def test_wrong_answers_fail_by_default() -> None:
    r = evaluate_gate(gibberish(), gibberish(), None, is_nextn=False)
    assert not r.passed and all("wrong answer" in x for x in r.reasons)


def test_without_the_answer_check_a_random_weight_baseline_passes() -> None:
    r = evaluate_gate(gibberish(), None, None, is_nextn=False, check_answers=False)
    assert r.passed and r.reasons == ()
    assert all(v.answer_ok is None and v.passed for v in r.prompts)
    assert all("answer not checked" in " ".join(v.evidence) for v in r.prompts)


def test_without_the_answer_check_acceptance_near_one_still_fails_a_nextn_variant() -> None:
    r = evaluate_gate(gibberish(), gibberish(), 1.03, is_nextn=True, check_answers=False)
    assert not r.passed and len(r.reasons) == 1 and "acceptance length 1.030" in r.reasons[0]
    ok = evaluate_gate(gibberish(), gibberish(), 3.88, is_nextn=True, check_answers=False)
    assert ok.passed


def test_without_the_answer_check_early_divergence_still_fails() -> None:
    r = evaluate_gate(gibberish(drift_after=2), gibberish(), 2.0, is_nextn=True, check_answers=False)
    assert not r.passed and any("diverges from the baseline" in x for x in r.reasons)


def test_without_the_answer_check_degenerate_output_still_fails() -> None:
    bad = {p.prompt_id: GateOutput(text="the " * 20, token_ids=(7,) * 20) for p in GATE_PROMPTS}
    r = evaluate_gate(bad, None, None, is_nextn=False, check_answers=False)
    assert not r.passed and all("one token" in x for x in r.reasons)
    empty = {p.prompt_id: GateOutput(text="") for p in GATE_PROMPTS}
    assert not evaluate_gate(empty, None, None, is_nextn=False, check_answers=False).passed


SPEC = """
version: 1
name: t
model: {{path: /m, engine: sim}}
variants: [{{name: base, baseline: true}}]
workloads: [{{name: w, input_tokens: 8, output_tokens: 8, num_requests: 2}}]
load: {{concurrency: [1]}}
{extra}
"""


@pytest.mark.parametrize("extra,want", [("", True), ("correctness: {check_answers: false}", False)])
def test_the_spec_switch(extra: str, want: bool) -> None:
    spec = parse_spec_text(SPEC.format(extra=extra))
    assert spec.correctness.check_answers is want and spec.correctness.enabled
