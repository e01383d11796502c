"""Accuracy of the eval task (`correctness.eval`) per variant and phase: one answer rule, the Wilson interval of a
share, the interval of a difference of two shares, and the verdict that makes a variant invalid for speed claims.

Defined once each:
- correct: the answer's last integer equals an integer expected answer (text after any </think>), or, for an
  expected answer that is not an integer, the trimmed answer equals it ignoring case;
- accuracy = correct / counted, counted = the answers that came (alone: every item asked; under load: those sent
  and answered while the load still ran, `during_load`); a failed request is a wrong answer, an unsent one is not
  counted;
- its 95 % interval: Wilson's score interval (good at 0 % and 100 %, where the normal one collapses to a point);
- difference = variant − baseline, its 95 % interval Newcombe's hybrid score interval (1998, method 10) built from
  the two Wilson intervals (independent samples: conservative for the same prompts asked of both);
- a variant is INVALID for speed claims when its difference under load (alone, when nothing was asked under load)
  has an upper bound below 0: it answers worse than the baseline beyond the noise.
"""

from __future__ import annotations

import html
import math
import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Sequence

import pandas as pd
import pyarrow as pa

from cluster.analysis.correctness import CORRECTNESS_SCHEMA, MAX_STORED_TEXT
from cluster.analysis.results import Results
from cluster.kernel.gate import PHASE_ALONE, PHASE_UNDER_LOAD
from cluster.kernel.runs import RECORD_SCHEMA_VERSION
from cluster.kernel.eval_task import EvalAnswer, EvalItem

Z_95 = 1.959963984540054
"""The standard normal's 97.5 % quantile: two-sided 95 % intervals."""

TASK_EVAL = "eval"
"""The `task` of the correctness table's eval rows (gate rows: null)."""

_INTEGER = re.compile(r"^[+-]?\d[\d,]*$")
_LAST_INTEGER = re.compile(r"[+-]?\d[\d,]*")


def extract_answer(expected: str, got: Optional[str]) -> Optional[str]:
    """What an answer says, read as its expected answer is written: the last integer (commas dropped) of the text
    after any </think> when `expected` is an integer, else the trimmed text; None when there is none."""
    if got is None:
        return None
    text = got.rsplit("</think>", 1)[1] if "</think>" in got else got
    if _INTEGER.match(expected.strip()):
        numbers = _LAST_INTEGER.findall(text)
        return numbers[-1].replace(",", "").lstrip("+") if numbers else None
    return text.strip() or None


def answer_correct(expected: str, got: Optional[str]) -> bool:
    """One answer against its exact expected answer (the rule in the module docstring)."""
    said = extract_answer(expected, got)
    if said is None:
        return False
    want = expected.strip()
    if _INTEGER.match(want):
        return int(said) == int(want.replace(",", ""))
    return said.casefold() == want.casefold()


@dataclass(frozen=True)
class Share:
    """correct of counted, with its 95 % Wilson interval (None when nothing was counted)."""

    correct: int
    counted: int
    low: Optional[float]
    high: Optional[float]

    @property
    def rate(self) -> Optional[float]:
        return self.correct / self.counted if self.counted else None


def wilson(correct: int, counted: int, z: float = Z_95) -> Share:
    """Wilson's score interval of correct/counted: (p + z²/2n ± z·√(p(1−p)/n + z²/4n²)) / (1 + z²/n)."""
    if not 0 <= correct <= counted:
        raise ValueError(f"correct {correct} must be within 0..counted {counted}")
    if counted == 0:
        return Share(0, 0, None, None)
    n, p = counted, correct / counted
    d = 1 + z * z / n
    center = (p + z * z / (2 * n)) / d
    half = z / d * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return Share(correct, counted, max(0.0, center - half), min(1.0, center + half))


@dataclass(frozen=True)
class Difference:
    """variant − baseline accuracy with its 95 % interval (Newcombe's hybrid score)."""

    diff: float
    low: float
    high: float


def difference(variant: Share, baseline: Share) -> Optional[Difference]:
    """Newcombe's interval of p1 − p2: d − √((p1−l1)² + (u2−p2)²) .. d + √((u1−p1)² + (p2−l2)²); None when either
    side counted nothing."""
    p1, p2 = variant.rate, baseline.rate
    if p1 is None or p2 is None:
        return None
    assert variant.low is not None and variant.high is not None and baseline.low is not None \
        and baseline.high is not None
    d = p1 - p2
    return Difference(d, d - math.hypot(p1 - variant.low, baseline.high - p2),
                      d + math.hypot(variant.high - p1, p2 - baseline.low))


@dataclass(frozen=True)
class AccuracyVerdict:
    """One variant's accuracy alone and under load, against the baseline's in the same phase."""

    variant: str
    alone: Share
    under_load: Share
    not_counted_under_load: int
    """Items asked under load that do not count (not sent, or answered after the load ended)."""
    alone_vs_baseline: Optional[Difference]
    under_load_vs_baseline: Optional[Difference]
    invalid: bool
    reason: Optional[str]
    """Why the variant is invalid for speed claims (None when it is not)."""


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def describe(s: Share) -> str:
    """'8/10 = 80.0% [49.0%, 94.3%]'."""
    return f"{s.correct}/{s.counted} = {_pct(s.rate)} [{_pct(s.low)}, {_pct(s.high)}]" if s.counted else "none counted"


def _share(rows: Iterable[Mapping[str, object]]) -> Share:
    counted = [r for r in rows if r["counted"]]
    return wilson(sum(1 for r in counted if r["correct"]), len(counted))


def accuracy_verdicts(table: pa.Table, baseline: Optional[str]) -> dict[str, AccuracyVerdict]:
    """Per variant with eval rows in the correctness table (CORRECTNESS_SCHEMA), its verdict against `baseline`
    (the baseline itself, and every variant when there is none, is never invalid by this rule)."""
    if table.num_rows == 0 or "task" not in table.column_names:
        return {}
    cols = ["variant", "task", "phase", "correct", "counted"]
    rows = [r for r in table.select(cols).to_pylist() if r["task"] == TASK_EVAL]
    by: dict[tuple[str, str], list[Mapping[str, object]]] = {}
    for r in rows:
        by.setdefault((str(r["variant"]), str(r["phase"])), []).append(r)
    names = sorted({v for v, _ in by})
    shares = {(v, ph): _share(by.get((v, ph), [])) for v in names for ph in (PHASE_ALONE, PHASE_UNDER_LOAD)}
    out: dict[str, AccuracyVerdict] = {}
    for v in names:
        alone, loaded = shares[(v, PHASE_ALONE)], shares[(v, PHASE_UNDER_LOAD)]
        skipped = sum(1 for r in by.get((v, PHASE_UNDER_LOAD), []) if not r["counted"])
        d_alone = d_load = None
        if baseline is not None and baseline != v and baseline in names:
            d_alone = difference(alone, shares[(baseline, PHASE_ALONE)])
            d_load = difference(loaded, shares[(baseline, PHASE_UNDER_LOAD)])
        judged, phase = (d_load, "under load") if d_load is not None else (d_alone, "alone")
        reason = None
        if judged is not None and judged.high < 0:
            mine = loaded if d_load is not None else alone
            theirs = shares[(str(baseline), PHASE_UNDER_LOAD if d_load is not None else PHASE_ALONE)]
            reason = (f"accuracy {phase} {describe(mine)} is below the baseline's {describe(theirs)} beyond the "
                      f"interval (difference {100 * judged.diff:+.1f} points [{100 * judged.low:+.1f}, "
                      f"{100 * judged.high:+.1f}])")
        out[v] = AccuracyVerdict(v, alone, loaded, skipped, d_alone, d_load, reason is not None, reason)
    return out


def eval_table(experiment: str, variant: str, engine: str, items: Sequence[EvalItem],
               answers: Sequence[EvalAnswer], gate_passed: bool, gate_reasons: Sequence[str],
               run_key: Optional[str] = None) -> pa.Table:
    """The eval answers as rows of the correctness table (task "eval"): expected, got (extract_answer), correct,
    counted (alone: every answer; under load: answered while the load ran), the request's error or the mismatch as
    evidence; the gate's verdict repeats as the variant's (the accuracy verdict is derived when read)."""
    expected = {i.item_id: i.expected for i in items}
    rows = []
    for a in answers:
        want = expected[a.item_id]
        said = extract_answer(want, a.text)
        ok = answer_correct(want, a.text)
        counted = a.during_load is not False if a.phase == PHASE_UNDER_LOAD else True
        why = [a.error] if a.error else [] if ok else [f"expected {want!r}, got {said!r}"]
        if not counted:
            why.append("not counted: not answered while the load ran")
        rows.append({"experiment": experiment, "variant": variant, "engine": engine, "prompt_id": a.item_id,
                     "phase": a.phase, "filler_requests": None, "prompt_passed": ok, "answer_ok": ok,
                     "common_prefix_tokens": None, "output_tokens": a.output_tokens,
                     "output_text": None if a.text is None else a.text[:MAX_STORED_TEXT], "evidence": "; ".join(why),
                     "variant_passed": gate_passed, "variant_reasons": "; ".join(gate_reasons),
                     "accept_length": None, "schema_version": RECORD_SCHEMA_VERSION, "task": TASK_EVAL,
                     "run_key": run_key, "expected": want, "got": said, "correct": ok, "counted": counted})
    return pa.Table.from_pylist(rows, schema=CORRECTNESS_SCHEMA)


VERDICT_LESS_ACCURATE = "not a speed claim: less accurate than the baseline"
"""The speedup verdict of a variant whose accuracy verdict is invalid: its speed is shown, never claimed."""


def with_accuracy(table: pd.DataFrame, results: Results, baseline: Optional[str]) -> pd.DataFrame:
    """Compare's rows (one per load point and variant) with `accuracy_invalid` (the reason, "" when none) from the
    correctness table's eval rows; an invalid variant's rows get the reason as a warning and every speedup verdict
    column VERDICT_LESS_ACCURATE."""
    out = table.copy()
    verdicts = accuracy_verdicts(results.table("correctness"), baseline)
    reasons = [verdicts[v].reason or "" if v in verdicts else "" for v in out["variant"]]
    out["accuracy_invalid"] = reasons
    verdict_cols = [c for c in out.columns if str(c).startswith("speedup_") and str(c).endswith("_verdict")]
    for i, why in zip(out.index, reasons):
        if why:
            out.at[i, "warnings"] = list(out.at[i, "warnings"]) + [f"invalid for speed claims: {why}"]
            for c in verdict_cols:
                out.at[i, c] = VERDICT_LESS_ACCURATE
    return out


def gates_with_accuracy(gates: Mapping[str, tuple[bool, str]], correctness: pa.Table,
                        baseline: Optional[str]) -> dict[str, tuple[bool, str]]:
    """recommend's per-variant (passed, reasons) with every variant invalid for speed claims failed, its reason
    added: it is left out of the choice as a gate failure is."""
    out = dict(gates)
    for v, a in accuracy_verdicts(correctness, baseline).items():
        if a.invalid:
            passed, reasons = out.get(v, (True, ""))
            why = f"invalid for speed claims: {a.reason}"
            out[v] = (False, f"{reasons}; {why}" if reasons and not passed else why)
    return out


def _points(d: Optional[Difference]) -> str:
    return "-" if d is None else f"{100 * d.diff:+.1f} [{100 * d.low:+.1f}, {100 * d.high:+.1f}]"


def accuracy_view(verdicts: Mapping[str, AccuracyVerdict]) -> pd.DataFrame:
    """One row per variant: accuracy alone and under load with intervals, the differences to the baseline in
    points, and whether its speed may be claimed."""
    return pd.DataFrame([{
        "variant": v.variant, "alone": describe(v.alone), "under load": describe(v.under_load),
        "not counted under load": v.not_counted_under_load,
        "alone − baseline (points)": _points(v.alone_vs_baseline),
        "under load − baseline (points)": _points(v.under_load_vs_baseline),
        "speed claims": "INVALID: less accurate than the baseline" if v.invalid else "valid"}
        for v in verdicts.values()])


def accuracy_html(results: Results, baseline: Optional[str]) -> str:
    """The report's Accuracy section ('' without eval rows): accuracy_view and each invalid variant's reason."""
    verdicts = accuracy_verdicts(results.table("correctness"), baseline)
    if not verdicts:
        return ""
    view = accuracy_view(verdicts)
    reasons = "".join(f"<li>{html.escape(v.variant)}: {html.escape(v.reason)}</li>" for v in verdicts.values()
                      if v.reason)
    table: str = view.to_html(index=False, escape=True, border=0)
    return ("<h2>Accuracy under load</h2><p>The eval task (correctness.eval, docs/accuracy.md): correct / counted "
            "with Wilson's 95% interval; the difference to the baseline with Newcombe's interval.</p>"
            + table + (f"<ul>{reasons}</ul>" if reasons else ""))


def invalid_for_speed_claims(results: Results, baseline: Optional[str]) -> dict[str, str]:
    """variant -> why its speed may not be claimed, for every variant the accuracy verdict makes invalid."""
    return {v: a.reason for v, a in accuracy_verdicts(results.table("correctness"), baseline).items()
            if a.reason is not None}
