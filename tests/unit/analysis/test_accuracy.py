"""The eval task's accuracy: the answer rule, the Wilson interval, the difference's interval and the verdict, on
hand-built counts whose arithmetic is in the comments (z = 1.95996, z² = 3.84146)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from cluster.analysis.accuracy import (TASK_EVAL, accuracy_verdicts, answer_correct, describe, difference,
                                       eval_table, extract_answer, wilson)
from cluster.kernel.gate import PHASE_ALONE, PHASE_UNDER_LOAD
from cluster.kernel.eval_task import EvalAnswer, EvalItem


def test_wilson_interval_of_8_of_10() -> None:
    # p = 0.8, n = 10: z²/n = 0.384146, denominator 1 + z²/n = 1.384146
    # centre (p + z²/2n) / d = (0.8 + 0.192073) / 1.384146 = 0.716740
    # half z/d · √(p(1−p)/n + z²/4n²) = 1.95996/1.384146 · √(0.016 + 0.009604) = 1.416007 · 0.160011 = 0.226578
    # interval 0.716740 ± 0.226578 = [0.490162, 0.943318]
    s = wilson(8, 10)
    assert s.rate == 0.8
    assert s.low == pytest.approx(0.490162, abs=1e-6) and s.high == pytest.approx(0.943318, abs=1e-6)


def test_wilson_interval_at_100_percent_is_not_a_point() -> None:
    # p = 1, n = 10: centre (1 + 0.192073) / 1.384146 = 0.861234; half 1.416007 · √(0 + 0.009604) = 0.138766
    # [0.722467, 1.0]: ten right answers out of ten still leave room for a 28 % error rate
    s = wilson(10, 10)
    assert s.low == pytest.approx(0.722467, abs=1e-6) and s.high == pytest.approx(1.0)
    assert wilson(0, 0).low is None and wilson(0, 0).rate is None
    with pytest.raises(ValueError):
        wilson(3, 2)


def test_difference_beyond_the_interval_and_within_it() -> None:
    # 4/10 against 10/10: Wilson(4/10) = 0.427753 ± 0.259573 = [0.168180, 0.687326]; Wilson(10/10) = [0.722467, 1]
    # d = 0.4 − 1.0 = −0.6
    # low  = d − √((p1 − l1)² + (u2 − p2)²) = −0.6 − √(0.231820² + 0²)        = −0.831820
    # high = d + √((u1 − p1)² + (p2 − l2)²) = −0.6 + √(0.287326² + 0.277533²) = −0.6 + 0.399476 = −0.200524
    d = difference(wilson(4, 10), wilson(10, 10))
    assert d is not None
    assert d.diff == pytest.approx(-0.6)
    assert d.low == pytest.approx(-0.831820, abs=1e-6) and d.high == pytest.approx(-0.200524, abs=1e-6)
    # 8/10 against 10/10: d = −0.2; high = −0.2 + √((0.943318 − 0.8)² + (1 − 0.722467)²) = −0.2 + 0.312353 = +0.112353
    d2 = difference(wilson(8, 10), wilson(10, 10))
    assert d2 is not None and d2.low < 0 < d2.high and d2.high == pytest.approx(0.112353, abs=1e-6)
    assert difference(wilson(0, 0), wilson(1, 1)) is None


@pytest.mark.parametrize(("expected", "got", "extracted", "ok"), [
    ("95", "95", "95", True),
    ("95", " The answer is 95.", "95", True),
    ("-48", "-48", "-48", True),
    ("1,204", "1204", "1204", True),
    ("204", "20 4", "4", False),              # the last integer counts
    ("95", "<think>maybe 94</think> 95", "95", True),
    ("95", "96", "96", False),
    ("95", "NaN", None, False),
    ("95", None, None, False),
    ("Paris", " paris ", "paris", True),
    ("Paris", "Lyon", "Lyon", False),
])
def test_answer_rule(expected: str, got: str | None, extracted: str | None, ok: bool) -> None:
    assert extract_answer(expected, got) == extracted
    assert answer_correct(expected, got) is ok


ITEMS = [EvalItem(f"row{i}", i + 1, f"q{i}", str(i)) for i in range(10)]


def _answers(phase: str, right: int, late: int = 0) -> list[EvalAnswer]:
    """10 answers: the first `right` correct; under load, the last `late` answered after the load ended."""
    out = []
    for i, item in enumerate(ITEMS):
        text = item.expected if i < right else str(i + 1)
        during = None if phase == PHASE_ALONE else i < len(ITEMS) - late
        out.append(EvalAnswer(item.item_id, phase, text, None, 1, during))
    return out


def _table(variant: str, alone: int, loaded: int, late: int = 0) -> pa.Table:
    return eval_table("exp", variant, "sim", ITEMS, _answers(PHASE_ALONE, alone) + _answers(PHASE_UNDER_LOAD, loaded,
                                                                                             late), True, ())


def test_a_variant_wrong_only_under_load_is_invalid_for_speed_claims() -> None:
    table = pa.concat_tables([_table("base", 10, 10), _table("fast", 10, 4), _table("close", 10, 8)])
    v = accuracy_verdicts(table, "base")
    assert not v["base"].invalid and v["base"].under_load_vs_baseline is None
    # alone 10/10 like the baseline: the difference is 0 [-0.277533, +0.277533], not a failure
    assert v["fast"].alone_vs_baseline is not None and v["fast"].alone_vs_baseline.diff == 0
    # under load 4/10 against 10/10: high −0.200524 < 0 (test above)
    assert v["fast"].invalid and v["fast"].reason is not None
    assert "under load 4/10 = 40.0% [16.8%, 68.7%]" in v["fast"].reason and "baseline's 10/10" in v["fast"].reason
    # 8/10 against 10/10: high +0.112353, inside the noise
    assert not v["close"].invalid


def test_answers_after_the_load_ended_are_not_counted() -> None:
    # 10 asked under load, the last 3 answered after the load ended: 7 counted, all right
    v = accuracy_verdicts(_table("base", 10, 10, late=3), None)["base"]
    assert (v.under_load.correct, v.under_load.counted, v.not_counted_under_load) == (7, 7, 3)
    assert describe(v.alone) == "10/10 = 100.0% [72.2%, 100.0%]"


def test_eval_rows_in_the_correctness_table() -> None:
    t = _table("fast", 10, 4)
    rows = t.to_pylist()
    assert len(rows) == 20 and {r["task"] for r in rows} == {TASK_EVAL}
    wrong = [r for r in rows if r["phase"] == PHASE_UNDER_LOAD and not r["correct"]]
    assert len(wrong) == 6 and wrong[0]["expected"] == "4" and wrong[0]["got"] == "5"
    assert wrong[0]["answer_ok"] is False and "expected '4', got '5'" in wrong[0]["evidence"]
    assert accuracy_verdicts(t.slice(0, 0), None) == {}
