"""The simulator's arithmetic answers and the knob wrong_answers_in_mixed_batch: right alone, wrong (last digit off
by one) for a question that arrives while other requests run or wait."""

from __future__ import annotations

from cluster.config.sim_knobs import Knobs
from cluster.sim.model import Scheduler, arithmetic_ids, piece


def _text(ids: list[int]) -> str:
    return "".join(piece(t) for t in ids)


def test_arithmetic_questions_are_answered() -> None:
    assert _text(arithmetic_ids("What is 50 - 98? Answer with the number only.", False)) == "-48"
    assert _text(arithmetic_ids("What is 6 * 34?", False)) == "204"
    assert _text(arithmetic_ids("What is 6 * 34?", True)) == "205"  # last digit 4 -> 5
    assert _text(arithmetic_ids("What is 9 + 1?", True)) == "11"    # 10: last digit 0 -> 1
    assert arithmetic_ids("Reply with OK", False) == []


def _answer(s: Scheduler, rid: str, text: str) -> str:
    req = s.new_request(rid, None, text, 16, False)
    return _text(req.out_ids)


def test_wrong_only_when_the_question_joins_other_requests() -> None:
    q = "What is 37 + 58? Answer with the number only."
    faulty = Scheduler(Knobs(wrong_answers_in_mixed_batch=True), 8, None)
    assert _answer(faulty, "alone", q) == "95"  # nothing else runs or waits
    faulty.submit(faulty.new_request("load", [1, 2, 3], None, 32, True))  # one request waiting
    assert _answer(faulty, "mixed", q) == "96"
    faulty.plan_step()  # the load request is admitted (to run in the next step)
    assert _answer(faulty, "admitted", q) == "96"
    while faulty.busy or faulty._new:
        faulty.plan_step()
        faulty.commit_step()
    assert _answer(faulty, "alone-again", q) == "95"
    healthy = Scheduler(Knobs(), 8, None)
    healthy.submit(healthy.new_request("load", [1, 2, 3], None, 32, True))
    assert _answer(healthy, "mixed", q) == "95"
