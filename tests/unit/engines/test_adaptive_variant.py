"""Adaptive speculation as a variant: the spec block, SGLang's config format written from a depth schedule, the argv,
the simulator switching depth by running batch size, its /server_info, the plan refusal and the run's check."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cluster.config.experiment import ExperimentSpec
from cluster.config.loader import load_spec
from cluster.config.sim_knobs import Knobs
from cluster.engines.flagcheck import check_launch_flags
from cluster.engines.registry import get_engine
from cluster.engines.sglang_adaptive import (AdaptiveBucket, adaptive_not_on, bucket_for, buckets_from_schedule,
                                             config_json, parse_config)
from cluster.engines.sim_launch import LaunchError, build_parser, resolve_args
from cluster.errors import PreflightError, UserError
from cluster.plan.runs import expand_variants, make_plan
from cluster.sim.model import Scheduler

REPO = Path(__file__).resolve().parents[3]


def _spec(speculative: dict[str, Any], tmp_path: Path) -> ExperimentSpec:
    return ExperimentSpec.model_validate({
        "name": "a", "model": {"path": "sim://m", "engine": "sim", "tp": 1},
        "server": {"args": {"max-running-requests": 8}},
        "variants": [{"name": "baseline"}, {"name": "nextn", "speculative": {"num_steps": [1, 2]}},
                     {"name": "adaptive", "speculative": speculative}],
        "workloads": [{"name": "w", "input_tokens": 8, "output_tokens": 4, "num_requests": 2}],
        "load": {"concurrency": [1]}, "output": str(tmp_path / "results")})


def test_a_schedule_is_written_in_sglangs_format() -> None:
    text = config_json(buckets_from_schedule([(8, 1), (1, 3), (64, 0)]))
    assert json.loads(text) == {"1": {"candidate_steps": [3]}, "8": {"candidate_steps": [1]},
                                "64": {"candidate_steps": [0]}}
    # the lowest measured load opens the first bucket at 1: a batch below every measured load gets its depth
    assert json.loads(config_json(buckets_from_schedule([(4, 2), (16, 1)]))) == {
        "1": {"candidate_steps": [2]}, "16": {"candidate_steps": [1]}}


def test_buckets_route_as_sglangs_find_closest_bs() -> None:
    buckets = parse_config({"8": {"candidate_steps": [1]}, "1": {"candidate_steps": [3, 2]}, "note": "x"})
    assert buckets == [AdaptiveBucket(1, (2, 3)), AdaptiveBucket(8, (1,))]
    assert [bucket_for(buckets, b).min_batch for b in (0, 1, 7, 8, 100)] == [1, 1, 1, 8, 8]


@pytest.mark.parametrize("doc,words", [({"x": 1}, "at least one integer-string BS key"),
                                       ({"1": {"candidate_steps": []}}, "BS 1: candidate_steps must be"),
                                       ({"1": {"candidate_steps": [-1]}}, "non-negative ints"), ([1], "not an object")])
def test_a_config_sglang_would_refuse_is_refused(doc: Any, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_config(doc)


def test_the_spec_block_is_strict(tmp_path: Path) -> None:
    for bad in ({"adaptive": {}}, {"adaptive": {"file": "a.json", "experiment": "e"}},
                {"adaptive": {"file": "a.json", "buckets": 1}}, {"adaptive": {"file": "a.json", "root": "r"}},
                {"num_steps": [1, 2], "adaptive": {"file": "a.json"}}):
        with pytest.raises(Exception) as info:
            _spec(bad, tmp_path)
        assert "adaptive" in str(info.value) or "num_steps" in str(info.value)


def test_the_argv_gets_sglangs_flags_and_fixed_depths_keep_their_run_keys(tmp_path: Path) -> None:
    spec = _spec({"num_steps": 2, "adaptive": {"experiment": "earlier", "workload": "w"}}, tmp_path)
    by_name = {v.name: v for v in expand_variants(spec)}
    argv = get_engine("sglang").server_args(by_name["adaptive"], "127.0.0.1", 1, None)
    path = f"{tmp_path}/results/earlier/adaptive-config-w.json"
    assert argv[argv.index("--speculative-adaptive-config") + 1] == path and "--speculative-adaptive" in argv
    assert "--speculative-adaptive" not in get_engine("sglang").server_args(by_name["nextn-2"], "h", 1, None)
    assert "adaptive_config" not in json.dumps(by_name["nextn-2"].identity())
    assert "adaptive_config" in json.dumps(by_name["adaptive"].identity())


def _sim(argv: list[str]) -> tuple[dict[str, Any], Any]:
    ns = build_parser().parse_args(["--model-path", "sim://m", "--speculative-algorithm", "NEXTN", *argv])
    return resolve_args(ns, Knobs())


def test_the_simulator_switches_depth_by_running_batch(tmp_path: Path) -> None:
    cfg = tmp_path / "a.json"
    cfg.write_text(config_json(buckets_from_schedule([(1, 3), (4, 1)])))
    args, spec = _sim(["--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                       "--speculative-adaptive", "--speculative-adaptive-config", str(cfg)])
    assert args["speculative_adaptive"] is True and args["speculative_adaptive_config"] == str(cfg)
    sched = Scheduler(Knobs(accept_probs=[0.9, 0.8, 0.7]), 8, spec)
    depths = {}
    for b in (1, 3, 4, 8):
        sched.running = [object()] * b  # type: ignore[list-item]
        step = sched.step_spec()
        depths[b] = (step.num_steps, step.num_draft_tokens) if step else None
    assert depths == {1: (3, 4), 3: (3, 4), 4: (1, 2), 8: (1, 2)}
    assert len(sched.probs) == 3  # drawn for the deepest candidate, cut to each step's depth


def test_depth_zero_is_a_plain_decode_that_still_counts_a_verify(tmp_path: Path) -> None:
    """SGLang's depth 0 runs a trivial one-token verify: spec_verify_ct counts it, so acceptance stays tokens per
    verify step (the first try counted no verify there and reported 12.7 tokens per step at c32)."""
    from cluster.sim.model import step_time_ms

    cfg = tmp_path / "a.json"
    cfg.write_text(config_json(buckets_from_schedule([(1, 1), (2, 0)])))
    knobs = Knobs(accept_probs=[1.0])
    _, spec = _sim(["--speculative-num-steps", "1", "--speculative-adaptive", "--speculative-adaptive-config",
                    str(cfg)])
    sched = Scheduler(knobs, 8, spec)
    for i in range(2):
        sched.submit(sched.new_request(f"r{i}", [1, 2, 3, i], None, 4, True))
    sched.plan_step()
    sched.commit_step()  # prefill: one token each
    step = sched.step_spec()
    assert step is not None and (step.num_steps, step.num_draft_tokens) == (0, 1)
    assert sched.plan_step() == step_time_ms(knobs, 2, 0, None)  # no draft or verify cost beyond a decode
    sched.commit_step()
    reqs = sched.running
    assert [(r.generated, r.spec_verify_ct, r.spec_num_correct_drafts) for r in reqs] == [(2, 1, 0), (2, 1, 0)]


def test_the_simulator_turns_adaptive_off_as_sglang_does(tmp_path: Path) -> None:
    cfg = tmp_path / "a.json"
    cfg.write_text('{"1": {"candidate_steps": [1]}}')
    args, spec = _sim(["--speculative-num-steps", "1", "--speculative-eagle-topk", "2",
                       "--speculative-num-draft-tokens", "3", "--speculative-adaptive",
                       "--speculative-adaptive-config", str(cfg)])
    assert args["speculative_adaptive"] is False and spec.adaptive == ()
    with pytest.raises(LaunchError, match=r"--speculative-num-steps=2 is not in the adaptive config candidate_steps"):
        _sim(["--speculative-num-steps", "2", "--speculative-adaptive", "--speculative-adaptive-config", str(cfg)])


def test_plan_refuses_what_sglang_would_turn_off(tmp_path: Path) -> None:
    cfg = tmp_path / "a.json"
    cfg.write_text('{"1": {"candidate_steps": [1]}}')
    ok = _spec({"num_steps": 1, "adaptive": {"file": str(cfg)}}, tmp_path)
    assert check_launch_flags(ok, expand_variants(ok), "python", on_node=False) == []
    bad = _spec({"num_steps": 1, "eagle_topk": 2, "adaptive": {"file": str(cfg)}}, tmp_path)
    with pytest.raises(PreflightError) as info:
        check_launch_flags(bad, expand_variants(bad), "python", on_node=False)
    assert info.value.field == "variants.2.speculative.adaptive"
    assert "adaptive_unsupported_reason: speculative_eagle_topk=2 (only topk=1 is supported)" in str(info.value)


def test_the_run_is_invalid_unless_server_info_shows_adaptive_on() -> None:
    assert adaptive_not_on({"speculative_adaptive": True}) is None
    off = adaptive_not_on({"speculative_adaptive": False, "speculative_num_steps": 3})
    assert off is not None and "resolved speculative_adaptive=False" in off and "static depth 3" in off
    assert "has no speculative_adaptive" in (adaptive_not_on({}) or "")


def test_the_shipped_adaptive_experiment_loads_and_plans() -> None:
    spec = load_spec(REPO / "experiments" / "adaptive-sim.yaml")
    adaptive = [v for v in expand_variants(spec) if v.speculative and v.speculative.adaptive_config]
    assert [v.name for v in adaptive] == ["adaptive"]
    assert adaptive[0].speculative.adaptive_config == "results/adaptive-sim-depths/adaptive-config.json"
    assert make_plan(spec)


def test_an_experiment_source_without_results_is_refused_before_any_server(tmp_path: Path) -> None:
    from cluster.analysis.adaptive_config import adaptive_configs

    spec = _spec({"num_steps": 1, "adaptive": {"experiment": "never-ran"}}, tmp_path)
    with pytest.raises(UserError) as info:
        adaptive_configs(spec, spec.output, tmp_path)
    assert info.value.field == "variants.2.speculative.adaptive.experiment" and "never-ran" in str(info.value)


def test_a_config_file_sglang_could_not_read_is_refused_naming_file_and_field(tmp_path: Path) -> None:
    from cluster.analysis.adaptive_config import adaptive_configs

    missing = _spec({"num_steps": 1, "adaptive": {"file": str(tmp_path / "nope.json")}}, tmp_path)
    with pytest.raises(UserError) as info:
        adaptive_configs(missing, missing.output, tmp_path)
    assert info.value.field == "variants.2.speculative.adaptive.file" and "nope.json" in str(info.value)
    bad = tmp_path / "bad.json"
    bad.write_text('{"1": {"candidate_steps": [1.5]}}')
    spec = _spec({"num_steps": 1, "adaptive": {"file": str(bad)}}, tmp_path)
    with pytest.raises(PreflightError) as info2:
        adaptive_configs(spec, spec.output, tmp_path)
    assert info2.value.file == str(bad) and "BS 1: candidate_steps must be a list of non-negative ints" in str(info2.value)
