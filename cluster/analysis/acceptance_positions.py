"""Speculative acceptance per draft position, from the per-request spec_correct_drafts_histogram, with Wilson intervals.

Source: SGLang 0.5.23 keeps one histogram per request, index k = its verify steps that accepted exactly k drafts
(the bonus token not counted), grown to the most drafts accepted + 1 (srt/managers/schedule_batch.py:1566,
`update_spec_correct_drafts_histogram`, called once per verify step at
srt/managers/scheduler_components/batch_result_processor.py:836) and sends it only on the request's final event:
meta_info["spec_correct_drafts_histogram"] when non-empty (srt/managers/tokenizer_manager.py:3193-3201), and on the
OpenAI endpoints as sglext.spec_tokens_details.spec_correct_drafts_histogram (srt/entrypoints/openai/protocol.py:466,
utils.py:338). Its Prometheus metrics carry no per-position figure (srt/observability/metrics_collector.py:511-546:
gauges of the mean acceptance length and rate only). The simulator sends the same form from its own draws.

Declared once, over the ok requests of ok runs that carry a histogram, summed per group (workload, variant, and
prompt category or all categories together), H[j] = verify steps that accepted exactly j drafts, D = the deepest
position (the variant's speculative_num_steps, or the longest histogram's last index when that is longer):

- steps_reaching_k = Σ_{j >= k-1} H[j] (verify steps that accepted drafts 1..k-1, so proposed draft k was judged);
  steps_accepting_k = Σ_{j >= k} H[j].
- draft_accept_rate_k = steps_accepting_k / steps_reaching_k: P(draft k accepted | drafts 1..k-1 accepted).
- draft_accept_cum_k = steps_accepting_k / Σ_j H[j]: P(drafts 1..k all accepted). 1 + Σ_k draft_accept_cum_k is the
  mean accepted tokens per verify step, bonus included (counting drafts past max_tokens, as SGLang does). vLLM's
  counter-based accept_rate_pos_<i> (engines/vllm.py, 0-based i) is this cumulative at k = i + 1, not the rate.

Intervals: Wilson score 95 % (analysis/accuracy.py's `wilson`, the one definition) with the verify steps as trials,
at the Kish effective sample size: steps are not independent trials. Steps of one prompt are alike (its repeats and
load points send the same prompt, and greedy decoding drafts the same tokens: the simulator's draws are even seeded
by the prompt), so the steps are clustered by prompt (`prompt_fingerprint`; each request its own cluster where it is
absent) and the design effect deff = (the rate's variance over clusters, the ratio estimator's
Σ_c (y_c - R·x_c)² / (Σ x)² · C/(C-1)) / (the binomial R(1-R)/Σ x), at least 1, divides the trials: the interval is
Wilson's for n = floor(Σ x / deff) trials, from floor(R·n) successes' lower bound to ceil(R·n)'s upper one. Where
steps behave as independent, deff is about 1 and this is the plain Wilson interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from cluster.analysis.accuracy import Share, wilson
from cluster.analysis.correctness import only_acceptance_floor
from cluster.analysis.request_metrics import request_columns

ALL_CATEGORIES = "(all)"
"""The category label of a group pooling every category."""

POSITION_METRICS = {
    "draft_accept_rate_k": ("fraction", "P(draft k accepted | drafts 1..k-1 accepted) = Σ steps accepting >= k "
                            "drafts / Σ steps accepting >= k-1, from the per-request spec_correct_drafts_histogram"),
    "draft_accept_cum_k": ("fraction", "P(drafts 1..k all accepted) = Σ steps accepting >= k drafts / Σ verify steps"),
}
"""name -> (unit, formula) of the two per-position figures."""

INTERVAL_METHOD = ("Wilson score 95 % intervals over verify steps at the effective sample size of steps clustered by "
                   "prompt (Kish's design effect: repeats of one prompt are not new evidence)")

@dataclass(frozen=True)
class PositionAcceptance:
    """Draft position k of one group: the conditional rate and the cumulative one."""

    position: int
    steps_reaching: int
    steps_accepting: int
    conditional: Share
    """draft_accept_rate_k: P(draft k accepted | drafts 1..k-1 accepted), its Wilson interval (accuracy.wilson)."""
    cumulative: Share
    """draft_accept_cum_k: P(drafts 1..k all accepted)."""
    design_effect: float = 1.0
    """How much wider than binomial the conditional rate varies over prompts (1: steps behave as independent)."""
    design_effect_cum: float = 1.0


def _clustered(successes: np.ndarray, trials: np.ndarray) -> tuple[Share, float]:
    """successes/trials summed over clusters, with Wilson's interval at the Kish effective sample size: the ratio's
    variance over clusters, Σ(y_c - R·x_c)² / (Σx)² · C/(C-1), over the binomial R(1-R)/Σx is the design effect
    (at least 1); the interval is Wilson's for n = floor(Σx / deff) trials, from floor(R·n) successes' lower bound to
    ceil(R·n)'s upper one (so R itself is inside)."""
    y, x = int(successes.sum()), int(trials.sum())
    if x == 0:
        return wilson(0, 0), 1.0
    r, c = y / x, len(trials)
    binomial = r * (1 - r) / x
    spread = float(((successes - r * trials) ** 2).sum()) / (x * x) * c / (c - 1) if c > 1 else 0.0
    deff = max(1.0, spread / binomial) if binomial > 0 else 1.0
    if deff == 1.0:
        return wilson(y, x), 1.0
    n = max(1, int(x / deff))
    below, above = wilson(math.floor(r * n), n), wilson(math.ceil(r * n), n)  # R·n is rarely whole: both sides
    assert below.low is not None and above.high is not None
    return Share(y, x, min(below.low, r), max(above.high, r)), deff


def positions(histograms: Sequence[Sequence[int]], depth: Optional[int] = None,
              clusters: Optional[Sequence[object]] = None) -> list[PositionAcceptance]:
    """draft_accept_rate_k and draft_accept_cum_k for k = 1..D over summed histograms (D: `depth`, or the longest
    histogram's last index when that is longer); [] when no histogram holds a verify step. `clusters` labels each
    histogram with what makes its steps alike (its prompt): one label per histogram, default every one its own."""
    width = max([len(h) for h in histograms] + [(depth or 0) + 1])
    labels = list(range(len(histograms))) if clusters is None else list(clusters)
    index = {c: i for i, c in enumerate(dict.fromkeys(labels))}
    per = np.zeros((len(index), width), dtype=np.int64)  # per[c, j]: cluster c's verify steps that accepted j
    for h, c in zip(histograms, labels):
        per[index[c], :len(h)] += np.asarray(h, dtype=np.int64)
    at_least = np.cumsum(per[:, ::-1], axis=1)[:, ::-1]  # at_least[c, j] = Σ_{i >= j} per[c, i]
    if int(at_least[:, 0].sum()) == 0:
        return []
    out = []
    for k in range(1, width):
        conditional, deff = _clustered(at_least[:, k], at_least[:, k - 1])
        cumulative, deff_cum = _clustered(at_least[:, k], at_least[:, 0])
        out.append(PositionAcceptance(k, conditional.counted, conditional.correct, conditional, cumulative,
                                      deff, deff_cum))
    return out


@dataclass(frozen=True)
class GroupAcceptance:
    """One (workload, variant, category) group: its per-position rates and how many requests they come from."""

    workload: str
    variant: str
    category: str
    depth: Optional[int]
    requests: int
    """ok requests of ok runs that carry a histogram (the ones summed)."""
    spec_requests: int
    """ok requests of ok runs with spec_verify_ct > 0: more than `requests` means some answers lacked a histogram."""
    mismatched: int
    """Requests whose histogram's step count differs from their spec_verify_ct (a server inconsistency)."""
    positions: tuple[PositionAcceptance, ...]
    prompts: int = 0
    """Distinct prompts (clusters) among `requests`: with one, its repeats cannot be told from new evidence."""


_COLUMNS = ("run_key", "workload", "variant", "spec_verify_ct", "spec_correct_drafts_histogram")
READ_COLUMNS = _COLUMNS + ("category", "prompt_fingerprint", "request_index", "error", "first_chunk_ns",
                           "last_chunk_ns")
"""The `requests` columns acceptance_by_position reads (ok requests: no error, a first and a last chunk)."""


def acceptance_by_position(requests: pa.Table, runs: pd.DataFrame,
                           with_floor_invalid: bool = False) -> list[GroupAcceptance]:
    """Per workload and variant (and per prompt category where requests carry one), the per-position acceptance of
    the ok requests of ok runs, pooled over load points and repeats. `requests` holds READ_COLUMNS (`category`
    optional); `runs` the runs table's run_key, status and spec_num_steps (and invalid_reasons for
    `with_floor_invalid`: runs invalid by the gate's acceptance floor alone count too, for acceptance health).
    A group without a single histogram is left out (the server gives none)."""
    if requests.num_rows == 0 or "spec_correct_drafts_histogram" not in requests.schema.names:
        return []
    keep = runs["status"] == "ok"
    if with_floor_invalid:
        keep |= (runs["status"] == "invalid") & runs["invalid_reasons"].map(only_acceptance_floor).astype(bool)
    ok_runs = runs.loc[keep]
    depth_of = {str(k): (None if pd.isna(d) else int(d)) for k, d in zip(ok_runs["run_key"], ok_runs["spec_num_steps"])}
    ok = request_columns(requests).ok
    df = pd.DataFrame({c: requests.column(c).to_pylist() for c in _COLUMNS})
    for optional in ("category", "prompt_fingerprint", "request_index"):
        df[optional] = requests.column(optional).to_pylist() if optional in requests.schema.names else None
    # a request's steps are alike its repeats' (the same prompt, greedy: the same drafts): one cluster per prompt
    # sent, each request its own where the fingerprint is absent
    df["cluster"] = [f"p{f}" if f is not None else f"r{k}/{i}" for f, k, i in
                     zip(df["prompt_fingerprint"], df["run_key"], df["request_index"])]
    df = df[ok & df["run_key"].isin(list(depth_of)).to_numpy()]
    df = df[df["spec_verify_ct"].fillna(0) > 0]
    out: list[GroupAcceptance] = []
    for (workload, variant), g in df.groupby(["workload", "variant"], sort=False):
        depths = [d for d in (depth_of[k] for k in g["run_key"].unique()) if d is not None]
        depth = max(depths) if depths else None
        cats = [c for c in dict.fromkeys(g["category"]) if isinstance(c, str)]
        groups = [(ALL_CATEGORIES, g)] + ([(c, g[g["category"] == c]) for c in cats] if cats else [])
        for label, part in groups:
            sent = part[part["spec_correct_drafts_histogram"].notna()]
            pos = positions(list(sent["spec_correct_drafts_histogram"]), depth, list(sent["cluster"]))
            if not pos:
                continue
            has = part["spec_correct_drafts_histogram"].notna()
            steps = part.loc[has, "spec_correct_drafts_histogram"].map(sum)
            mismatched = int((steps != part.loc[has, "spec_verify_ct"]).sum())
            out.append(GroupAcceptance(str(workload), str(variant), label, depth, int(has.sum()), len(part),
                                       mismatched, tuple(pos), int(sent["cluster"].nunique())))
    return out


def _note(g: GroupAcceptance) -> str:
    return "; ".join(n for n in (
        f"{g.spec_requests - g.requests} of {g.spec_requests} speculative requests sent no histogram"
        if g.spec_requests > g.requests else "",
        f"{g.mismatched} histograms disagree with spec_verify_ct" if g.mismatched else "",
        f"one distinct prompt in {g.requests} requests: the interval treats its repeats' steps as independent"
        if g.prompts == 1 and g.requests > 1 else "",
        f"histograms reach past the configured depth {g.depth}"
        if g.depth is not None and len(g.positions) > g.depth else "") if n)


def position_table(groups: Sequence[GroupAcceptance]) -> pd.DataFrame:
    """One row per group and position, numbers only (NaN where a position had no trials): for csv and json."""
    rows = []
    for g in groups:
        note = _note(g)
        for p in g.positions:
            c, m = p.conditional, p.cumulative
            rows.append({"workload": g.workload, "variant": g.variant, "category": g.category, "depth": g.depth,
                         "position": p.position, "accept_rate": c.rate, "accept_rate_lo": c.low,
                         "accept_rate_hi": c.high, "accept_cum": m.rate, "accept_cum_lo": m.low,
                         "accept_cum_hi": m.high, "steps_reaching": p.steps_reaching,
                         "steps_accepting": p.steps_accepting, "design_effect": p.design_effect,
                         "requests": g.requests, "prompts": g.prompts, "note": note})
    return pd.DataFrame(rows)


def _cell(point: object, lo: object, hi: object) -> str:
    if not isinstance(point, float) or point != point:
        return "-"
    return f"{point:.3f} [{lo:.3f}, {hi:.3f}]"


def position_view(groups: Sequence[GroupAcceptance]) -> pd.DataFrame:
    """position_table for people: the rate and the cumulative as 'estimate [lo, hi]', with the step counts and a
    note where some requests lacked a histogram or disagreed with their spec_verify_ct."""
    t = position_table(groups)
    if t.empty:
        return t
    return pd.DataFrame({
        "workload": t["workload"], "variant": t["variant"], "category": t["category"], "position": t["position"],
        "P(accept k | k-1)": [_cell(*x) for x in zip(t["accept_rate"], t["accept_rate_lo"], t["accept_rate_hi"])],
        "P(accept 1..k)": [_cell(*x) for x in zip(t["accept_cum"], t["accept_cum_lo"], t["accept_cum_hi"])],
        "steps reaching k": t["steps_reaching"], "steps accepting k": t["steps_accepting"],
        "deff": [f"{d:.1f}" for d in t["design_effect"]], "requests": t["requests"], "prompts": t["prompts"],
        "note": t["note"]})


__all__ = ["ALL_CATEGORIES", "INTERVAL_METHOD", "POSITION_METRICS", "READ_COLUMNS", "GroupAcceptance",
           "PositionAcceptance", "acceptance_by_position", "position_table", "position_view", "positions"]
