"""The workload audit: did a run send the workload its prompt source planned? Distinct prompts, lengths, categories.

"Sent" is what the load generator put on the wire, per request: `requests.prompt_fingerprint` (blake2b-64 of the
token ids sent, or of the text when sent as text; cluster/loadgen/selection.py computes it from the very prompt
the request was built from), `prompt_tokens_sent` and `category`. "Planned" is a `PlannedWorkload`: what the
workload's source offered (its rows, or its generator's space), built from the source itself and never from the
built prompt list, so a bug that collapses the prompts between reading and sending cannot make both sides agree.

Only first turns are audited (a request outside sessions is one): a later session turn carries its conversation
so far and the server's answer, so its length and identity are not the source's. Over those n requests:

- distinct: a file source hands out seeded permutations of its rows, cycled, so a file of K distinct rows sends
  exactly min(K, n) distinct prompts and anything fewer is flagged (a file holding one prompt on several rows:
  no fewer than the fewest groups of identical rows that hold n rows). A generated source (random ids, trace
  rows, corpus windows) draws from a space of M prompts with replacement: E = M·(1 − (1 − 1/M)^n) distinct are
  expected (weighted by how often each is drawn when a corpus repeats itself) and the collisions n − D are about
  Poisson(n − E); fewer distinct than n minus the Poisson upper quantile is flagged (for the usual M ≈ 10^300,
  any repeat at all).
- lengths: for p in 0.1, 0.5, 0.9 and q the selection's p-quantile (its CDF F(q−) below and F(q) at or below
  it), the count of sent lengths ≤ q must not fall under the lower quantile of Binomial(n, F(q)), and the count
  < q must not pass the upper quantile of Binomial(n, F(q−)). That is the distribution-free order-statistic
  interval for the p-quantile (q must lie between the order statistics X_(r) and X_(s) of the sent lengths),
  written with counts so the ties of integer lengths are handled. Skipped when the client does not know the
  lengths (text sent without a tokenizer: the server tokenizes).
- categories: each category's sent count must lie in the two-sided interval of Binomial(n, its selection share);
  a category the selection does not hold (share 0) must not be sent at all.

Every interval is at level α/m, m the number of tests of the run, with α = AUDIT_ALPHA for the whole audit
(Bonferroni): a correct run is flagged at most once in 1/α. A permutation prefix (sampling without replacement)
varies less than the binomial, so the rules are conservative there.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cluster.kernel.planned_workload import CategoryShare, PlannedWorkload

AUDIT_ALPHA = 0.001
"""Family-wise false-alarm rate of one run's audit (split evenly over its tests)."""
NO_CATEGORY = "-"
"""How a request without a category is named in the shares (cluster/analysis/categories.py's label)."""


@dataclass(frozen=True)
class WorkloadAudit:
    """The figures sent against planned, and what differed (empty reasons: the run sent its workload)."""

    n_audited: int
    distinct_sent: int
    distinct_planned: int
    lengths_sent: Optional[tuple[float, ...]]
    lengths_selection: Optional[tuple[float, ...]]
    shares_sent: dict[str, float]
    shares_selection: dict[str, float]
    reasons: tuple[str, ...]

    def share_json(self, sent: bool) -> str:
        return json.dumps(self.shares_sent if sent else self.shares_selection, sort_keys=True)


def expected_distinct(m: float, n: int, multiplicities: tuple[tuple[int, int], ...] = ()) -> float:
    """E[distinct] of n independent uniform draws from m values: m·(1 − (1 − 1/m)^n), n when m is unbounded; with
    `multiplicities` (c, k), k values each drawn with probability c/Σc·k: Σ k·(1 − (1 − c/Σc·k)^n)."""
    if n <= 0:
        return 0.0
    if multiplicities:
        total = sum(c * k for c, k in multiplicities)
        return sum(k * -math.expm1(n * math.log1p(-c / total)) if c < total else float(k)
                   for c, k in multiplicities)
    if not math.isfinite(m) or m > 1e15:
        return float(n)
    if m <= 1:
        return 1.0
    return m * -math.expm1(n * math.log1p(-1.0 / m))


def binomial_interval(n: int, p: float, alpha: float) -> tuple[int, int]:
    """The central 1 − alpha interval [lo, hi] of Binomial(n, p): P(X < lo) ≤ alpha/2 and P(X > hi) ≤ alpha/2."""
    if n <= 0:
        return 0, 0
    if p <= 0.0:
        return 0, 0
    if p >= 1.0:
        return n, n
    sd = math.sqrt(n * p * (1 - p))
    a = max(0, int(n * p - 12 * sd - 10))
    b = min(n, int(n * p + 12 * sd + 10))
    k = np.arange(a, b, dtype=np.float64)
    # log pmf(a), then pmf(k + 1) / pmf(k) = (n − k) / (k + 1) · p / (1 − p) summed along the window
    first = (math.lgamma(n + 1) - math.lgamma(a + 1) - math.lgamma(n - a + 1)
             + a * math.log(p) + (n - a) * math.log1p(-p))
    logp = first + np.concatenate([[0.0], np.cumsum(np.log((n - k) / (k + 1)) + math.log(p) - math.log1p(-p))])
    pmf = np.exp(logp - logp.max())
    pmf /= pmf.sum()  # the window holds all but ~1e-30 of the mass
    cdf = np.cumsum(pmf)
    lo = a + int(np.searchsorted(cdf, alpha / 2, "right"))  # first k with P(X ≤ k) > alpha/2
    sf = 1.0 - cdf  # P(X > k)
    hi = a + int(np.argmax(sf <= alpha / 2))
    return lo, hi


def poisson_upper(lam: float, alpha: float) -> int:
    """The smallest c with P(Poisson(lam) > c) ≤ alpha."""
    if lam <= 1e-12:
        return 0
    top = int(lam + 12 * math.sqrt(lam) + 20)
    k = np.arange(0, top, dtype=np.float64)
    logp = -lam + np.concatenate([[0.0], np.cumsum(math.log(lam) - np.log(k + 1))])
    cdf = np.cumsum(np.exp(logp))
    return int(np.argmax(1.0 - cdf <= alpha))


def planned_distinct(plan: PlannedWorkload, n: int, alpha: float) -> tuple[int, int]:
    """(distinct prompts planned for n sent, the fewest that still pass at level alpha)."""
    if not plan.with_replacement:
        return _permutation_distinct(plan, n)
    e = expected_distinct(plan.offered_distinct, n, plan.draw_multiplicities)
    return min(n, round(e)), max(1 if n else 0, n - poisson_upper(n - e, alpha))


def _permutation_distinct(plan: PlannedWorkload, n: int) -> tuple[int, int]:
    """A file source's R rows (K distinct prompts, `draw_multiplicities` when some rows repeat) sent as seeded
    permutations, cycled: n ≥ R sends all K; a prefix of n < R sends at least as many as the fewest groups of
    identical rows that can hold n rows (the largest first) and, in expectation, Σ_g 1 − C(R − g, n) / C(R, n)."""
    k = int(plan.offered_distinct)
    groups = sorted((c for c, count in plan.draw_multiplicities for _ in range(count)), reverse=True)
    rows = sum(groups) if groups else k
    if not groups or n >= rows:
        return min(k, n), min(k, n)
    fewest, held = 0, 0
    while held < n:
        held += groups[fewest]
        fewest += 1
    log_all = math.lgamma(rows + 1) - math.lgamma(n + 1) - math.lgamma(rows - n + 1)
    expected = sum(1.0 - (math.exp(math.lgamma(rows - g + 1) - math.lgamma(n + 1) - math.lgamma(rows - g - n + 1)
                                   - log_all) if rows - g >= n else 0.0) for g in groups)
    return round(expected), fewest


def _share_map(shares: tuple[CategoryShare, ...]) -> dict[str, float]:
    return {(s.category if s.category is not None else NO_CATEGORY): round(s.share, 6) for s in shares}


def audit_workload(requests: pa.Table, plan: PlannedWorkload, alpha: float = AUDIT_ALPHA) -> WorkloadAudit:
    """The run's sent workload (its `requests` rows) against `plan`; reasons say what differed."""
    first = _first_turns(requests)
    n = first.num_rows
    n_distinct = pc.count_distinct(first.column("prompt_fingerprint")).as_py() if n else 0
    lengths = plan.lengths
    sent_counts: dict[Optional[str], int] = {}
    for vc in pc.value_counts(first.column("category")).to_pylist() if n else []:
        sent_counts[vc["values"]] = int(vc["counts"])
    planned_share = {s.category: s.share for s in plan.categories}
    tested = sorted(set(sent_counts) | set(planned_share), key=lambda c: (c is None, c or ""))
    m = 1 + (2 * len(lengths) if lengths else 0) + len(tested)  # distinct, two per length quantile, categories
    a = alpha / m
    want, floor = planned_distinct(plan, n, a)
    reasons: list[str] = []
    if n_distinct < floor:
        offers = f"{_count(plan.offered_distinct)}{' to draw from' if plan.with_replacement else ' distinct prompts'}"
        reasons.append(f"sent {n_distinct} distinct prompts of {n} (first turns), fewer than the {want} planned from "
                       f"the {plan.source} selection and the request count (sampling allows no fewer than {floor}; "
                       f"it offers {offers})")
    sent_len: Optional[tuple[float, ...]] = None
    sel_len: Optional[tuple[float, ...]] = None
    if lengths and n:
        x = first.column("prompt_tokens_sent").to_numpy(zero_copy_only=False).astype(np.int64)
        sel_len = tuple(float(q.tokens) for q in lengths)
        sent_len = tuple(float(v) for v in np.quantile(x, [q.p for q in lengths], method="inverted_cdf"))
        for q in lengths:
            at_or_below, below = int((x <= q.tokens).sum()), int((x < q.tokens).sum())
            lo, _ = binomial_interval(n, q.cdf_at, a)
            _, hi = binomial_interval(n, q.cdf_below, a)
            if at_or_below < lo or below > hi:
                got = sent_len[lengths.index(q)]
                reasons.append(f"input length p{round(q.p * 100)} sent {got:g} tokens against the selection's "
                               f"{q.tokens} ({at_or_below} of {n} at or below it, {below} below; sampling allows "
                               f"at least {lo} at or below and at most {hi} below)")
    for c in tested:
        k, share = sent_counts.get(c, 0), planned_share.get(c, 0.0)
        lo, hi = binomial_interval(n, share, a)
        if n and not lo <= k <= hi:
            name = c if c is not None else "no category"
            reasons.append(f"category {name!r} was {k} of {n} requests sent ({k / n:.1%}) against "
                           f"{share:.1%} of the selection (sampling allows {lo}..{hi})")
    shares_sent = {(c if c is not None else NO_CATEGORY): round(k / n, 6) for c, k in sent_counts.items()} if n else {}
    return WorkloadAudit(n, n_distinct, want, sent_len, sel_len, shares_sent, _share_map(plan.categories),
                         tuple(reasons))


def _first_turns(requests: pa.Table) -> pa.Table:
    """The audited rows: sent (a fingerprint) and a first turn (turn 1, or outside sessions); a table from before
    the fingerprint column has none."""
    if "prompt_fingerprint" not in requests.column_names:
        return requests.slice(0, 0).append_column("prompt_fingerprint", pa.array([], pa.int64()))
    sent = pc.is_valid(requests.column("prompt_fingerprint"))
    if "turn" in requests.column_names:
        turn = requests.column("turn")
        sent = pc.and_(sent, pc.or_(pc.is_null(turn), pc.equal(turn, 1)).fill_null(True))
    return requests.filter(sent)


def _count(x: float) -> str:
    return "unboundedly many" if not math.isfinite(x) or x > 1e15 else f"{x:.0f}"
