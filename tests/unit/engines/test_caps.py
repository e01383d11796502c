"""The resolved running-request cap from real SGLang 0.5.23 /server_info answers (tests/data/sglang_0.5.23_cpu)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cluster.engines.base import ConcurrencyCap
from cluster.engines.sglang import SGLangEngine
from cluster.engines.sglang_server_info import (RESOLVED_CAP_KEY, SPEC_MAX_RUNNING_REQUESTS,
                                                concurrency_cap_from_server_info)
from cluster.engines.vllm import VLLMEngine

DATA = Path(__file__).resolve().parents[2] / "data" / "sglang_0.5.23_cpu"


def real(tag: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((DATA / f"server_info_{tag}.json").read_text())
    return doc


@pytest.mark.parametrize("tag", ["echo_nextn1", "rand_nextn3"])
def test_real_nextn_server_resolves_the_speculative_cap_of_48(tag: str) -> None:
    doc = real(tag)
    assert "--max-running-requests" not in doc["launch_command"] and doc["speculative_algorithm"] == "EAGLE"
    cap = SGLangEngine().concurrency_cap({"server_info": doc})
    assert cap == ConcurrencyCap(SPEC_MAX_RUNNING_REQUESTS, "server_info.internal_states[0]."
                                 "effective_max_running_requests_per_dp", declared=48)


def test_real_baseline_has_no_top_level_cap_but_the_scheduler_has_one() -> None:
    doc = real("echo_baseline")
    assert doc["max_running_requests"] is None and doc["max_total_num_tokens"] == 8192
    cap = concurrency_cap_from_server_info(doc)
    # kv_cache_configurator.resolve_max_num_reqs: min(clamp(8192 / ctx * 512, 2048, 4096), 8192 // 2) = 2048
    assert cap is not None and (cap.value, cap.declared) == (2048, None)
    assert cap.source.endswith("internal_states[0].effective_max_running_requests_per_dp")


def test_dp_ranks_are_summed_and_old_releases_fall_back_to_the_top_level() -> None:
    two = {"max_running_requests": 96, "internal_states": [{"effective_max_running_requests_per_dp": 48}] * 2}
    cap = concurrency_cap_from_server_info(two)
    assert cap is not None and cap.value == 96 and cap.source.startswith("sum of server_info.internal_states[0..1]")
    old = {"max_running_requests": 64}
    assert concurrency_cap_from_server_info(old) == ConcurrencyCap(64, "server_info.max_running_requests", 64)
    for bad in (None, [], {}, {"max_running_requests": True}, {"internal_states": [{"x": 1}]}):
        assert concurrency_cap_from_server_info(bad) is None


def test_resolved_args_carry_the_cap_and_drop_per_launch_state() -> None:
    args = SGLangEngine().resolved_args({"server_info": real("echo_nextn1")})
    assert args[RESOLVED_CAP_KEY] == 48 and args["max_running_requests"] == 48
    assert "internal_states" not in args and "launch_command" not in args


def test_engines_without_server_info_report_no_cap() -> None:
    assert VLLMEngine().concurrency_cap({"version": {"version": "0.11"}}) is None
    assert (SGLangEngine.running_gauge, SGLangEngine.queue_gauge) == ("sglang:num_running_reqs",
                                                                      "sglang:num_queue_reqs")


# SGLang 0.5.23's own format string (mem_cache/kv_cache_configurator.py resolve_max_num_reqs), filled as it logs it
MAMBA_FMT = ("max_running_requests is capped to %d by the mamba state cache (max_mamba_cache_size=%d, %d state "
             "slots per request). To raise it: increase --mamba-full-memory-ratio or --max-mamba-cache-size, or halve "
             "the state size with --mamba-ssm-dtype bfloat16.")


def test_mamba_state_slot_cap_from_the_log_lowers_and_explains_the_cap() -> None:
    """Issue 15 item 2: a hybrid model's state slots cap running requests and SGLang says so only in its log."""
    from cluster.engines.sglang_server_info import mamba_cap_from_log

    line = "[2026-11-30 10:00:01 TP0] WARNING kv_cache_configurator.py:3141: " + MAMBA_FMT % (15, 80, 5)
    assert mamba_cap_from_log(["noise", line]) == (15, mamba_cap_from_log([line])[1])  # type: ignore[index]
    value, cause = mamba_cap_from_log([line]) or (0, "")
    assert value == 15 and "5 slots per request" in cause and "max_mamba_cache_size=80" in cause
    # an older release's server_info without the scheduler's figure: the log is the only cap
    old = SGLangEngine().concurrency_cap({"server_info": {"max_running_requests": 64}}, [line])
    assert old == ConcurrencyCap(15, "server log: mamba state cache line", 64, cause)
    # 0.5.23 reports the lowered figure in internal_states too: keep that source, add the cause
    new = {"max_running_requests": 64, "internal_states": [{"effective_max_running_requests_per_dp": 15}]}
    cap = SGLangEngine().concurrency_cap({"server_info": new}, [line])
    assert cap is not None and (cap.value, cap.cause) == (15, cause) and cap.source.startswith("server_info.")
    assert SGLangEngine().concurrency_cap({"server_info": new}) == ConcurrencyCap(
        15, "server_info.internal_states[0].effective_max_running_requests_per_dp", 64)
    assert SGLangEngine.cap_log_marker is not None and SGLangEngine.cap_log_marker in line
