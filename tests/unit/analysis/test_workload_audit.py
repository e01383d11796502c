"""The workload audit's rules on hand-built runs whose arithmetic is in the comments (analysis/workload_audit.py)."""

from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np
import pyarrow as pa

from cluster.analysis.workload_audit import (AUDIT_ALPHA, audit_workload, binomial_interval, expected_distinct,
                                             poisson_upper)
from cluster.kernel.planned_workload import category_shares, length_quantiles
from cluster.kernel.planned_workload import PlannedWorkload
from cluster.kernel.records import RequestRecord
from cluster.loadgen.sink import request_batches


def _requests(fingerprints: Sequence[Optional[int]], lengths: Sequence[int],
              categories: Sequence[Optional[str]], turns: Optional[Sequence[Optional[int]]] = None) -> pa.Table:
    recs = [RequestRecord(request_index=i, intended_send_ns=0, actual_send_ns=0, prompt_tokens_sent=n, max_tokens=4,
                          chunk_arrival_ns=[10], chunk_tokens=[1], category=c, prompt_fingerprint=f,
                          turn=turns[i] if turns else None)
            for i, (f, n, c) in enumerate(zip(fingerprints, lengths, categories))]
    reqs, _ = request_batches(recs)
    return pa.Table.from_batches([reqs])


def _sharegpt_40() -> PlannedWorkload:
    # 40 distinct rows, 20 code and 20 chat, lengths 10..49 tokens (one row each)
    return PlannedWorkload("sharegpt", 40.0, False, length_quantiles(np.arange(10, 50)),
                           category_shares(["code", "chat"] * 20))


def test_a_file_source_run_that_sent_its_40_rows_passes_and_the_collapse_is_flagged_three_ways() -> None:
    plan = _sharegpt_40()
    # lengths 10..49: p10 is the 4th smallest (ceil(0.1·40) = 4) = 13, p50 the 20th = 29, p90 the 36th = 45
    assert [q.tokens for q in plan.lengths or ()] == [13, 29, 45]
    good = _requests(range(40), range(10, 50), ["code", "chat"] * 20)
    a = audit_workload(good, plan)
    assert a.reasons == () and (a.distinct_sent, a.distinct_planned) == (40, 40)
    assert a.lengths_sent == a.lengths_selection == (13.0, 29.0, 45.0)
    assert a.shares_sent == a.shares_selection == {"chat": 0.5, "code": 0.5}

    # the bug: one row (10 tokens, category code) sent 40 times
    collapsed = _requests([7] * 40, [10] * 40, ["code"] * 40)
    a = audit_workload(collapsed, plan)
    # m = 1 distinct + 2·3 length + 2 category tests = 9 tests, each at α/m = 0.000111: Binomial(40, 0.5)
    # allows 8..32 code requests at that level (P(X ≤ 7) = 2.1e-5 ≤ α/2m = 5.6e-5 < P(X ≤ 8) = 9.1e-5): 40 is
    # outside, chat 0 is outside too
    lo, hi = binomial_interval(40, 0.5, AUDIT_ALPHA / 9)
    assert (lo, hi) == (8, 32)
    assert lo <= 20 <= hi and hi < 40 and lo > 0
    assert a.distinct_sent == 1 and a.distinct_planned == 40
    assert a.reasons[0].startswith("sent 1 distinct prompts of 40 (first turns), fewer than the 40")
    # p50: all 40 sent lengths (10) are below 29, where F(29−) = 19/40 allows at most 31 of 40 below; p90 is not
    # flagged: F(45−) = 35/40 and 0.875^40 = 0.0048, so 40 of 40 below 45 is within sampling at n = 40
    assert any(r.startswith("input length p50 sent 10 tokens against the selection's 29 (40 of 40 at or below it, "
                            "40 below; sampling allows at least 8 at or below and at most 31 below)")
               for r in a.reasons)
    assert any(r.startswith("input length p10 sent 10") for r in a.reasons)
    assert not any(r.startswith("input length p90") for r in a.reasons)
    assert any(r.startswith("category 'chat' was 0 of 40") for r in a.reasons)
    assert any(r.startswith("category 'code' was 40 of 40") for r in a.reasons)


def test_a_generated_source_may_repeat_as_its_space_allows_and_no_more() -> None:
    # 100 draws from a space of 900 prompts: E = 900·(1 − (1 − 1/900)^100) = 94.69 distinct, so about 5.3
    # collisions, Poisson(5.3); at α/m the audit allows up to poisson_upper(5.3) collisions
    m_tests = 1 + 2 * 3 + 1  # distinct, two per length quantile, one category (none)
    e = expected_distinct(900, 100)
    assert math.isclose(e, 900 * (1 - (1 - 1 / 900) ** 100)) and round(e) == 95
    allowed = poisson_upper(100 - e, AUDIT_ALPHA / m_tests)
    assert 10 <= allowed <= 20
    plan = PlannedWorkload("random_ids", 900.0, True, length_quantiles(np.array([8])), category_shares([None]))
    ok = [i % (100 - allowed) for i in range(100)]  # exactly `allowed` repeats
    a = audit_workload(_requests(ok, [8] * 100, [None] * 100), plan)
    assert a.reasons == () and a.distinct_planned == 95
    short = [i % (100 - allowed - 1) for i in range(100)]  # one repeat too many
    a = audit_workload(_requests(short, [8] * 100, [None] * 100), plan)
    assert len(a.reasons) == 1 and a.reasons[0].startswith(f"sent {99 - allowed} distinct prompts of 100")
    # an unbounded space (vocab^tokens past 1e300) plans every request distinct: one repeat is flagged
    huge = PlannedWorkload("random_ids", math.inf, True, length_quantiles(np.array([8])), category_shares([None]))
    assert audit_workload(_requests(list(range(99)) + [0], [8] * 100, [None] * 100), huge).reasons


def test_lengths_outside_the_order_statistic_interval_and_a_category_the_selection_lacks() -> None:
    # random ids of exactly 128 tokens: F(128−) = 0 and F(128) = 1 at every quantile, so any sent length ≠ 128 fails
    plan = PlannedWorkload("random_ids", math.inf, True, length_quantiles(np.array([128])), category_shares([None]))
    a = audit_workload(_requests(range(50), [128] * 49 + [127], [None] * 50), plan)
    assert len(a.reasons) == 3 and all(r.startswith("input length p") for r in a.reasons)  # 1 of 50 below 128
    # a category sent where the source has none: Binomial(n, 0) allows 0 of it, Binomial(n, 1) all 50 without one
    a = audit_workload(_requests(range(50), [128] * 50, [None] * 49 + ["code"]), plan)
    assert a.reasons == ("category 'code' was 1 of 50 requests sent (2.0%) against 0.0% of the selection "
                         "(sampling allows 0..0)",
                         "category 'no category' was 49 of 50 requests sent (98.0%) against 100.0% of the selection "
                         "(sampling allows 50..50)")
    # a distribution: a uniform 1..100 population, 400 draws from it pass; 400 draws from 1..50 fail at every
    # quantile (p10: 75 of 400 below 10 where Binomial(400, 0.09) allows at most 60)
    pop = PlannedWorkload("random_ids", math.inf, True, length_quantiles(np.arange(1, 101)), category_shares([None]))
    rng = np.random.default_rng(3)
    fair = rng.integers(1, 101, size=400).tolist()
    assert audit_workload(_requests(range(400), fair, [None] * 400), pop).reasons == ()
    half = rng.integers(1, 51, size=400).tolist()
    reasons = audit_workload(_requests(range(400), half, [None] * 400), pop).reasons
    assert [r.split(" sent")[0] for r in reasons] == ["input length p10", "input length p50", "input length p90"]


def test_only_first_turns_are_audited_and_unsent_requests_not_at_all() -> None:
    # 10 sessions of 2 turns from 10 distinct rows: later turns carry history, so their lengths are not the source's
    plan = PlannedWorkload("sharegpt", 10.0, False, length_quantiles(np.array([5] * 10)), category_shares([None]))
    fps = [s * 2 + k for s in range(10) for k in range(2)]
    lengths = [5 if k == 0 else 50 for s in range(10) for k in range(2)]
    turns = [k + 1 for s in range(10) for k in range(2)]
    a = audit_workload(_requests(fps, lengths, [None] * 20, turns), plan)
    assert a.reasons == () and a.n_audited == 10
    # a request never sent (a session's later turn after its first failed) has no fingerprint
    a = audit_workload(_requests(fps[:19] + [None], lengths, [None] * 20, turns), plan)
    assert a.reasons == () and a.n_audited == 10


def test_binomial_interval_matches_the_exact_tails() -> None:
    # Binomial(10, 0.5): P(X ≤ 1) = 11/1024 = 0.0107, P(X ≤ 0) = 1/1024; at alpha = 0.02 each tail may hold 0.01
    assert binomial_interval(10, 0.5, 0.02) == (1, 9)
    assert binomial_interval(10, 0.5, 0.03) == (2, 8)  # P(X ≤ 1) = 0.0107 ≤ 0.015
    assert binomial_interval(10, 0.0, 0.01) == (0, 0) and binomial_interval(10, 1.0, 0.01) == (10, 10)


def test_a_file_holding_one_prompt_on_several_rows_plans_what_a_permutation_prefix_can_send() -> None:
    # fuzz finding: rows A A A A B C (K = 3 distinct on R = 6 rows) and 2 requests; a seeded permutation may pick
    # two of the four A rows, so 1 distinct is a correct run. Before, planned was min(K, n) = 2 and it was flagged.
    # Now: the fewest groups holding 2 rows (largest first: A's 4) is 1, and the expectation
    # Σ_g 1 − C(R − g, n)/C(R, n) = (1 − C(2,2)/15) + 2·(1 − C(5,2)/15) = 14/15 + 2·5/15 = 1.6 → 2 planned
    plan = PlannedWorkload("jsonl", 3.0, False, None, category_shares([None]), ((1, 2), (4, 1)))
    a = audit_workload(_requests([1, 1], [0, 0], [None, None]), plan)
    assert a.reasons == () and (a.distinct_sent, a.distinct_planned) == (1, 2)
    # from 5 requests on, at least two groups are sent (4 rows of A cannot hold 5): one distinct is flagged
    a = audit_workload(_requests([1] * 5, [0] * 5, [None] * 5), plan)
    assert a.reasons and a.reasons[0].startswith("sent 1 distinct prompts of 5")
    # a whole pass (n ≥ R) sends every distinct prompt
    assert audit_workload(_requests([1, 1, 1, 1, 2, 2], [0] * 6, [None] * 6), plan).reasons
