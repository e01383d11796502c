"""Placement reservations, unplaceable requests, and the GPU-time accounting of a finished schedule."""

from __future__ import annotations

import pytest

from cluster.plan.schedule import (HeldReservation, Interval, gpu_time_account, idle_gpu_share, makespan_s,
                              node_gpus_for_isolation, peak_reserved_gpus, reservation, span_of, unplaceable)


def test_reservation_node_isolation_takes_the_whole_node() -> None:
    r = reservation("a", 4, "node", 8, load_cpus=1.5)
    assert (r.variant, r.tp, r.gpus, r.cpus_for_load) == ("a", 4, 8, 1.5)
    assert reservation("big", 8, "node", 8).gpus == 8
    # a tp larger than the node keeps its tp (unplaceable() reports it)
    assert reservation("huge", 16, "node", 8).gpus == 16


def test_reservation_gpus_isolation_takes_only_tp() -> None:
    assert reservation("a", 4, "gpus", 8).gpus == 4
    assert reservation("b", 1, "gpus", 8).gpus == 1


def test_unplaceable_names_the_variant_and_the_largest_node() -> None:
    res = [reservation("fits", 8, "gpus", 8), reservation("too-big", 9, "gpus", 8)]
    msgs = unplaceable(res, [8, 4])
    assert len(msgs) == 1
    assert "'too-big'" in msgs[0] and "tp=9" in msgs[0] and "largest node has 8 GPUs" in msgs[0]
    assert "[8, 4]" in msgs[0]
    assert unplaceable(res[:1], [8]) == []
    # no GPU nodes at all: every reservation is unplaceable
    assert len(unplaceable(res, [])) == 2


def test_node_gpus_for_isolation() -> None:
    assert node_gpus_for_isolation([4, 8, 2]) == 8
    assert node_gpus_for_isolation([]) == 0


def test_interval_rejects_reversed_and_measures_overlap() -> None:
    with pytest.raises(ValueError, match="ends before it starts"):
        Interval(5.0, 4.0)
    a, b = Interval(0.0, 10.0), Interval(8.0, 12.0)
    assert a.length_s == 10.0
    assert a.overlap_s(b) == 2.0 and b.overlap_s(a) == 2.0
    assert a.overlap_s(Interval(10.0, 11.0)) == 0.0
    assert a.overlap_s(Interval(20.0, 30.0)) == 0.0


def test_makespan_and_span() -> None:
    ivs = [Interval(3.0, 10.0), Interval(1.0, 4.0), Interval(9.0, 21.0)]
    assert makespan_s(ivs) == 20.0
    assert span_of(ivs) == Interval(1.0, 21.0)
    assert makespan_s([]) == 0.0
    with pytest.raises(ValueError):
        span_of([])


def test_held_reservation_rejects_tp_beyond_its_gpus() -> None:
    with pytest.raises(ValueError, match="tp=8"):
        HeldReservation("a", gpus=4, tp=8, reserved=Interval(0, 1))


def _gpus_schedule() -> list[HeldReservation]:
    """Two TP=4 waves on 8 GPUs: each reservation waits 1 s for its server and 1 s to tear down."""
    return [
        HeldReservation("a", 4, 4, Interval(0, 10), Interval(1, 9)),
        HeldReservation("b", 4, 4, Interval(0, 10), Interval(1, 9)),
        HeldReservation("c", 4, 4, Interval(10, 20), Interval(11, 19)),
        HeldReservation("d", 4, 4, Interval(10, 20), Interval(11, 19)),
    ]


def test_gpus_isolation_idle_is_the_gaps_only() -> None:
    acc = gpu_time_account(_gpus_schedule(), 8, Interval(0, 20))
    assert acc.total_gpu_s == 160.0
    assert acc.reserved_gpu_s == 160.0
    assert acc.serving_gpu_s == 4 * 4 * 8.0
    assert acc.idle_spare_gpu_s == 0.0
    assert acc.idle_gap_gpu_s == 4 * 4 * 2.0
    assert acc.idle_gpu_s == 32.0 and acc.unreserved_gpu_s == 0.0
    assert acc.share_idle() == pytest.approx(0.2)
    assert idle_gpu_share(_gpus_schedule(), 8, Interval(0, 20)) == pytest.approx(0.2)


def test_node_isolation_idles_the_other_half_of_the_node() -> None:
    held = [HeldReservation(v, 8, 4, Interval(10 * i, 10 * i + 10), Interval(10 * i, 10 * i + 10))
            for i, v in enumerate("abcd")]
    acc = gpu_time_account(held, 8, Interval(0, 40))
    assert acc.reserved_gpu_s == 320.0
    assert acc.serving_gpu_s == 160.0
    assert acc.idle_spare_gpu_s == 160.0 and acc.idle_gap_gpu_s == 0.0
    assert acc.share_idle() == pytest.approx(0.5)


def test_unreserved_time_is_not_idle() -> None:
    # one TP=4 server alone on 8 GPUs, fully used: the other 4 GPUs are free, not allocated-but-idle
    held = [HeldReservation("a", 4, 4, Interval(0, 10), Interval(0, 10))]
    acc = gpu_time_account(held, 8, Interval(0, 10))
    assert acc.idle_gpu_s == 0.0
    assert acc.unreserved_gpu_s == 40.0
    assert acc.share(acc.reserved_gpu_s) == pytest.approx(0.5)


def test_serving_outside_its_reservation_or_the_span_does_not_count() -> None:
    # the server interval overruns its reservation (recorded after release) and the span cuts the reservation
    held = [HeldReservation("a", 4, 4, Interval(0, 10), Interval(2, 15))]
    acc = gpu_time_account(held, 4, Interval(5, 20))
    assert acc.reserved_gpu_s == 4 * 5.0
    assert acc.serving_gpu_s == 4 * 5.0
    assert acc.idle_gpu_s == 0.0
    assert acc.span_s == 15.0


def test_a_reservation_whose_server_never_started_is_all_idle() -> None:
    held = [HeldReservation("a", 4, 4, Interval(0, 3), None), HeldReservation("b", 4, 4, Interval(0, 10),
                                                                                Interval(0, 10))]
    acc = gpu_time_account(held, 8, Interval(0, 10))
    assert acc.idle_gap_gpu_s == 12.0
    assert acc.share_idle() == pytest.approx(12.0 / 80.0)


def test_gpu_time_account_rejects_no_gpus() -> None:
    with pytest.raises(ValueError, match="total_gpus"):
        gpu_time_account([], 0, Interval(0, 1))
    # a zero-length span has no GPU-seconds: the share is 0, not a division error
    assert gpu_time_account([], 8, Interval(1, 1)).share_idle() == 0.0


def test_peak_reserved_gpus() -> None:
    assert peak_reserved_gpus(_gpus_schedule()) == 8  # back-to-back waves do not add up
    overlapping = [HeldReservation("a", 8, 4, Interval(0, 10)), HeldReservation("b", 8, 4, Interval(9, 12))]
    assert peak_reserved_gpus(overlapping) == 16
    assert peak_reserved_gpus([]) == 0
