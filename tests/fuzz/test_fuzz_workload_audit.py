"""Fuzz the workload audit (the sent workload against its selection): a file source sampled as the prompt builders
sample it (seeded permutations, cycled) is never flagged for its distinct prompts, any collapse below min(K, n) is,
the audit never raises on any requests table, and its binomial interval holds the exact tails it promises."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Optional, Sequence

import numpy as np
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from cluster.analysis.workload_audit import AUDIT_ALPHA, audit_workload, binomial_interval, planned_distinct
from cluster.kernel.planned_workload import category_shares, length_quantiles
from cluster.kernel.planned_workload import PlannedWorkload
from cluster.kernel.records import REQUEST_BATCH_SCHEMA
from cluster.engines.base import Prompt
from cluster.loadgen.selection import prompt_fingerprint
from tests.fuzz.fuzzing import FUZZ

CATEGORY = st.sampled_from([None, "code", "chat", "math"])


def _table(fps: Sequence[Optional[int]], lengths: Sequence[int], cats: Sequence[Optional[str]],
           turns: Optional[Sequence[Optional[int]]] = None) -> pa.Table:
    n = len(fps)
    cols: dict[str, list[Any]] = {f.name: [None] * n for f in REQUEST_BATCH_SCHEMA}
    cols.update(request_index=list(range(n)), intended_send_ns=[0] * n, actual_send_ns=[0] * n, num_chunks=[1] * n,
                client_tokens=[1] * n, prompt_tokens_sent=list(lengths), max_tokens=[4] * n, category=list(cats),
                prompt_fingerprint=list(fps), turn=list(turns or [None] * n))
    return pa.Table.from_pydict(cols, schema=REQUEST_BATCH_SCHEMA)


@st.composite
def file_runs(draw: st.DrawFn) -> tuple[PlannedWorkload, list[int], list[int], list[Optional[str]]]:
    """A file selection of K rows (some rows identical) and the n rows a builder sends: seeded permutations."""
    k = draw(st.integers(1, 30))
    lengths = draw(st.lists(st.integers(1, 400), min_size=k, max_size=k))
    cats = draw(st.lists(CATEGORY, min_size=k, max_size=k))
    content = draw(st.lists(st.integers(0, 3 * k), min_size=k, max_size=k))  # equal values: duplicate rows
    n = draw(st.integers(1, 90))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    picked: list[int] = []
    while len(picked) < n:
        picked.extend(int(i) for i in rng.permutation(k)[: n - len(picked)])
    per = Counter(content)
    repeats = tuple(sorted(Counter(per.values()).items())) if len(per) < k else ()
    plan = PlannedWorkload("jsonl", float(len(per)), False, length_quantiles(np.asarray(lengths)),
                           category_shares(cats), repeats)
    return plan, [content[i] for i in picked], [lengths[i] for i in picked], [cats[i] for i in picked]


@FUZZ
@given(file_runs())
def test_a_file_source_sampled_as_the_builders_sample_it_is_never_short_of_distinct_prompts(
        run: tuple[PlannedWorkload, list[int], list[int], list[Optional[str]]]) -> None:
    plan, fps, lengths, cats = run
    a = audit_workload(_table(list(fps), lengths, cats), plan)
    assert not any(r.startswith("sent ") for r in a.reasons), a.reasons
    if not plan.draw_multiplicities:  # every row its own prompt: exactly min(K, n)
        assert a.distinct_planned == a.distinct_sent == min(int(plan.offered_distinct), len(fps))


@FUZZ
@given(file_runs(), st.data())
def test_any_collapse_below_the_planned_distinct_prompts_is_flagged(
        run: tuple[PlannedWorkload, list[int], list[int], list[Optional[str]]], data: st.DataObject) -> None:
    plan, fps, lengths, cats = run
    _, want = planned_distinct(plan, len(fps), AUDIT_ALPHA)  # the fewest a correct run can send
    if want < 2:
        return
    keep = data.draw(st.integers(1, want - 1))  # only `keep` distinct prompts survive
    survivors = sorted(set(fps))[:keep]
    collapsed = [f if f in survivors else survivors[0] for f in fps]
    a = audit_workload(_table(collapsed, lengths, cats), plan)
    assert a.distinct_sent == keep
    assert a.reasons and a.reasons[0].startswith(f"sent {keep} distinct prompts of {len(fps)}"), a.reasons


NULLABLE_INT = st.none() | st.integers(-2**63, 2**63 - 1)


@FUZZ
@given(st.lists(st.tuples(NULLABLE_INT, st.integers(0, 2**31 - 1), CATEGORY, st.none() | st.integers(1, 64)),
                max_size=40),
       st.floats(0, math.inf, allow_nan=False), st.booleans(),
       st.none() | st.lists(st.integers(0, 10**6), min_size=1, max_size=20),
       st.lists(CATEGORY, min_size=1, max_size=6))
def test_the_audit_never_raises_and_says_why_it_flags(rows: list[tuple[Optional[int], int, Optional[str],
                                                                       Optional[int]]],
                                                      offered: float, with_replacement: bool,
                                                      lengths: Optional[list[int]],
                                                      cats: list[Optional[str]]) -> None:
    plan = PlannedWorkload("random_ids" if with_replacement else "jsonl", offered, with_replacement,
                           length_quantiles(np.asarray(lengths)) if lengths else None, category_shares(cats))
    table = _table([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows])
    a = audit_workload(table, plan)
    assert a.n_audited == sum(1 for r in rows if r[0] is not None and r[3] in (None, 1))
    assert 0 <= a.distinct_sent <= a.n_audited and 0 <= a.distinct_planned <= a.n_audited
    assert all(isinstance(r, str) and r for r in a.reasons)


def _exact_cdf(n: int, p: float, k: int) -> float:
    return sum(math.comb(n, j) * p ** j * (1 - p) ** (n - j) for j in range(k + 1)) if k >= 0 else 0.0


@FUZZ
@given(st.integers(1, 120), st.floats(0.001, 0.999), st.sampled_from([1e-2, 1e-3, 1e-4, 1e-5]))
def test_the_binomial_interval_holds_its_exact_tails_and_is_the_narrowest_that_does(n: int, p: float,
                                                                                 alpha: float) -> None:
    lo, hi = binomial_interval(n, p, alpha)
    assert 0 <= lo <= hi <= n
    assert _exact_cdf(n, p, lo - 1) <= alpha / 2 + 1e-12 < _exact_cdf(n, p, lo) + 1e-12
    assert 1 - _exact_cdf(n, p, hi) <= alpha / 2 + 1e-12
    assert hi == 0 or 1 - _exact_cdf(n, p, hi - 1) > alpha / 2 - 1e-12


@FUZZ
@given(st.lists(st.integers(0, 2**40), min_size=1, max_size=64), st.lists(st.integers(0, 2**40), min_size=1,
                                                                        max_size=64))
def test_the_fingerprint_is_of_the_ids_alone_and_tells_ids_from_text(a: list[int], b: list[int]) -> None:
    pa_, pb = Prompt(input_ids=tuple(a), text="ignored"), Prompt(input_ids=tuple(b))
    assert (prompt_fingerprint(pa_) == prompt_fingerprint(pb)) == (a == b)
    text = " ".join(map(str, a))
    assert prompt_fingerprint(Prompt(text=text)) != prompt_fingerprint(Prompt(input_ids=tuple(a)))
    assert prompt_fingerprint(Prompt(text=text)) == prompt_fingerprint(Prompt(text=text, category="x"))

