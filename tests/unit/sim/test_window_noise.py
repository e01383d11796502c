"""The simulator's run-to-run noise knob (window_speed_spread): a new step-time multiplier at every /flush_cache."""

from __future__ import annotations

from cluster.config.sim_knobs import Knobs
from cluster.sim.model import Scheduler, step_time_ms


def _step_after_flushes(knobs: Knobs, flushes: int) -> list[float]:
    """The first step's model ms of one request after each of `flushes` flushes (a fresh window each)."""
    s = Scheduler(knobs, 8, None)
    out = []
    for i in range(flushes):
        s.flush()
        req = s.new_request(f"r{i}", [1, 2, 3, 4], None, 4, True)
        s.submit(req)
        t = s.plan_step()
        assert t is not None
        out.append(t)
        s.abort(req)
        s._new.clear()
    return out


def test_each_window_draws_its_own_speed_and_stays_in_the_spread() -> None:
    quiet = Knobs(radix_cache=False)
    base = step_time_ms(quiet, 0, 4, None)  # 13.85 + 0.02 * 4 = 13.93 ms: no running request, 4 prompt tokens
    assert _step_after_flushes(quiet, 4) == [base] * 4  # spread 0: every window alike
    noisy = Knobs(radix_cache=False, window_speed_spread=0.2, seed=7)
    steps = _step_after_flushes(noisy, 6)
    # each window's multiplier is 1 + 0.2 u, u in [-1, 1]: between 0.8 and 1.2 times the quiet step
    assert all(0.8 * base <= t <= 1.2 * base for t in steps), steps
    assert len(set(steps)) == 6  # a new draw per window
    assert _step_after_flushes(noisy, 6) == steps  # seeded: the same server start draws the same sequence
