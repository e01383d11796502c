"""Simulator argv resolution (SGLang 0.5.23 launch rules) and wire rendering, without starting a server."""

from __future__ import annotations

import json

import pytest

from cluster.engines.sim_launch import LaunchError, SpecParams, build_parser, resolve_args
from cluster.sim.model import Scheduler
from cluster.config.sim_knobs import Knobs
from cluster.sim.wire import ChunkWriter
from cluster.engines.streams import SGLangNativeParser


def _resolve(argv: list[str]) -> tuple[dict, object, list[str]]:
    ns, unknown = build_parser().parse_known_args(["--model-path", "m", *argv])
    args, spec = resolve_args(ns, Knobs())
    return args, spec, unknown


def test_nextn_resolves_to_eagle_with_auto_triple_and_cap_48() -> None:
    args, spec, _ = _resolve(["--speculative-algorithm", "nextn"])
    assert args["speculative_algorithm"] == "EAGLE"
    assert (args["speculative_num_steps"], args["speculative_eagle_topk"], args["speculative_num_draft_tokens"]) \
        == (3, 1, 4)
    assert args["max_running_requests"] == 48
    assert spec == SpecParams("EAGLE", 3, 1, 4)


def test_topk1_forces_draft_tokens_and_partial_triple_fails() -> None:
    args, _, _ = _resolve(["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "2",
                           "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "7",
                           "--max-running-requests", "64"])
    assert args["speculative_num_draft_tokens"] == 3 and args["max_running_requests"] == 64
    with pytest.raises(LaunchError):
        _resolve(["--speculative-algorithm", "NEXTN", "--speculative-eagle-topk", "1"])


def test_unknown_flags_kept_and_no_abbreviations() -> None:
    args, spec, unknown = _resolve(["--mem-fraction-static", "0.8", "--tp", "8", "--fp4-gemm-backend", "marlin"])
    assert spec is None and args["tp_size"] == 1, "--tp is not expanded (allow_abbrev=False)"
    assert unknown == ["--mem-fraction-static", "0.8", "--tp", "8"]
    assert args["fp4_gemm_runner_backend"] == "marlin" and args["served_model_name"] == "m"


def test_native_chunks_render_valid_json_and_parse() -> None:
    s = Scheduler(Knobs(), 4, None)
    r = s.new_request("rid-1", [5, 6, 7], None, 6, True)
    s.submit(r)
    w = ChunkWriter(r, 0.0, lambda: 1.5, api="native", incremental=False, spec=None)
    p = SGLangNativeParser()
    sent = 0
    total = 0
    while s.busy:
        s.plan_step()
        s.commit_step()
        raw = w.chunk(sent, r.generated, r.finished)
        obj = json.loads(raw[len(b"data: "):-2])
        assert obj["meta_info"]["completion_tokens"] == r.generated == len(obj["output_ids"])
        total += p.feed(raw[len(b"data: "):-2])
        sent = r.generated
    assert total == 6 and obj["meta_info"]["e2e_latency"] == 1.5
    inc = ChunkWriter(r, 0.0, lambda: 1.0, api="native", incremental=True, spec=None)
    assert json.loads(inc.chunk(2, 4, False)[6:-2])["output_ids"] == r.out_ids[2:4]
