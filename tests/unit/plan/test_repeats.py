"""The repeats-until-sure stop rule (cluster/plan/repeats.py) on hand-built series, and the bound it puts on a plan."""

from __future__ import annotations

import pytest

from cluster.config.repeats import RepeatsUntil, UntilSpec
from cluster.plan.repeats import (GO_BELOW_MIN, GO_TOO_WIDE, STOP_MAX, STOP_NARROW, decide, half_width_pct,
                                  repeats_bound)


def _rule(target_pct: float, lo: int = 3, hi: int = 10) -> RepeatsUntil:
    return RepeatsUntil(until=UntilSpec(metric="output_tps", half_width_pct=target_pct), min=lo, max=hi)


def test_the_half_width_of_three_values_by_hand() -> None:
    # 98, 100, 102: mean 100. A resample of 3 is all-98 with probability 1/27 = 3.7 % (> 2.5 %), so the bootstrap
    # means' 2.5 % and 97.5 % quantiles are the extremes 98 and 102. On the log scale the arms are log(100/98) =
    # 0.020203 and log(102/100) = 0.019803, widened by sqrt(3/2) * t(0.975, 2) / z(0.975) = 1.224745 * 4.302653 /
    # 1.959964 = 2.688647: 0.054318 and 0.053242, so the interval is 100 e^-0.054318 = 94.713 .. 100 e^0.053242 =
    # 105.469, half-width (105.469 - 94.713) / 2 = 5.378 (% of the mean 100)
    assert half_width_pct([98.0, 100.0, 102.0]) == pytest.approx(5.3777, abs=1e-3)
    # no spread, no width: 50, 50, 50 -> 0 %
    assert half_width_pct([50.0, 50.0, 50.0]) == 0.0
    # one value has no interval (run-to-run variance unknown)
    assert half_width_pct([100.0]) is None


def test_too_wide_goes_on_and_narrow_enough_stops() -> None:
    values = [98.0, 100.0, 102.0]  # ±5.378 % (above)
    go = decide(values, 3, _rule(2.0))
    assert (go.stop, go.reason, go.repeats_done, go.ok_values) == (False, GO_TOO_WIDE, 3, 3)
    assert go.half_width_pct == pytest.approx(5.3777, abs=1e-3)
    stop = decide(values, 3, _rule(6.0))  # 5.378 <= 6
    assert (stop.stop, stop.reason) == (True, STOP_NARROW)


def test_min_comes_first_and_max_ends_it() -> None:
    # two identical values are a 0 % interval, but min is 3: go on
    assert decide([100.0, 100.0], 2, _rule(2.0)).reason == GO_BELOW_MIN
    # a failed repeat used a repeat without a value: 3 done, 2 ok, still below min
    below = decide([100.0, 100.0], 3, _rule(2.0))
    assert (below.stop, below.reason, below.repeats_done, below.ok_values) == (False, GO_BELOW_MIN, 3, 2)
    # 10 repeats of 90/110 (mean 100) are still wider than ±2 %: max (10) reached, stop and say so
    wide = [90.0, 110.0] * 5
    at_max = decide(wide, 10, _rule(2.0))
    assert (at_max.stop, at_max.reason) == (True, STOP_MAX)
    assert at_max.half_width_pct is not None and at_max.half_width_pct > 2.0
    assert "stopped at max repeats" in at_max.describe("output_tps")


def test_more_repeats_of_the_same_spread_narrow_the_interval() -> None:
    # 98/102 alternating: the spread stays ±2 % of the mean while n grows, so the half-width falls roughly as
    # 1/sqrt(n) (not monotonically: a bootstrap of a few values is coarse) and ±2 % is reached within 10 repeats
    series = [98.0, 102.0] * 5
    w4, w10 = half_width_pct(series[:4]), half_width_pct(series)
    assert w4 is not None and w10 is not None and w10 < w4 / 2
    assert decide(series[:4], 4, _rule(2.0)).reason == GO_TOO_WIDE
    assert decide(series, 10, _rule(2.0)).reason == STOP_NARROW


def test_the_bound_on_the_plan() -> None:
    # 2 variants x 1 workload x 2 load points, min 3: 12 runs planned, each of the 4 points at most 10 -> 40 runs
    b = repeats_bound(_rule(2.0), 12)
    assert (b.points, b.planned_runs, b.most_runs) == (4, 12, 40)
