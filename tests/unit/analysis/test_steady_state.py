"""The steady-state stretch on hand-built timelines whose arithmetic is in the comments."""

from __future__ import annotations

from typing import Optional

import pytest

from cluster.analysis.steady_state import MIN_STEADY_REQUESTS, SteadyState, shortfall, steady_state
from cluster.kernel.records import RequestRecord
from cluster.loadgen.sink import request_batches

MS = 1_000_000


def _rec(i: int, send_ms: float, first_ms: float, last_ms: float, tokens: int, svc: Optional[int] = None,
         error: Optional[str] = None) -> RequestRecord:
    """One request: its first token alone at first_ms, the other tokens - 1 in one chunk at last_ms."""
    chunks = [(first_ms, 1)] + ([(last_ms, tokens - 1)] if tokens > 1 else [])
    return RequestRecord(
        request_index=i, intended_send_ns=int(send_ms * MS), actual_send_ns=int(send_ms * MS),
        prompt_tokens_sent=10, max_tokens=tokens, chunk_arrival_ns=[int(t * MS) for t, _ in chunks],
        chunk_tokens=[k for _, k in chunks], completion_tokens=tokens, spec_verify_ct=svc, error=error)


def test_closed_loop_stretch_ends_where_the_drain_begins() -> None:
    # concurrency 2: threshold ceil(0.8 * 2) = 2 in flight.
    #   r0 [0, 100]  r1 [0, 200]  r2 [100, 300] (r0's worker)  r3 [200, 230] (r1's worker), then no more sends
    # N = 2 on [0, 230) (each end meets the next send at the same instant), 1 on [230, 300): stretch [0, 230] ms of a
    # 300 ms window, share 230 / 300.
    reqs, _ = request_batches([
        _rec(0, 0, 10, 100, 10, svc=3),     # TPOT (100 - 10) / 9 = 10 ms; accept 9 / 3
        _rec(1, 0, 10, 200, 20, svc=19),    # TPOT (200 - 10) / 19 = 10 ms; accept 19 / 19
        _rec(2, 100, 110, 300, 20, svc=5),  # (230 - 110) / 190 = 63 % of it inside: decoded inside; TPOT 10, 19 / 5
        _rec(3, 200, 210, 230, 5, svc=2),   # TPOT (230 - 210) / 4 = 5 ms; accept 4 / 2
        _rec(4, 0, 0, 0, 1, error="HTTP 500"),  # failed: neither in flight nor counted
    ])
    ss = steady_state(reqs, "concurrency", 2, duration_s=0.3)
    assert ss is not None
    assert (ss.start_ns, ss.end_ns) == (0, 230 * MS)
    assert ss.share == pytest.approx(230 / 300)
    # tokens in [0, 230]: r0 10 + r1 20 + r3 5, and r2: its first token at 110, then 19 tokens spread over
    # (110, 300], of which (230 - 110) / 190 lie inside: 19 * 120 / 190 = 12; 1 + 12 = 13. 48 tokens in 0.23 s.
    assert ss.output_tps == pytest.approx(48 / 0.23)
    assert ss.requests == 4
    assert ss.tpot_ms == pytest.approx((10 + 10 + 10 + 5) / 4)
    # accept over r0..r3: sum(n - 1) / sum(spec_verify_ct) = (9 + 19 + 19 + 4) / (3 + 19 + 5 + 2) = 51 / 29
    assert ss.accept_length == pytest.approx(51 / 29)
    assert ss.rule == "in flight >= 2 of offered concurrency 2"


def test_a_worker_turnaround_does_not_end_the_stretch_but_a_longer_gap_does() -> None:
    # concurrency 1: r1 sent 0.5 ms after r0's last chunk: a dip under MAX_DIP_NS (20 ms), bridged: [0, 100]
    turnaround = steady_state(request_batches([_rec(0, 0, 5, 50, 4), _rec(1, 50.5, 55, 100, 4)])[0],
                              "concurrency", 1, duration_s=0.1)
    assert turnaround is not None and (turnaround.start_ns, turnaround.end_ns) == (0, 100 * MS)
    # a 30 ms gap splits it: [0, 50] (50 ms) and [80, 140] (60 ms); the longer one is the stretch, and r0's decode
    # [5, 50] lies outside it
    gap = steady_state(request_batches([_rec(0, 0, 5, 50, 4), _rec(1, 80, 85, 140, 4)])[0],
                       "concurrency", 1, duration_s=0.14)
    assert gap is not None and (gap.start_ns, gap.end_ns) == (80 * MS, 140 * MS)
    assert gap.requests == 1


def _never_held(ss: Optional[SteadyState]) -> bool:
    return (ss is not None and (ss.start_ns, ss.end_ns, ss.share, ss.requests, ss.output_tps) == (None, None, 0, 0, None)
            and shortfall(ss.share, ss.requests) == "no steady stretch: the offered load never held")


def test_closed_loop_below_the_offered_concurrency_has_no_stretch() -> None:
    # offered 8 (threshold ceil(6.4) = 7) but only two requests were ever in flight together
    reqs, _ = request_batches([_rec(0, 0, 5, 50, 4), _rec(1, 0, 5, 60, 4)])
    ss = steady_state(reqs, "concurrency", 8, duration_s=0.06)
    assert _never_held(ss) and ss is not None and ss.rule == "in flight >= 7 of offered concurrency 8"


def _open_loop(e2e_ms: float, every_ms: float = 10, n: int = 40) -> list[RequestRecord]:
    """Sends every 10 ms from 0 (100 req/s), each request 10 tokens: first token 20 ms after its send, last e2e_ms."""
    return [_rec(i, every_ms * i, every_ms * i + 20, every_ms * i + e2e_ms, 10) for i in range(n)]


def test_open_loop_stretch_sits_between_the_ramp_and_the_drain() -> None:
    # 100 req/s: W = 16 / 100 s = 160 ms, need 8 sends and 8 completions in the window centred on each instant.
    # Sends 0..390 ms, completions (E2E 200 ms) 200..590 ms, window 590 ms.
    # Window ending at u holds >= 8 sends for u < 480 (sends 320..390 are the last 8) and >= 8 completions from
    # u = 270 (completions 200..270); good ends [270, 480) are centres [190, 400]: the ramp (nothing completed before
    # 200) and the drain (nothing sent after 390) are outside, to within the 10 ms spacing.
    reqs, _ = request_batches(_open_loop(200))
    ss = steady_state(reqs, "rate", 100, duration_s=0.59)
    assert ss is not None
    assert (ss.start_ns, ss.end_ns) == (190 * MS, 400 * MS)
    assert ss.share == pytest.approx(210 / 590)
    # decoded inside: at least 90 ms of request i's 180 ms decode (10 i + 20, 10 i + 200] in [190, 400]. Its overlap
    # is 10 i + 10 for i <= 17 (>= 90 from i = 8), 180 for i = 18..20, 380 - 10 i for i >= 21 (>= 90 to i = 29):
    # i = 8..29, 22 requests
    assert ss.requests == 22
    # tokens inside [190, 400]: first tokens at 10 i + 20 in it for i = 17..38: 22. The other 9 of request i over
    # (10 i + 20, 10 i + 200] (180 ms) overlap it by 10 i + 10 for i <= 17 (sum 1710), 180 for i = 18..20 (540),
    # 380 - 10 i for i = 21..38 (sum 1530): 3780 ms; 9 * 3780 / 180 = 189. (22 + 189) / 0.21 s, about the offered
    # 100 req/s x 10 tokens.
    assert ss.output_tps == pytest.approx(211 / 0.21)
    assert ss.tpot_ms == pytest.approx(180 / 9)
    assert ss.accept_length is None
    assert ss.rule.startswith(">= 8 sends and >= 8 completions in every 0.16 s")
    # 36 % of the window: too short to count
    assert shortfall(ss.share, ss.requests) is not None and "36%" in str(shortfall(ss.share, ss.requests))


def test_open_loop_whose_completions_fall_behind_has_no_stretch() -> None:
    # sends at 100 req/s, but the server finishes one request every 40 ms: a 160 ms window holds 4 completions < 8
    recs = [_rec(i, 10 * i, 10 * i + 5, 40 * i + 40, 4) for i in range(40)]
    reqs, _ = request_batches(recs)
    assert _never_held(steady_state(reqs, "rate", 100, duration_s=40 * 40 / 1000))


def test_nothing_to_hold_is_no_stretch() -> None:
    reqs, _ = request_batches([_rec(0, 0, 0, 0, 1, error="boom")])
    assert steady_state(reqs, "concurrency", 1, duration_s=1.0) is None
    ok, _ = request_batches([_rec(0, 0, 5, 50, 4)])
    assert steady_state(ok, "rate", None, duration_s=0.05) is None  # no offered rate
    assert _never_held(steady_state(ok, "rate", 100, duration_s=0.05))  # window (50 ms) under W (160 ms)


def test_shortfall_thresholds() -> None:
    assert shortfall(0.0, 0) == "no steady stretch: the offered load never held"
    assert shortfall(0.49, 100) is not None and "49%" in str(shortfall(0.49, 100))
    assert shortfall(0.5, MIN_STEADY_REQUESTS - 1) == f"only {MIN_STEADY_REQUESTS - 1} requests decoded inside " \
                                                      f"the steady stretch (< {MIN_STEADY_REQUESTS})"
    assert shortfall(0.5, MIN_STEADY_REQUESTS) is None
