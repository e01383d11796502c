"""The simulator's pure step model: acceptance statistics, step-time formula, outputs, batching, knob validation."""

from __future__ import annotations

import math
import random

import pytest

from cluster.sim.model import (PREFIX_BLOCK_TOKENS, Scheduler, accept_probs_for, draw_accepted, expected_accept_length,
                               output_ids, step_time_ms)
from cluster.engines.sim_launch import SpecParams
from cluster.config.sim_knobs import Knobs, KnobError


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_acceptance_length_matches_expectation(k: int) -> None:
    probs = accept_probs_for(Knobs(), k)
    rng = random.Random(1234 + k)
    samples = [1 + draw_accepted(rng, probs) for _ in range(40_000)]
    mean = sum(samples) / len(samples)
    var = sum((s - mean) ** 2 for s in samples) / (len(samples) - 1)
    se = math.sqrt(var / len(samples))
    expected = expected_accept_length(probs)
    assert abs(mean - expected) < 3 * se
    want = {1: 1.93, 2: 1 + 0.93 + 0.93 * 0.86, 3: 1 + 0.93 + 0.93 * 0.86 + 0.93 * 0.86 * 0.8}.get(k)
    if want is not None:
        assert expected == pytest.approx(want)


def test_default_acceptance_is_calibrated_to_the_cited_qwen35_figure() -> None:
    """Issue 15 item 10: 0.8/0.65/0.5 gave 2.58 tokens per step at depth 3; public Qwen3.5 MTP figures exceed 3.3."""
    import yaml
    from pathlib import Path

    from cluster.config.sim_knobs import QWEN35_MTP_CITED_ACCEPT_LENGTH

    assert QWEN35_MTP_CITED_ACCEPT_LENGTH > 3.3
    assert expected_accept_length(accept_probs_for(Knobs(), 3)) == pytest.approx(QWEN35_MTP_CITED_ACCEPT_LENGTH,
                                                                                 abs=0.01)
    demo = yaml.safe_load((Path(__file__).parents[3] / "experiments" / "demo-sim.yaml").read_text())
    assert tuple(demo["sim"]["accept_probs"]) == Knobs().accept_probs


def test_probs_extend_by_repeating_last_and_mtp_absent_is_one() -> None:
    assert accept_probs_for(Knobs(), 5) == (0.93, 0.86, 0.8, 0.8, 0.8)
    absent = accept_probs_for(Knobs(mtp_absent=True), 3)
    rng = random.Random(0)
    assert all(draw_accepted(rng, absent) == 0 for _ in range(1000))
    assert expected_accept_length(absent) == 1.0


def test_step_time_formula() -> None:
    k = Knobs()
    assert step_time_ms(k, 1, 0, None) == pytest.approx(13.9)
    assert 1000 / step_time_ms(k, 1, 0, None) == pytest.approx(71.9, abs=0.1)
    assert step_time_ms(k, 10, 0, None) - step_time_ms(k, 9, 0, None) == pytest.approx(0.05)
    assert step_time_ms(k, 0, 1000, None) == pytest.approx(13.85 + 20.0)
    sp = SpecParams("EAGLE", 3, 1, 4)
    assert step_time_ms(k, 2, 0, sp) == pytest.approx(13.85 + 0.1 + 3 * 0.9 + 0.3 * 3 * 2)
    fast = Knobs(tuned_speed_factor=0.8)
    assert step_time_ms(fast, 4, 0, sp) == pytest.approx(0.8 * step_time_ms(k, 4, 0, sp))


def test_outputs_deterministic_and_answers() -> None:
    k = Knobs(seed=7)
    a, _ = output_ids(k, "ids:1,2,3", None, 50, True, False)
    b, _ = output_ids(k, "ids:1,2,3", None, 50, True, True)
    c, _ = output_ids(Knobs(seed=8), "ids:1,2,3", None, 50, True, False)
    assert a == b and a != c and len(a) == 50
    ok, stop = output_ids(k, "text:x", "Please Reply with OK", 10, False, False)
    assert stop and len(ok) == 2
    plain, stop = output_ids(Knobs(answers=False), "text:x", "Reply with OK", 10, False, False)
    assert not stop and len(plain) == 10


def test_scheduler_honours_max_running_and_counts_verify_steps() -> None:
    knobs = Knobs(radix_cache=False)
    s = Scheduler(knobs, 2, SpecParams("EAGLE", 2, 1, 3))
    reqs = [s.new_request(f"r{i}", [i, i + 1], None, 12, True) for i in range(3)]
    for r in reqs:
        s.submit(r)
    assert s.plan_step() is not None
    s.commit_step()
    assert len(s.running) == 2 and len(s.waiting) == 1
    assert all(r.generated == 1 and r.spec_verify_ct == 0 for r in reqs[:2]), "the first token comes from prefill"
    while s.busy:
        s.plan_step()
        s.commit_step()
        assert len(s.running) <= 2
    for r in reqs:
        assert r.finished and r.generated == 12
        assert r.spec_verify_ct >= 11 / 3
        # SGLang counts every accepted draft, also past max_new_tokens (recorded: echo NEXTN-3, 12 tokens, 3 verify
        # steps, 9 correct drafts), so the last step may count up to `steps` more than the tokens it kept (all its
        # drafts accepted with one token left to generate: the bonus token is kept, every draft cut); the old bound
        # of steps - 1 held only while the 0.8/0.65/0.5 acceptance never drew that case for this seed
        cut = r.spec_num_correct_drafts - (r.generated - 1 - r.spec_verify_ct)
        assert 0 <= cut <= 2
        assert sum(r.spec_correct_drafts_histogram) == r.spec_verify_ct
        assert sum(i * h for i, h in enumerate(r.spec_correct_drafts_histogram)) == r.spec_num_correct_drafts
        assert 1 <= len(r.spec_correct_drafts_histogram) <= 3 and r.spec_correct_drafts_histogram[-1] > 0
    c = s.counters
    assert c.spec_forward_ct == sum(r.spec_verify_ct for r in reqs)
    assert s.avg_spec_accept_length() == pytest.approx(33 / c.spec_forward_ct)
    s.flush()
    assert s.avg_spec_accept_length() is None
    assert s.plan_step() is None


def _served(s: Scheduler, rid: str, ids: list[int]) -> int:
    """Run one request through the scheduler alone; its cached_tokens."""
    r = s.new_request(rid, ids, None, 2, True)
    s.submit(r)
    while s.busy:
        s.plan_step()
        s.commit_step()
    return r.cached_tokens


def test_a_shared_prefix_is_served_from_cache_in_whole_blocks() -> None:
    assert PREFIX_BLOCK_TOKENS == 16
    prefix = list(range(1000, 1040))  # 40 ids: two whole blocks (32) and 8 left over
    s = Scheduler(Knobs(), 4, None)
    assert _served(s, "a", prefix + [1, 2, 3]) == 0  # nothing cached yet
    assert _served(s, "b", prefix + [7, 8, 9]) == 32  # 40 shared ids, of which 2 whole blocks
    assert _served(s, "c", prefix[:16] + [5] * 30) == 16  # one block shared
    assert _served(s, "d", [5] + prefix) == 0  # the same ids shifted by one share no leading block
    assert _served(s, "e", list(range(1000, 1020))) == 16  # a 20-id prompt inside a cached one: its whole block
    assert _served(s, "g", list(range(1000, 1016))) == 15  # all of it cached: the last id is computed again
    s.flush()
    assert _served(s, "f", prefix + [7, 8, 9]) == 0
    off = Scheduler(Knobs(radix_cache=False), 4, None)
    _served(off, "a", prefix + [1])
    assert _served(off, "b", prefix + [2]) == 0


def test_prefix_cache_hits_after_repeat_and_flush_clears() -> None:
    s = Scheduler(Knobs(), 4, None)
    for _ in range(2):
        r = s.new_request("a", [1, 2, 3, 4], None, 2, True)
        s.submit(r)
        while s.busy:
            s.plan_step()
            s.commit_step()
    assert r.cached_tokens == 3
    s.flush()
    r2 = s.new_request("b", [1, 2, 3, 4], None, 2, True)
    s.submit(r2)
    s.plan_step()
    assert r2.cached_tokens == 0


def test_knob_errors() -> None:
    with pytest.raises(KnobError, match="unknown knob"):
        Knobs.from_mapping({"speed": 1})
    with pytest.raises(KnobError, match="accept_probs"):
        Knobs.from_mapping({"accept_probs": [1.5]})
    with pytest.raises(KnobError, match="crash_after_requests"):
        Knobs.from_mapping({"crash_after_requests": "two"})
    assert Knobs.from_mapping(None) == Knobs()
    assert Knobs.from_mapping({"time_scale": 0, "accept_probs": [0.9]}).accept_probs == (0.9,)


def test_category_acceptance_is_the_declared_one_per_request() -> None:
    # by construction: the category named by the request's header picks its own probabilities; others use
    # accept_probs; a dropped MTP head still accepts nothing in any category
    from cluster.sim.model import Scheduler, accept_probs_for
    from cluster.engines.sim_launch import SpecParams
    from cluster.config.sim_knobs import Knobs

    knobs = Knobs(accept_probs=(0.5,), category_accept_probs={"code": (1.0,), "chat": (0.0,)})
    sched = Scheduler(knobs, 8, SpecParams("EAGLE", 3, 1, 4))
    reqs = {c: sched.new_request(f"r-{c}", [1, 2, 3], None, 41, True, c) for c in ("code", "chat", None)}
    assert reqs["code"].probs == (1.0, 1.0, 1.0) and reqs["chat"].probs == (0.0, 0.0, 0.0)
    assert reqs[None].probs == (0.5, 0.5, 0.5)
    for r in reqs.values():
        sched.submit(r)
    while sched.busy:
        sched.plan_step()
        sched.commit_step()
    # code: every verify step accepts all 3 drafts (4 tokens); chat: none (1 token)
    assert reqs["code"].spec_verify_ct == 10 and reqs["chat"].spec_verify_ct == 40
    assert accept_probs_for(Knobs(mtp_absent=True, category_accept_probs={"code": (1.0,)}), 2, "code") == (0.0, 0.0)
