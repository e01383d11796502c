"""Fairness rules for comparing SGLang server variants, and the resolved-arg differences between two variants.

Pure: looks only at resolved variants (declared args) and at /server_info documents already fetched. SGLang 0.5.23
applies its launch rules (the 48-request cap for speculative runs, the FP8 KV default from the checkpoint, the
attention back end NEXTN picks) in a resolution step that needs a GPU, so the pre-launch rules are this tool's own;
after launch, resolved_cap_findings compares the caps the servers really resolved.
"""

from __future__ import annotations

import fnmatch
from typing import Any, Mapping, Optional, Sequence

from cluster.input_files import JsonObject
from cluster.engines.registry import sglang_argv_engines, speaks_sglang_argv
from cluster.plan.findings import Finding, FindingCollector, Level, format_findings
from cluster.plan.model_rules import ModelFacts, backend_rules, cross_variant_cache_rule, hybrid_cache_rules
from cluster.kernel.runs import ResolvedVariant

__all__ = ["Finding", "Level", "ModelFacts", "check_fairness", "format_findings", "resolved_cap_findings",
           "resolved_differences"]

SPEC_CAP_DEFAULT = 48
"""max_running_requests SGLang silently sets for EAGLE-family and NGRAM runs when the flag is unset."""

ALWAYS_DIFFERENT = (
    "host",
    "*_host",
    "port",
    "*_port",
    "port_*",
    "dist_init_addr",
    "launch_command",
    "startup_time",
    "random_seed",
    "internal_states",
    "kv_events",
    "*_ipc_name",
    "crash_dump_folder",
    "*_log_dir",
)
"""Resolved /server_info keys that differ between any two launches (addresses, ports, per-launch state).
random_seed: SGLang draws one per launch when unset, and greedy decoding does not use it."""


def _norm_args(args: JsonObject) -> dict[str, Any]:
    return {k.replace("_", "-"): v for k, v in args.items()}


def _is_set(value: Any) -> bool:
    return value is not None and value is not False and value != ""


def _graph_max_bs(args: JsonObject) -> Any:
    for key in ("cuda-graph-max-bs-decode", "cuda-graph-max-bs"):
        if _is_set(args.get(key)):
            return args[key]
    return None


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or a == b and type(a) is type(b)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, str) and isinstance(b, str):
        return a.strip().lower() == b.strip().lower()
    return bool(a == b)


def _kv_quant_for(v: ResolvedVariant, table: Optional[Mapping[str, Optional[str]]]) -> Optional[str]:
    if not table:
        return None
    return table.get(v.name) or table.get(v.model_path)


def check_fairness(
    variants: Sequence[ResolvedVariant],
    checkpoint_kv_quant: Optional[Mapping[str, Optional[str]]] = None,
    *,
    facts: Optional[Mapping[str, ModelFacts]] = None,
    gpu_sm: Optional[int] = None,
    version: Optional[str] = None,
) -> list[Finding]:
    """Findings for the variants of one comparison (errors first, then in variant order).

    checkpoint_kv_quant maps a model path (or a variant name) to the checkpoint's declared
    `kv_cache_quant_algo` (e.g. "FP8"), as the checkpoint probe reads it; None when it declares none.
    facts maps a model path to what the probe says about it (hybrid, MoE, NVFP4 families; absent: not probed);
    gpu_sm is the node's compute capability ×10 (120 for SM120; None: not known here); version is the SGLang
    release the argv is built for (flag spellings and per-release traps)."""
    from cluster.plan.launch_notes import launch_note_rules

    chk = FindingCollector()
    # engines whose argv is SGLang's (the simulator takes SGLang's flags, so it gets the same rules, as warnings)
    checked = [v for v in variants if speaks_sglang_argv(v.engine)]
    args_of = {v.name: _norm_args(v.args) for v in checked}
    for v in checked:
        _single_variant_rules(chk, v, args_of[v.name], _kv_quant_for(v, checkpoint_kv_quant))
        mf = (facts or {}).get(v.model_path, ModelFacts())
        hybrid_cache_rules(chk, v, args_of[v.name], mf, version)
        backend_rules(chk, v, args_of[v.name], mf, gpu_sm)
        if v.engine == "sglang":
            launch_note_rules(chk, v, args_of[v.name], mf, gpu_sm, version)
    for engine in sglang_argv_engines():
        group = [v for v in checked if v.engine == engine]
        if len(group) > 1:
            _cross_variant_rules(chk, group, args_of)
            cross_variant_cache_rule(chk, group, args_of, version)
    order = {v.name: i for i, v in enumerate(variants)}
    return sorted(chk.findings, key=lambda f: (f.level != "error", order.get(f.variant, 0)))


def _single_variant_rules(chk: FindingCollector, v: ResolvedVariant, args: JsonObject,
                          kv_quant: Optional[str]) -> None:
    from cluster.engines.sglang import SPECULATIVE_ALGORITHMS, canonical_key

    for key in args:
        try:
            canonical_key(key)
        except ValueError as e:
            chk.add(v, "error", "full-flag-names", str(e))
    algo = v.speculative.algorithm if v.speculative is not None else args.get("speculative-algorithm")
    if _is_set(algo) and str(algo).upper() not in SPECULATIVE_ALGORITHMS and str(algo).upper() != "MTP":
        chk.add(
            v, "error", "speculative-algorithm",
            f"speculative algorithm {algo!r} is not one SGLang knows ({', '.join(SPECULATIVE_ALGORITHMS)}); "
            "built-in MTP heads are served with NEXTN (the spec's MTP is launched as NEXTN)",
        )
    spec_in_args = _is_set(args.get("speculative-algorithm"))
    speculative = v.speculative is not None or spec_in_args
    mrr = args.get("max-running-requests")
    if not _is_set(mrr):
        if speculative:
            chk.add(
                v, "error", "max-running-requests",
                f"speculative variant without --max-running-requests: SGLang silently caps it at "
                f"{SPEC_CAP_DEFAULT}; set it explicitly and equal across the variants",
            )
        else:
            chk.add(
                v, "warning", "max-running-requests",
                "--max-running-requests is not set: the resolved value depends on GPU memory and differs from a "
                f"speculative variant's silent cap of {SPEC_CAP_DEFAULT}; set it explicitly",
            )
    if spec_in_args and v.speculative is None:
        for key in ("speculative-num-steps", "speculative-eagle-topk", "speculative-num-draft-tokens"):
            if not _is_set(args.get(key)):
                chk.add(
                    v, "error", "speculative-params",
                    f"speculative args without --{key}: pass steps, topk and draft tokens together "
                    "(or use the variant's speculative block)",
                )
    kv = args.get("kv-cache-dtype")
    kv_auto = not _is_set(kv) or str(kv).lower() == "auto"
    if kv_quant is not None and "FP8" in str(kv_quant).upper() and kv_auto:
        chk.add(
            v, "error", "kv-cache-dtype",
            f"the checkpoint declares kv_cache_quant_algo {kv_quant!r}, so --kv-cache-dtype "
            f"{'auto' if _is_set(kv) else 'unset (auto)'} turns the KV cache to FP8; pin it (e.g. bf16 or fp8_e4m3)",
        )
    elif not _is_set(kv):
        chk.add(v, "warning", "kv-cache-dtype", "--kv-cache-dtype is not set: 'auto' follows the checkpoint; pin it")
    pinned = _is_set(args.get("attention-backend")) or (
        _is_set(args.get("prefill-attention-backend")) and _is_set(args.get("decode-attention-backend"))
    )
    if not pinned:
        chk.add(
            v, "warning", "attention-backend",
            "--attention-backend is not pinned: the resolved back end depends on the GPU and enabling NEXTN has "
            "silently switched it (SGLang #39515)",
        )


def _cross_variant_rules(chk: FindingCollector, group: Sequence[ResolvedVariant],
                         args_of: Mapping[str, JsonObject]) -> None:
    ref = next((v for v in group if v.is_baseline), group[0])
    ref_args = args_of[ref.name]
    rules: tuple[tuple[str, Level, Any], ...] = (
        ("max-running-requests", "error", lambda a: a.get("max-running-requests")),
        ("cuda-graph-max-bs", "warning", _graph_max_bs),
        ("kv-cache-dtype", "warning", lambda a: a.get("kv-cache-dtype")),
        ("attention-backend", "warning", lambda a: a.get("attention-backend")),
    )
    for rule, level, get in rules:
        want = get(ref_args)
        for v in group:
            if v is ref:
                continue
            got = get(args_of[v.name])
            if not (_is_set(want) or _is_set(got)) or _same(got, want):
                continue
            chk.add(
                v, level, rule,
                f"--{rule} is {got!r} here but {want!r} on {ref.name!r}: compared variants must match",
            )


def resolved_differences(
    a: JsonObject, b: JsonObject, intended: set[str]
) -> dict[str, tuple[Any, Any]]:
    """Resolved server args (/server_info top level) that differ between two variants, besides the intended ones.

    `intended` holds keys or glob patterns (e.g. "speculative_*"); keys that differ between any two launches
    (ports, hosts, per-launch state, see ALWAYS_DIFFERENT) are ignored. A key missing on one side reads as None.
    """
    skip = tuple(intended) + ALWAYS_DIFFERENT
    out: dict[str, tuple[Any, Any]] = {}
    for key in sorted(set(a) | set(b)):
        if any(fnmatch.fnmatchcase(key, pat) for pat in skip):
            continue
        va, vb = a.get(key), b.get(key)
        if va is None and vb is None:
            continue
        if va is None or vb is None or not _same(va, vb):
            out[key] = (va, vb)
    return out


def resolved_cap_findings(variants: Sequence[ResolvedVariant], resolved_args: Mapping[str, JsonObject]
                          ) -> list[Finding]:
    """Compare the running-request caps the servers resolved (SGLang's resolved_args key
    `effective_max_running_requests`, from /server_info internal_states), not only the declared flags: an unset
    --max-running-requests resolves to 48 under speculative decoding and to a KV-pool figure (e.g. 2048) without it.
    `resolved_args` maps a variant name to its stored resolved args; variants without a figure are skipped."""
    from cluster.engines.sglang_server_info import RESOLVED_CAP_KEY

    chk = FindingCollector()
    group = [v for v in variants if speaks_sglang_argv(v.engine)
             and isinstance((resolved_args.get(v.name) or {}).get(RESOLVED_CAP_KEY), int)]
    if len(group) < 2:
        return []
    ref = next((v for v in group if v.is_baseline), group[0])
    want = resolved_args[ref.name][RESOLVED_CAP_KEY]
    for v in group:
        got = resolved_args[v.name][RESOLVED_CAP_KEY]
        if v is ref or got == want:
            continue
        declared = (resolved_args[v.name].get("max_running_requests"),
                    resolved_args[ref.name].get("max_running_requests"))
        chk.add(v, "error", "resolved-max-running-requests",
                f"the server resolved its running-request cap to {got} here but {want} on {ref.name!r} "
                f"(declared max_running_requests {declared[0]!r} vs {declared[1]!r}; read from server_info."
                f"internal_states[*].effective_max_running_requests_per_dp): compared variants must run the same cap")
    return chk.findings
