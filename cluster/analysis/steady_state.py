"""The steady-state stretch of a measured window, defined once: its bounds and the throughput, TPOT and acceptance in it.

A window holds a ramp (the load filling the server) and a drain (the last requests finishing with nothing sent after
them); whole-window throughput divides by both. The steady stretch is the longest interval of the window in which the
offered load holds, read from the `requests` table alone (send, first and last chunk times: ns on the window's clock,
zero at its first intended send):

- closed loop (load_kind "concurrency", or another closed load shape): the in-flight count N(t), ok requests with
  actual_send_ns <= t < last_chunk_ns, stays at or above ceil(CLOSED_LOOP_SHARE x offered concurrency). A dip below
  it no longer than MAX_DIP_NS (a worker's turnaround between its last chunk and its next send) does not end the
  stretch.
- open loop (load_kind "rate", or another open load shape; r req/s): each instant t of the stretch is the centre of
  a window [t - W/2, t + W/2], W = RATE_WINDOW_ARRIVALS / r seconds, inside the measured window, that holds at least
  ceil(OPEN_LOOP_SHARE x RATE_WINDOW_ARRIVALS) sends (the arrivals keep the offered rate) AND as many ok completions
  (the server keeps up with them): the ramp (few completions yet), the drain (no more sends) and an over-saturated
  server (completions fall behind) are outside it. A count falls to half its expected value where a step of the
  rate sits at the window's centre, so the bounds land on the ramp's and the drain's edges.

Inside the stretch [start_ns, end_ns]:
- output_tps: output tokens produced in it / its length. A request's first token counts at its first chunk, its
  other output_tokens - 1 spread evenly over (first_chunk_ns, last_chunk_ns] (TPOT's own assumption), so a request
  straddling a bound counts its share.
- tpot_ms: mean TPOT (metrics.py's definition) of the ok requests decoded inside it: at least half of the request's
  decode (first to last chunk) lies in the stretch (a one-token request: its chunk does), more than one output
  token. Half, not all: a closed-loop stretch ends at a completion, and the requests of the same decode step finish
  microseconds after it. `requests` counts the ok requests decoded inside it.
- accept_length: request_metrics.acceptance over those requests.
A run whose stretch is shorter than MIN_STEADY_SHARE of its window or holds fewer than MIN_STEADY_REQUESTS requests is
too short to count (`shortfall`): compare flags it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from cluster.analysis.request_metrics import TPOT, int_column, request_columns
from cluster.kernel.load_shapes import load_shape
from cluster.kernel.records import Records
from cluster.kernel.window_figures import acceptance

CLOSED_LOOP_SHARE = 0.8
"""In-flight requests must stay at or above this share of the offered concurrency (SGLang 0.5.23's
steady_state_serving is documented with --steady-state-concurrency-ratio 0.8, of the peak rather than the offered)."""

MAX_DIP_NS = 20_000_000
"""A dip below the threshold this short (20 ms) is a closed-loop worker's turnaround from its last chunk to its next
send (sub-ms on an idle client, a few ms on a loaded one), not the end of the stretch."""

RATE_WINDOW_ARRIVALS = 16
"""The open-loop rule's window holds this many arrivals at the offered rate (16 / r seconds)."""

OPEN_LOOP_SHARE = 0.5
"""An open-loop window must hold at least this share of its expected arrivals, both sent and completed: with 16
expected, at least 8 (a Poisson count of mean 16 falls below 8 about 1 % of the time)."""

MIN_STEADY_SHARE = 0.5
"""A stretch shorter than half its window is too short to count: ramp and drain dominate the run."""

MIN_STEADY_REQUESTS = 10
"""A stretch with fewer requests decoded inside it than this is too short to count."""

_NS_PER_S = 1e9


@dataclass(frozen=True)
class SteadyState:
    """The steady stretch of one run (ns on the window's clock) and its figures; None where undefined."""

    start_ns: Optional[int]
    """None (and end_ns, the figures too): the offered load never held; share and requests are then 0."""
    end_ns: Optional[int]
    share: float
    """(end_ns - start_ns) / the window's duration."""
    output_tps: Optional[float]
    tpot_ms: Optional[float]
    accept_length: Optional[float]
    requests: int
    """Ok requests decoded inside the stretch (at least half of their first-to-last-chunk span in it)."""
    rule: str
    """The rule that chose it, with its numbers (e.g. 'in flight >= 7 of offered concurrency 8')."""



def _spans(starts: np.ndarray, ends: np.ndarray, good: np.ndarray) -> list[tuple[int, int]]:
    """The maximal runs of consecutive good segments [starts[i], ends[i]), joined across dips <= MAX_DIP_NS."""
    out: list[tuple[int, int]] = []
    for s, e, g in zip(starts.tolist(), ends.tolist(), good.tolist()):
        if not g or e <= s:
            continue
        if out and s - out[-1][1] <= MAX_DIP_NS:
            out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def _longest(spans: list[tuple[int, int]]) -> Optional[tuple[int, int]]:
    """The longest span; the earliest of equally long ones."""
    best: Optional[tuple[int, int]] = None
    for s, e in spans:
        if best is None or e - s > best[1] - best[0]:
            best = (s, e)
    return best


def closed_loop_stretch(send_ns: np.ndarray, end_ns: np.ndarray, threshold: int) -> Optional[tuple[int, int]]:
    """The longest interval with at least `threshold` of the intervals [send, end) open (dips <= MAX_DIP_NS bridged)."""
    if send_ns.size == 0:
        return None
    times = np.concatenate([send_ns, end_ns])
    steps = np.concatenate([np.ones(send_ns.size, np.int64), -np.ones(end_ns.size, np.int64)])
    order = np.argsort(times, kind="stable")
    times, steps = times[order], steps[order]
    # N after every event at the same instant: the last cumulative sum of each run of equal times
    last_of_time = np.r_[times[1:] != times[:-1], True]
    at, level = times[last_of_time], np.cumsum(steps)[last_of_time]
    return _longest(_spans(at[:-1], at[1:], level[:-1] >= threshold))


def _count_in(trailing_ns: int, x_sorted: np.ndarray, t: np.ndarray) -> np.ndarray:
    """How many of x lie in (t - trailing_ns, t], for each t."""
    return (np.searchsorted(x_sorted, t, side="right") - np.searchsorted(x_sorted, t - trailing_ns, side="right"))


def open_loop_stretch(send_ns: np.ndarray, done_ns: np.ndarray, window_ns: int, need: int,
                      duration_ns: int) -> Optional[tuple[int, int]]:
    """The longest run of instants whose centred `window_ns` wide window (inside [0, duration_ns]) holds >= `need`
    sends and >= `need` completions. The window ending at u, (u - window_ns, u], changes its counts only at x and
    x + window_ns, so they are evaluated at those instants; a run of good window ends [a, z) is the stretch of
    centres [a - window_ns / 2, z - window_ns / 2]."""
    if window_ns <= 0 or duration_ns < window_ns:
        return None
    sends, dones = np.sort(send_ns), np.sort(done_ns)
    edges = np.concatenate([sends, sends + window_ns, dones, dones + window_ns, [window_ns, duration_ns]])
    edges = np.unique(edges[(edges >= window_ns) & (edges <= duration_ns)])
    good = (_count_in(window_ns, sends, edges) >= need) & (_count_in(window_ns, dones, edges) >= need)
    # a segment [edges[i], edges[i+1]) is good when edges[i] is; the last edge (duration_ns) only closes a segment
    best = _longest(_spans(edges[:-1], edges[1:], good[:-1]))
    return None if best is None else (best[0] - window_ns // 2, best[1] - window_ns // 2)


def _overlap(first: np.ndarray, last: np.ndarray, s: int, e: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first chunk in [s, e], decode span last - first, its overlap with [s, e]) per request, as float64."""
    first_in = ((first >= s) & (first <= e)).astype(np.float64)
    span = (last - first).astype(np.float64)
    overlap = np.clip(np.minimum(last, e) - np.maximum(first, s), 0, None).astype(np.float64)
    return first_in, span, overlap


def _tokens_inside(first: np.ndarray, last: np.ndarray, n: np.ndarray, s: int, e: int) -> float:
    """Output tokens in [s, e]: 1 at the first chunk, n - 1 spread evenly over (first, last]."""
    first_in, span, overlap = _overlap(first, last, s, e)
    rest = np.where(span > 0, (n - 1) * overlap / np.where(span > 0, span, 1.0), (n - 1) * first_in)
    return float((first_in + rest).sum())


def _decoded_inside(first: np.ndarray, last: np.ndarray, s: int, e: int) -> np.ndarray:
    """Requests with at least half their decode span in [s, e] (a zero span: the first chunk in it)."""
    first_in, span, overlap = _overlap(first, last, s, e)
    return np.where(span > 0, overlap >= 0.5 * span, first_in > 0)


def steady_state(requests: Records, load_kind: str, offered: Optional[float],
                 duration_s: float) -> Optional[SteadyState]:
    """The run's steady stretch and its figures (see the module docstring); one with no bounds (share 0) when the
    offered load never held; None when there is nothing to judge: no ok request, no offered load (an open loop's
    rate, a closed loop's concurrency) or an empty window."""
    c = request_columns(requests)
    ok = c.ok
    duration_ns = int(round(duration_s * _NS_PER_S))
    if not ok.any() or offered is None or offered <= 0 or duration_ns <= 0:
        return None
    n_out = np.where(c.completion_tokens_ok, c.completion_tokens, c.client_tokens)
    send, first, last = c.actual_send_ns[ok], c.first_chunk_ns[ok], c.last_chunk_ns[ok]
    if load_shape(load_kind).closed:
        threshold = max(1, math.ceil(CLOSED_LOOP_SHARE * offered - 1e-9))
        got = closed_loop_stretch(send, last, threshold)
        rule = f"in flight >= {threshold} of offered concurrency {offered:g}"
    else:
        window_ns = int(round(RATE_WINDOW_ARRIVALS / offered * _NS_PER_S))
        need = max(1, math.ceil(OPEN_LOOP_SHARE * RATE_WINDOW_ARRIVALS - 1e-9))
        all_sends, _ = int_column(requests, "actual_send_ns", 0)
        got = open_loop_stretch(all_sends, last, window_ns, need, duration_ns)
        rule = (f">= {need} sends and >= {need} completions in every {window_ns / _NS_PER_S:g} s "
                f"({RATE_WINDOW_ARRIVALS} expected at {offered:g} req/s)")
    if got is None:
        return SteadyState(None, None, 0.0, None, None, None, 0, rule)
    s, e = got
    tokens = _tokens_inside(first, last, n_out[ok], s, e)
    inside = _decoded_inside(first, last, s, e)
    tpot = TPOT.values(c)[ok][inside]
    tpot = tpot[~np.isnan(tpot)]
    svc = np.where(c.spec_verify_ct_ok, c.spec_verify_ct, 0)[ok][inside]
    acc = acceptance(n_out[ok][inside], svc)
    return SteadyState(
        start_ns=int(s), end_ns=int(e), share=(e - s) / duration_ns,
        output_tps=tokens / ((e - s) / _NS_PER_S) if e > s else None,
        tpot_ms=float(tpot.mean()) if tpot.size else None,
        accept_length=acc.accept_length, requests=int(inside.sum()), rule=rule)


def shortfall(share: float, requests: int) -> Optional[str]:
    """Why a run's steady stretch (its stored share and requests) is too short to count (None: it counts); no
    stretch at all (share 0) is a shortfall too."""
    if not share > 0:
        return "no steady stretch: the offered load never held"
    if share < MIN_STEADY_SHARE:
        return (f"steady stretch {share:.0%} of the window (< {MIN_STEADY_SHARE:.0%}): ramp and drain dominate "
                "the whole-window figures")
    if requests < MIN_STEADY_REQUESTS:
        return f"only {requests} requests decoded inside the steady stretch (< {MIN_STEADY_REQUESTS})"
    return None
