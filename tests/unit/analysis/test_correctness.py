"""The correctness gate: wrong answers, degenerate output, early divergence, accept length ≈ 1; drift passes."""

from __future__ import annotations

from cluster.analysis.correctness import CORRECTNESS_SCHEMA, correctness_rows, evaluate_gate
from cluster.kernel.gate import GATE_PROMPTS, GateOutput, degeneracy

ANSWERS = {"reply_ok": "OK", "multiply": "17 times 19 is 323.", "reasoning": "3 boxes of 4 is 12, minus 2 leaves 10."}


def outputs(texts: dict[str, str], ids: bool = True, drift_after: int | None = None) -> dict[str, GateOutput]:
    out = {}
    for pid, text in texts.items():
        base_ids = [100 + i for i in range(40)]
        if drift_after is not None:
            base_ids = base_ids[:drift_after] + [999 - i for i in range(40 - drift_after)]
        out[pid] = GateOutput(text=text, token_ids=tuple(base_ids) if ids else None, completion_tokens=40)
    return out


def test_all_prompts_have_checkable_answers() -> None:
    assert {p.prompt_id for p in GATE_PROMPTS} == set(ANSWERS)
    assert any("17" in p.text and "19" in p.text for p in GATE_PROMPTS)


def test_correct_variant_passes_and_records_prefix() -> None:
    base = outputs(ANSWERS)
    r = evaluate_gate(outputs(ANSWERS), base, accept_length=2.6, is_nextn=True)
    assert r.passed, r.reasons
    assert [p.common_prefix_tokens for p in r.prompts] == [40, 40, 40]


def test_late_drift_passes_token_equality_not_required() -> None:
    r = evaluate_gate(outputs(ANSWERS, drift_after=20), outputs(ANSWERS), accept_length=2.1, is_nextn=True)
    assert r.passed and [p.common_prefix_tokens for p in r.prompts] == [20, 20, 20]


def test_early_divergence_on_most_prompts_fails() -> None:
    r = evaluate_gate(outputs(ANSWERS, drift_after=3), outputs(ANSWERS), accept_length=None, is_nextn=False)
    assert not r.passed and any("diverges from the baseline" in x for x in r.reasons)
    assert all(p.common_prefix_tokens == 3 for p in r.prompts)


def test_wrong_answer_fails() -> None:
    r = evaluate_gate(outputs({**ANSWERS, "multiply": "It is 324."}), None, None, is_nextn=False)
    assert not r.passed and r.reasons[0].startswith("multiply: wrong answer")
    assert [p.answer_ok for p in r.prompts] == [True, False, True]


def test_answer_is_read_after_the_think_block() -> None:
    txt = {**ANSWERS, "multiply": "<think>maybe 10? no</think> 323"}
    assert evaluate_gate(outputs(txt), None, None, False).passed
    txt = {**ANSWERS, "reasoning": "<think>the answer is 10</think> eleven"}
    assert not evaluate_gate(outputs(txt), None, None, False).passed


def test_degenerate_outputs_fail() -> None:
    assert degeneracy(GateOutput(text="", token_ids=())) == "empty output"
    assert "replacement" in (degeneracy(GateOutput(text="OK \ufffd\ufffd")) or "")
    assert degeneracy(GateOutput(text="nan")) == "output is 'nan'"
    rep = GateOutput(text="OK OK OK OK OK OK OK OK OK 323 10", token_ids=tuple([7] * 30 + [1, 2]))
    assert "one token (7)" in (degeneracy(rep) or "")
    assert degeneracy(GateOutput(text=ANSWERS["reasoning"], token_ids=tuple(range(20)))) is None
    garbage = outputs({k: "!!!! " * 20 for k in ANSWERS}, ids=False)
    r = evaluate_gate(garbage, None, None, False)
    assert not r.passed and any("one token ('!!!!')" in x for x in r.reasons)


def test_nextn_accept_length_near_one_fails() -> None:
    ok = outputs(ANSWERS)
    r = evaluate_gate(ok, ok, accept_length=1.02, is_nextn=True)
    assert not r.passed and "35797" in r.reasons[-1]
    assert evaluate_gate(ok, ok, accept_length=1.02, is_nextn=False).passed
    assert not evaluate_gate(ok, ok, accept_length=None, is_nextn=True).passed


def test_correctness_rows_match_the_schema() -> None:
    outs = outputs({**ANSWERS, "multiply": "324"})
    r = evaluate_gate(outs, outputs(ANSWERS), accept_length=2.0, is_nextn=True)
    t = correctness_rows("exp", "nextn-2", "sim", r, outs)
    assert t.schema.equals(CORRECTNESS_SCHEMA) and t.num_rows == 3
    rows = {x["prompt_id"]: x for x in t.to_pylist()}
    assert rows["multiply"]["prompt_passed"] is False and rows["reply_ok"]["prompt_passed"] is True
    assert rows["multiply"]["variant_passed"] is False and "wrong answer" in rows["multiply"]["variant_reasons"]
    assert rows["reply_ok"]["common_prefix_tokens"] == 40 and rows["reply_ok"]["output_tokens"] == 40


def test_the_loaded_pass_is_stored_beside_the_answers_alone_and_its_verdict_on_every_row() -> None:
    """Issue 15 item 4's evidence: the answers asked inside filler load are rows of their own (phase under_load),
    and a variant that only degenerates under load says failed on every row, not the solo pass's verdict."""
    from cluster.loadgen.gate import answers_from_correctness_rows

    alone = outputs(ANSWERS)
    r = evaluate_gate(alone, alone, accept_length=2.0, is_nextn=True)
    assert r.passed
    loaded = {**outputs(ANSWERS), "multiply": GateOutput(text="nan", token_ids=(7,), completion_tokens=1)}
    why = "under load (61 filler requests + 3 gate prompts at once), prompt 'multiply': output is 'nan'"
    t = correctness_rows("exp", "nextn-2", "sim", r, alone, (False, [why]), loaded, 61)
    assert t.schema.equals(CORRECTNESS_SCHEMA) and t.num_rows == 6
    rows = {(x["phase"], x["prompt_id"]): x for x in t.to_pylist()}
    bad = rows[("under_load", "multiply")]
    assert bad["prompt_passed"] is False and bad["evidence"] == "output is 'nan'" and bad["filler_requests"] == 61
    assert bad["output_text"] == "nan" and bad["output_tokens"] == 1
    assert rows[("under_load", "reply_ok")]["prompt_passed"] is True
    assert rows[("alone", "multiply")]["prompt_passed"] is True and rows[("alone", "multiply")]["filler_requests"] is None
    assert {x["variant_passed"] for x in rows.values()} == {False}
    assert {x["variant_reasons"] for x in rows.values()} == {why}
    # read back on a resume, the baseline's answers are the ones asked alone
    back = answers_from_correctness_rows(t)
    assert {k: o.text for k, o in back.outputs.items()} == ANSWERS and back.accept_length == 2.0
    # a table written before the phase column existed is all answers alone
    import pyarrow.compute as pc

    old = t.filter(pc.equal(t.column("phase"), "alone")).drop_columns(["phase", "filler_requests"])
    assert set(answers_from_correctness_rows(old).outputs) == set(ANSWERS)
