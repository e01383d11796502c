"""Acceptance per draft position on hand-built histograms (the arithmetic in the comments), the Wilson interval, the
grouping over a requests table, and the simulator's own draws, whose per-position probabilities are known."""

from __future__ import annotations

import random

import pandas as pd
import pyarrow as pa
import pytest

from cluster.analysis.acceptance_positions import ALL_CATEGORIES, acceptance_by_position, position_view, positions
from cluster.config.sim_knobs import QWEN35_MTP_ACCEPT_PROBS, Knobs
from cluster.kernel.records import REQUEST_FIELDS
from cluster.sim.model import Scheduler
from cluster.engines.sim_launch import SpecParams


def test_positions_on_hand_built_histograms() -> None:
    # request A: [1, 2, 3, 4] = 10 verify steps: 1 accepted 0 drafts, 2 accepted 1, 3 accepted 2, 4 accepted 3
    # request B: [2, 0, 1]    = 3 steps (its histogram stops at 2: it never accepted 3)
    # summed H = [3, 2, 4, 4], 13 steps; at least j: [13, 10, 8, 4]
    # k=1: 10/13 = .769 (cum 10/13); k=2: 8/10 = .8 (cum 8/13 = .615); k=3: 4/8 = .5 (cum 4/13 = .308)
    got = positions([[1, 2, 3, 4], [2, 0, 1]], depth=3)
    assert [(p.position, p.steps_reaching, p.steps_accepting) for p in got] == [(1, 13, 10), (2, 10, 8), (3, 8, 4)]
    assert [p.conditional.rate for p in got] == [10 / 13, 0.8, 0.5]
    assert [p.cumulative.rate for p in got] == [10 / 13, 8 / 13, 4 / 13]
    # 1 + Σ cumulative = 1 + (10 + 8 + 4)/13 = 35/13: the mean accepted tokens per step = (1·2 + 2·3 + 3·4 + 0)/13 + 1
    assert 1 + sum(p.cumulative.rate for p in got) == pytest.approx(1 + (2 + 2 * 4 + 3 * 4) / 13)


def test_the_configured_depth_extends_short_histograms_and_a_longer_one_extends_it() -> None:
    # depth 3 but no step accepted more than 1: H = [2, 3]; at least j = [5, 3, 0, 0]
    # k=2: 0 of 3 reached (a measured zero); k=3: 0 of 0 (no trials: NaN, not zero)
    got = positions([[2, 3]], depth=3)
    assert [(p.steps_reaching, p.steps_accepting) for p in got] == [(5, 3), (3, 0), (0, 0)]
    assert got[1].conditional.rate == 0.0 and got[2].conditional.rate is None
    assert len(positions([[0, 0, 1]], depth=1)) == 2  # a histogram past the depth is not cut
    assert positions([], depth=3) == [] and positions([[0]], depth=3) == []


def _requests(rows: list[dict[str, object]]) -> pa.Table:
    schema = pa.schema(REQUEST_FIELDS + [pa.field(n, pa.string()) for n in ("run_key", "workload", "variant")])
    base = {"request_index": 0, "intended_send_ns": 0, "actual_send_ns": 0, "first_chunk_ns": 5, "last_chunk_ns": 9,
            "num_chunks": 1, "client_tokens": 4, "prompt_tokens_sent": 3, "max_tokens": 4, "workload": "w"}
    return pa.Table.from_pylist([{**{n: None for n in schema.names}, **base, **r} for r in rows], schema=schema)


def test_groups_pool_ok_requests_of_ok_runs_per_variant_and_category() -> None:
    runs = pd.DataFrame({"run_key": ["r1", "r2", "r3"], "status": ["ok", "ok", "invalid"],
                         "spec_num_steps": [2, 2, 2]})
    reqs = _requests([
        {"run_key": "r1", "variant": "n2", "category": "code", "spec_verify_ct": 4,
         "spec_correct_drafts_histogram": [0, 1, 3]},
        {"run_key": "r2", "variant": "n2", "category": "chat", "spec_verify_ct": 4,
         "spec_correct_drafts_histogram": [2, 2]},
        {"run_key": "r2", "variant": "n2", "category": "chat", "spec_verify_ct": 3,  # no histogram sent
         "spec_correct_drafts_histogram": None},
        {"run_key": "r2", "variant": "n2", "category": "chat", "spec_verify_ct": 4, "error": "boom",
         "spec_correct_drafts_histogram": [4]},  # an errored request: left out
        {"run_key": "r3", "variant": "n2", "category": "code", "spec_verify_ct": 4,
         "spec_correct_drafts_histogram": [4]},  # an invalid run: left out
    ])
    got = {g.category: g for g in acceptance_by_position(reqs, runs)}
    assert set(got) == {ALL_CATEGORIES, "code", "chat"}
    # all: H = [0,1,3] + [2,2] = [2, 3, 3], 8 steps; at least [8, 6, 3]: k=1 6/8, k=2 3/6
    a = got[ALL_CATEGORIES]
    assert [p.conditional.rate for p in a.positions] == [0.75, 0.5] and a.requests == 2 and a.spec_requests == 3
    # code: [0,1,3]: at least [4, 4, 3]: k=1 4/4, k=2 3/4; chat: [2,2]: at least [4, 2, 0]: k=1 2/4, k=2 0/2
    assert [p.conditional.rate for p in got["code"].positions] == [1.0, 0.75]
    assert [p.conditional.rate for p in got["chat"].positions] == [0.5, 0.0]
    view = position_view([a])
    assert list(view["position"]) == [1, 2] and "1 of 3 speculative requests sent no histogram" in view["note"][0]
    assert view["P(accept k | k-1)"][0].startswith("0.750 [")


def test_a_histogram_disagreeing_with_spec_verify_ct_is_noted() -> None:
    runs = pd.DataFrame({"run_key": ["r1"], "status": ["ok"], "spec_num_steps": [1]})
    reqs = _requests([{"run_key": "r1", "variant": "n1", "spec_verify_ct": 5, "spec_correct_drafts_histogram": [1, 1]}])
    (g,) = acceptance_by_position(reqs, runs)
    assert g.mismatched == 1 and "1 histograms disagree with spec_verify_ct" in position_view([g])["note"][0]


def test_no_histogram_column_or_none_sent_gives_no_groups() -> None:
    runs = pd.DataFrame({"run_key": ["r1"], "status": ["ok"], "spec_num_steps": [None]})
    reqs = _requests([{"run_key": "r1", "variant": "base", "spec_verify_ct": None}])
    assert acceptance_by_position(reqs, runs) == []
    assert acceptance_by_position(reqs.drop(["spec_correct_drafts_histogram"]), runs) == []


def test_the_simulators_draws_land_within_their_intervals() -> None:
    # the simulator's scheduler accepts draft k with QWEN35_MTP_ACCEPT_PROBS[k-1] given drafts 1..k-1 accepted;
    # its per-request histograms, summed, must give each rate within its 95 % interval of the known probability
    knobs = Knobs(seed=7, time_scale=0.0)
    sched = Scheduler(knobs, max_running=64, spec=SpecParams("EAGLE", num_steps=3, eagle_topk=1, num_draft_tokens=4))
    reqs = [sched.new_request(f"r{i}", [random.Random(i).randrange(1000) for _ in range(8)], None, 200, True)
            for i in range(64)]
    for r in reqs:
        sched.submit(r)
    while sched.plan_step() is not None:
        sched.commit_step()
    got = positions([r.spec_correct_drafts_histogram for r in reqs], depth=3)
    assert len(got) == 3 and got[0].steps_reaching > 3000
    for p, prob in zip(got, QWEN35_MTP_ACCEPT_PROBS):
        assert p.conditional.low is not None and p.conditional.high is not None
        assert p.conditional.low <= prob <= p.conditional.high, (p.position, p.conditional, prob)
    # the cumulative is the product of the rates: .93, .93·.86 = .7998, .93·.86·.8 = .6398
    for p, cum in zip(got, (0.93, 0.93 * 0.86, 0.93 * 0.86 * 0.8)):
        assert p.cumulative.low is not None and p.cumulative.high is not None
        assert p.cumulative.low <= cum <= p.cumulative.high, (p.position, p.cumulative, cum)


def test_steps_clustered_by_prompt_widen_the_interval_by_the_design_effect() -> None:
    # 4 prompts of 10 steps each at depth 1, accepting 10, 8, 2 and 0: R = 20/40 = .5;
    # residuals y - R·x = 5, 3, -3, -5: Σ² = 68; spread = 68/40² · 4/3 = .056667; binomial = .25/40 = .00625
    # deff = 9.0667, trials = floor(40/9.0667) = 4, Wilson(2 of 4) = [.15003, .84997]
    hists = [[0, 10], [2, 8], [8, 2], [10, 0]]
    (p,) = positions(hists, depth=1, clusters=["a", "b", "c", "d"])
    assert p.conditional.rate == 0.5 and p.design_effect == pytest.approx(9.0667, abs=1e-4)
    assert p.conditional.low == pytest.approx(0.15003, abs=1e-4)
    assert p.conditional.high == pytest.approx(0.84997, abs=1e-4)
    # the same counts as 40 one-step requests: residuals ±.5, spread = 40·.25/40² · 40/39, deff = 40/39 (the small-
    # sample factor only): n = 39 trials, R·n = 19.5: Wilson(19 of 39).low = .3387 .. Wilson(20 of 39).high = .6613,
    # about Wilson(20 of 40) = [.352, .648]
    (q,) = positions([[1, 0]] * 20 + [[0, 1]] * 20, depth=1)
    assert q.design_effect == pytest.approx(40 / 39)
    assert q.conditional.low == pytest.approx(0.3387, abs=1e-4)
    assert q.conditional.high == pytest.approx(0.6613, abs=1e-4)


def test_repeats_of_one_prompt_add_no_evidence() -> None:
    # 2 prompts accepting 8 and 2 of 10 steps, once each, or each repeated 6 times with identical draws (greedy):
    # once: R = .5, residuals ±3, spread = 18/20² · 2 = .09, binomial .25/20 = .0125, deff 7.2, trials floor(2.78) = 2
    # 6 repeats: R = .5, residuals ±18, spread = 648/120² · 2 = .09, binomial .25/120, deff 43.2, trials 2: the same
    once = positions([[2, 8], [8, 2]], depth=1, clusters=["p", "q"])[0]
    six = positions([[2, 8]] * 6 + [[8, 2]] * 6, depth=1, clusters=["p"] * 6 + ["q"] * 6)[0]
    assert six.steps_reaching == 6 * once.steps_reaching
    assert (six.conditional.low, six.conditional.high) == (once.conditional.low, once.conditional.high)
    # counted as 12 unrelated requests instead, the interval would be narrower
    apart = positions([[2, 8]] * 6 + [[8, 2]] * 6, depth=1)[0]
    assert apart.conditional.low is not None and once.conditional.low is not None
    assert apart.conditional.low > once.conditional.low
