"""SGLang's /server_info as sglbench reads it: the type check of the fields it reads, the running-request cap the
scheduler resolved (and the server log's Mamba state-slot line that lowers it), the few values a run records."""

from __future__ import annotations

import re
from typing import Any, Mapping, Optional, Sequence

from cluster.engines.answer_fields import as_object, count_field, list_field, str_field
from cluster.input_files import JsonObject, JsonValue
from cluster.engines.base import ConcurrencyCap

SERVER_INFO_KEYS = ("version", "internal_states", "max_running_requests", "speculative_algorithm")
"""Top-level /server_info keys this tool reads (the resolved server args are the rest of the document)."""


def server_info_summary(doc: JsonObject) -> dict[str, JsonValue]:
    """The few resolved values a run records up front, from a /server_info document (missing → None)."""
    states = doc.get("internal_states")
    first = states[0] if isinstance(states, list) and states and isinstance(states[0], dict) else {}
    return {
        "version": doc.get("version"),
        "max_running_requests": doc.get("max_running_requests"),
        "effective_max_running_requests_per_dp": first.get("effective_max_running_requests_per_dp"),
        "speculative_algorithm": doc.get("speculative_algorithm"),
        "speculative_num_steps": doc.get("speculative_num_steps"),
        "speculative_eagle_topk": doc.get("speculative_eagle_topk"),
        "speculative_num_draft_tokens": doc.get("speculative_num_draft_tokens"),
        "attention_backend": doc.get("attention_backend"),
        "kv_cache_dtype": doc.get("kv_cache_dtype"),
        # under attention DP each rank reports its own figure (SGLang issue #34743): rank 0's is not the server's
        "avg_spec_accept_length": (first.get("avg_spec_accept_length")
                                   if isinstance(states, list) and len(states) == 1 else None),
    }


SPEC_MAX_RUNNING_REQUESTS = 48
"""What SGLang 0.5.23 sets max_running_requests to for every speculative algorithm when the flag is unset
(sglang/srt/arg_groups/speculative_hook.py: _handle_eagle_family (EAGLE, EAGLE3, NEXTN, STANDALONE), _handle_ngram,
_handle_dflash, _handle_dspark, _handle_frozen_kv_mtp: "Max running requests is reset to 48 for speculative
decoding"; there is no 48 in server_args.py). Seen for real on the CPU tier: /server_info max_running_requests 48."""

EFFECTIVE_CAP_KEY = "effective_max_running_requests_per_dp"
RESOLVED_CAP_KEY = "effective_max_running_requests"
"""Key under which resolved_args() records the scheduler's cap (summed over DP ranks) beside the server args."""


def check_server_info(doc: JsonValue) -> JsonObject:
    """A /server_info document whose fields sglbench reads have SGLang 0.5.23's types (a MalformedAnswerError
    names the first that does not): version a string, the running-request caps and speculative step counts
    non-negative integers or null, internal_states a list of objects."""
    w = "/server_info"
    d = as_object(doc, w, null_ok=False)
    str_field(d, "version", w)
    str_field(d, "speculative_algorithm", w)
    for key in ("max_running_requests", "speculative_num_steps", "speculative_eagle_topk",
                "speculative_num_draft_tokens"):
        count_field(d, key, w)
    for i, state in enumerate(list_field(d, "internal_states", w) or []):
        count_field(as_object(state, f"{w}.internal_states[{i}]", null_ok=False), EFFECTIVE_CAP_KEY,
                    f"{w}.internal_states[{i}]")
    return d


def _positive_int(v: Any) -> Optional[int]:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def concurrency_cap_from_server_info(doc: Any) -> Optional[ConcurrencyCap]:
    """The server's resolved cap on running requests from a /server_info document.

    The scheduler's own figure comes first: `internal_states[i].effective_max_running_requests_per_dp` (set from
    `scheduler.max_running_requests`, managers/scheduler_components/internal_state.py), summed over the DP ranks.
    It is what the scheduler enforces, also when the top-level `max_running_requests` is None (unset, no
    speculative decoding: then it comes from the KV pool, `kv_cache_configurator.resolve_max_num_reqs`, e.g. 2048).
    Without internal_states (older releases) the top-level max_running_requests is used."""
    if not isinstance(doc, Mapping):
        return None
    declared = _positive_int(doc.get("max_running_requests"))
    states = doc.get("internal_states")
    if isinstance(states, list) and states:
        per_rank = [_positive_int(st.get(EFFECTIVE_CAP_KEY)) if isinstance(st, Mapping) else None for st in states]
        if all(x is not None for x in per_rank):
            vals = [x for x in per_rank if x is not None]
            where = (f"server_info.internal_states[0].{EFFECTIVE_CAP_KEY}" if len(vals) == 1
                     else f"sum of server_info.internal_states[0..{len(vals) - 1}].{EFFECTIVE_CAP_KEY}")
            return ConcurrencyCap(sum(vals), where, declared)
    if declared is not None:
        return ConcurrencyCap(declared, "server_info.max_running_requests", declared)
    return None


MAMBA_CAP_LINE = re.compile(
    r"max_running_requests is capped to (\d+) by the mamba state cache \(max_mamba_cache_size=(\d+), (\d+) state "
    r"slots per request\)")
"""SGLang 0.5.23's warning when hybrid models' Mamba state slots lower the running-request cap
(mem_cache/kv_cache_configurator.py `resolve_max_num_reqs`: "max_running_requests is capped to %d by the mamba state
cache (max_mamba_cache_size=%d, %d state slots per request)"). Speculative decoding needs several slots per request
(sglang#36889), so a NEXTN variant can be capped where its baseline is not; sglang#38846: "every N=16/24/32 number
measured the queue"."""


def mamba_cap_from_log(lines: Sequence[str]) -> Optional[tuple[int, str]]:
    """(cap, cause) from the last state-slot cap line in the server log, or None."""
    found: Optional[tuple[int, str]] = None
    for line in lines:
        m = MAMBA_CAP_LINE.search(line)
        if m:
            cap, pool, ratio = (int(x) for x in m.groups())
            found = (cap, f"Mamba state slots: max_mamba_cache_size={pool}, {ratio} slots per request "
                          f"(SGLang's log: 'capped to {cap} by the mamba state cache')")
    return found
