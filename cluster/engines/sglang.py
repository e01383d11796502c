"""SGLang adapter: version-aware argv with full flag names only, native and OpenAI requests, gate answers typed.

/server_info parsing lives in sglang_server_info.py."""

from __future__ import annotations

import functools
import json
import re
import subprocess
from typing import Any, Mapping, Optional, Sequence

from cluster.input_files import JsonValue
from cluster.engines.base import (ConcurrencyCap, Engine, FlagParser, HttpRequest, LaunchCommand, PartHistogram,
                                  StreamParser, StreamRequest)
from cluster.engines.answer_invariants import checked_gate_output, counts_answer
from cluster.engines.answer_fields import (MalformedAnswerError, as_object, count_field, finish_field, ids_field,
                                           object_field, str_field)
from cluster.engines.sglang_server_info import (RESOLVED_CAP_KEY, check_server_info, concurrency_cap_from_server_info,
                                                mamba_cap_from_log)
from cluster.engines.server_env import SPEC_V2_ENV
from cluster.engines.sglang_dialect import build_sglang_request, encode_request, render_args
from cluster.engines.sglang_adaptive import ADAPTIVE_FLAG, CONFIG_FLAG
from cluster.engines.streams import OpenAIStreamParser, SGLangNativeParser
from cluster.errors import UserError
from cluster.kernel.gate import GateOutput
from cluster.kernel.runs import ResolvedVariant
from cluster.config.server import ArgValue
from cluster.config.engines import EngineLauncher
from cluster.version import SGLANG_RELEASE

DEFAULT_VERSION = SGLANG_RELEASE
"""The SGLang release this tool's launch commands target when the version is not known otherwise."""

# Release boundaries below were read from the SGLang wheels themselves (sglang/srt/**.py of every release from
# 0.5.1 and 0.5.3 to 0.5.23, 0.5.5.post3 and 0.5.13.post1 included); `python scripts/sglang_release_facts.py WHEEL_DIR`
# re-derives each one from a directory of downloaded wheels and fails where a constant here disagrees.

CUDA_GRAPH_REFACTOR = (0, 5, 14)
"""First release with `--cuda-graph-max-bs-decode` / `--cuda-graph-bs-decode` (server_args.py field
`cuda_graph_max_bs_decode`; absent in 0.5.13.post1). 0.5.14-0.5.19 still take `--cuda-graph-max-bs` as a
`DeprecatedAliasStoreAction`; 0.5.20 dropped the alias, and 0.5.23 rejects that spelling as an ambiguous prefix
(../shared/reference/sglang-0.5.23.md §1.2)."""

SERVER_INFO_RENAME = (0, 5, 6)
"""First release serving /server_info and /model_info (entrypoints/http_server.py; 0.5.5.post3 has only
/get_server_info and /get_model_info). The old names stay as routes through 0.5.23."""

MAMBA_STRATEGY_RENAME = (0, 5, 14)
"""First release spelling the hybrid-model radix-cache strategy `--mamba-radix-cache-strategy` (server_args.py field
`mamba_radix_cache_strategy`; 0.5.23: arg_groups/fields/exec_.py, choices auto/no_buffer/extra_buffer/
extra_buffer_lazy, default auto, resolved in arg_groups/overrides.py `_mamba_radix_cache_resolution`). Earlier
releases spell it `--mamba-scheduler-strategy` (PR #14792); 0.5.14-0.5.19 keep that as a deprecated alias, 0.5.20
dropped it (rename filed as sglang#27418). The old flag itself first appears in 0.5.7. With speculative decoding on
a hybrid model, 0.5.8-0.5.9 turn the radix cache off with only a warning ("Disabling radix cache since speculative
decoding for ... is not supported with radix cache yet"), 0.5.10-0.5.13.post1 raise a ValueError under `no_buffer`
("... is not compatible with radix cache when using --mamba-scheduler-strategy no_buffer"; server_args.py), and
0.5.14 resolves `auto` instead."""

RENAMED_FLAGS: tuple[tuple[str, str, tuple[int, ...]], ...] = (
    ("cuda-graph-max-bs", "cuda-graph-max-bs-decode", CUDA_GRAPH_REFACTOR),
    ("cuda-graph-bs", "cuda-graph-bs-decode", CUDA_GRAPH_REFACTOR),
    ("mamba-scheduler-strategy", "mamba-radix-cache-strategy", MAMBA_STRATEGY_RENAME),
)
"""(old spelling, new spelling, first release with the new one): the spec accepts either, argv gets the release's."""

SPEC_V2_DEFAULT = (0, 5, 11)
"""Releases before this need SGLANG_ENABLE_SPEC_V2=1 for overlap scheduling with speculative decoding: environ.py
declares it `EnvBool(False)` in 0.5.5-0.5.10 and `EnvBool(True)` from 0.5.11; 0.5.20 only warns that it was
removed, 0.5.21 does not contain it (before 0.5.5 it did not exist, so setting it there does nothing)."""

MTP_DRAFT_PATH_BEFORE = (0, 5, 15)
"""Releases before this get `--speculative-draft-model-path <model>` for a built-in MTP head. Every release from
0.5.1 to 0.5.23 sets it by itself only for the architectures it lists (DeepSeek, GLM, Bailing, Mistral, HY, ...;
server_args.py, later arg_groups/speculative_hook.py), never Qwen3.5's; whether an old image fails without it was
reported, not reproduced here, so the path is given where it is the listed architectures' own default (harmless)."""


FLAG_ALIASES = {
    "model": "model-path",
    "tp": "tp-size",
    "tensor-parallel-size": "tp-size",
    "dp": "dp-size",
    "data-parallel-size": "dp-size",
    "ep": "ep-size",
    "expert-parallel-size": "ep-size",
    "speculative-algo": "speculative-algorithm",
    "speculative-draft-model": "speculative-draft-model-path",
    "mem-frac": "mem-fraction-static",
    "disable-radix": "disable-radix-cache",
}
"""Short spellings users copy from recipes → the full flag name this tool always emits (0.5.23 parses the short
ones only by argparse prefix matching, which breaks whenever a new flag shares the prefix)."""

AMBIGUOUS_PREFIXES = {
    "speculative-draft": "speculative-draft-model-path",
    "quant": "quantization",
    "attention": "attention-backend",
}
"""Prefixes 0.5.23 rejects as ambiguous (reference §1.2): refused with the full name to use instead."""


SPECULATIVE_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO")
"""Names 0.5.23 resolves (NEXTN is an alias of EAGLE); anything else must be a plugin, so it fails on launch."""


def parse_version(v: Optional[str]) -> tuple[int, ...]:
    """'0.5.10.post1' → (0, 5, 10); None or unparsable → DEFAULT_VERSION."""
    if not v:
        return tuple(int(x) for x in DEFAULT_VERSION.split("."))
    nums = re.findall(r"\d+", v.split("+")[0])[:3]
    return tuple(int(x) for x in nums) if nums else parse_version(None)


@functools.lru_cache(maxsize=32)
def detect_version(python: str, timeout_s: float = 60.0) -> Optional[str]:
    """The `sglang` version installed for an interpreter, or None when it is absent or cannot be run."""
    argv = [python, "-c", "import importlib.metadata as m; print(m.version('sglang'))"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    out = done.stdout.strip().splitlines()
    if done.returncode != 0 or not out or not re.match(r"^\d+\.\d+", out[-1]):
        return None
    return out[-1].strip()


class VersionMismatchError(UserError):
    """The declared engines.sglang.version disagrees with the version installed for the engine's interpreter."""


def resolve_version(declared: Optional[str], python: Optional[str]) -> str:
    """Version to build argv for: the one installed for `python` (detected with the engine's own interpreter, on the
    node), else the declared one (only where detection is impossible: no interpreter here, a launcher command, a
    remote image), else DEFAULT_VERSION. A declared version that differs from the detected one is an error: an older
    image would otherwise get 0.5.23's flags (issue 15 item 5). Compared on major.minor.patch, so `0.5.23` matches
    an installed `0.5.23.post1`."""
    found = detect_version(python) if python else None
    if found and declared and parse_version(found) != parse_version(declared):
        raise VersionMismatchError(
            f"engines.sglang.version declares {declared!r} but {python} has sglang {found!r} installed; "
            "fix or remove the declared version (it is used only where the installed one cannot be read)",
            field="engines.sglang.version", expected=found)
    return found or declared or DEFAULT_VERSION


def uses_decode_graph_flags(version: Optional[str]) -> bool:
    """True when the release spells the CUDA-graph batch flags `--cuda-graph-max-bs-decode` (the 2026-06 refactor)."""
    return parse_version(version) >= CUDA_GRAPH_REFACTOR


def canonical_key(key: str) -> str:
    """A spec arg key → its full 0.5.23 flag name without dashes; ValueError for a prefix SGLang finds ambiguous."""
    k = key.replace("_", "-")
    if k in AMBIGUOUS_PREFIXES:
        raise UserError(
            f"server arg {key!r} is an abbreviation SGLang rejects as ambiguous; write {AMBIGUOUS_PREFIXES[k]!r}",
            field=f"args.{key}", expected=AMBIGUOUS_PREFIXES[k])
    return FLAG_ALIASES.get(k, k)


def version_adjusted_args(args: Mapping[str, ArgValue], version: tuple[int, ...]) -> dict[str, ArgValue]:
    """Full flag names, and the spelling of release-dependent flags (both spellings are accepted in the spec); one
    flag under two of its names (an alias, an abbreviation, a release's old name) is refused, never one value lost."""
    renamed = {old: new for old, new, _ in RENAMED_FLAGS}
    out: dict[str, ArgValue] = {}
    given: dict[str, str] = {}
    for k, v in args.items():
        full = canonical_key(k)
        flag = renamed.get(full, full)
        if flag in given:
            raise UserError(f"server args {given[flag]!r} and {k!r} are one SGLang flag (--{flag}) under two names: "
                            "give it once", field=f"args.{k}", expected="each flag once")
        given[flag] = k
        out[full] = v
    for old, new, since in RENAMED_FLAGS:
        new_style = version >= since
        if new_style and old in out:
            out.setdefault(new, out.pop(old))
        elif not new_style and new in out:
            out.setdefault(old, out.pop(new))
    return out


def mamba_strategy_flag(version: Optional[str]) -> str:
    """The release's spelling of the hybrid-model radix-cache strategy flag (see MAMBA_STRATEGY_RENAME)."""
    return "--mamba-radix-cache-strategy" if parse_version(version) >= MAMBA_STRATEGY_RENAME \
        else "--mamba-scheduler-strategy"


class SGLangEngine(Engine):
    name = "sglang"
    label = "SGLang"
    module = "sglang.launch_server"
    # 0.5.23's /server_info has no start timestamp; its `startup_time` is the dict of durations this start measured
    # (load_weight, kv_cache_allocation, scheduler_e2e, cuda_graph, tokenizer_e2e: http_server.py server_info,
    # observability/startup_time.py), measured anew by every start; the simulator answers its own measured start
    restart_mark = ("server_info", "startup_time")
    cap_flags = frozenset({"max-running-requests"})
    scraped_metrics = (
        "sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:gen_throughput", "sglang:token_usage",
        "sglang:spec_accept_length", "sglang:spec_accept_rate", "sglang:cache_hit_rate", "sglang:utilization",
        "sglang:num_used_tokens", "sglang:spec_verify_calls_total", "sglang:generation_tokens_total",
    )
    # 0.5.23's prefill/decode parts of TTFT, Prometheus only (docs/deployments-facts.md §4): one stage label per
    # phase (observability/req_time_stats.py RequestStage; prefill_waiting is not observed there, its time is
    # queue_time_seconds), and the KV transfer's bootstrap, alloc and transfer figures (metrics_collector.py)
    ttft_part_histograms = (
        PartHistogram("sglang:per_stage_req_latency_seconds", "", "s", split_label="stage"),
        PartHistogram("sglang:queue_time_seconds", "queue", "s"),
        PartHistogram("sglang:kv_transfer_bootstrap_ms", "kv_transfer_bootstrap", "ms"),
        PartHistogram("sglang:kv_transfer_alloc_ms", "kv_transfer_alloc", "ms"),
        PartHistogram("sglang:kv_transfer_latency_ms", "kv_transfer_latency", "ms"),
    )
    packages = ("sglang", "flashinfer-python", "sglang-kernel", "torch", "triton", "transformers")
    sglang_argv = True
    flag_parser: Optional[FlagParser] = FlagParser("sglang.launch_server",
                                                   ("sglang.srt.server_args:ServerArgs.add_cli_args",))
    adaptive_resolved = True
    health_path = "/health"
    flush_path = "/flush_cache"
    metrics_path = "/metrics"
    running_gauge = "sglang:num_running_reqs"
    queue_gauge = "sglang:num_queue_reqs"
    cap_log_marker = "by the mamba state cache"

    def server_args(self, variant: ResolvedVariant, host: str, port: int, version: Optional[str]) -> list[str]:
        ver = parse_version(version)
        args: dict[str, ArgValue] = version_adjusted_args(variant.args, ver)
        for reserved in ("model-path", "model", "host", "port", "tp-size", "tp", "tensor-parallel-size"):
            args.pop(reserved, None)
        sp = variant.speculative
        if sp is not None:
            for k in list(args):
                if k.startswith("speculative-") and k in _SPEC_KEYS:
                    args.pop(k)
            # "MTP" is the spec's engine-neutral name for a built-in MTP head; SGLang calls that NEXTN
            args["speculative-algorithm"] = "NEXTN" if sp.algorithm == "MTP" else sp.algorithm
            args["speculative-num-steps"] = sp.num_steps
            args["speculative-eagle-topk"] = sp.eagle_topk
            args["speculative-num-draft-tokens"] = sp.num_draft_tokens
            if sp.adaptive_config is not None:
                args[ADAPTIVE_FLAG] = True
                args[CONFIG_FLAG] = sp.adaptive_config
            if sp.draft_model_path:
                args["speculative-draft-model-path"] = sp.draft_model_path
            elif ver < MTP_DRAFT_PATH_BEFORE and sp.algorithm in ("NEXTN", "MTP"):
                args["speculative-draft-model-path"] = variant.model_path
        head = [
            "--model-path", variant.model_path,
            "--host", host,
            "--port", str(port),
            "--tp-size", str(variant.tp),
        ]
        return head + render_args(args)

    def server_env(self, variant: ResolvedVariant, version: Optional[str]) -> dict[str, str]:
        env = dict(variant.env)
        ver = parse_version(version)
        if variant.speculative is not None and ver < SPEC_V2_DEFAULT:
            env.setdefault(SPEC_V2_ENV, "1")
        elif ver >= SPEC_V2_DEFAULT:
            env.pop(SPEC_V2_ENV, None)
        return env

    def launch(
        self,
        variant: ResolvedVariant,
        host: str,
        port: int,
        launcher: Optional[EngineLauncher],
        default_python: str,
        version: Optional[str] = None,
    ) -> LaunchCommand:
        """As Engine.launch, but the version is the one installed for the engine's interpreter (see version_for)."""
        return super().launch(variant, host, port, launcher, default_python,
                              version or self.version_for(launcher, default_python))

    def version_for(self, launcher: Optional[EngineLauncher], default_python: str) -> Optional[str]:
        """Detected with the engine's own interpreter; the declared value only where nothing can be run here (a
        launcher command, or an interpreter path that does not exist on this machine); a mismatch raises."""
        declared = launcher.version if launcher else None
        if self.name != "sglang" or (launcher and launcher.launcher):
            return declared
        python = launcher.python if launcher and launcher.python else default_python
        return resolve_version(declared, python)

    def runs_on_cpu(self, variant: ResolvedVariant) -> bool:
        """`device: cpu` (SGLang's --device) in the variant's resolved args."""
        return str(variant.args.get("device", "")).lower() == "cpu"

    profile_stop_path = "/stop_profile"

    def profile_request(self, output_dir: str, steps: int, profile_id: str, cpu: bool) -> Optional[HttpRequest]:
        """SGLang 0.5.23's /start_profile body (io_struct.ProfileReq: output_dir, num_steps, activities, profile_id;
        http_server.start_profile_async). With num_steps the scheduler stops by itself after that many forward
        steps and writes `<output_dir>/<profile_id>-TP-<rank>.trace.json.gz` (profiler_manager.py); a later
        /stop_profile is then a bare 500 "Internal Server Error" (its RuntimeError "Profiling is not in
        progress", measured on the sglang_cpu tier)."""
        body: dict[str, JsonValue] = {"output_dir": output_dir, "num_steps": steps, "profile_id": profile_id,
                                      "activities": ["CPU"] if cpu else ["CPU", "GPU"]}
        return encode_request("/start_profile", body)

    def info_paths(self, version: Optional[str]) -> dict[str, str]:
        ver = parse_version(version)
        if ver >= SERVER_INFO_RENAME:
            return {"server_info": "/server_info", "model_info": "/model_info"}
        return {"server_info": "/get_server_info", "model_info": "/get_model_info"}

    def build_request(self, request: StreamRequest) -> HttpRequest:
        return build_sglang_request(request)

    def gate_request(self, text: str, max_tokens: int, model_name: str) -> HttpRequest:
        body = {"text": text, "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0.0}, "stream": False}
        return HttpRequest("/generate", json.dumps(body).encode())

    def parse_gate_response(self, doc: Any) -> GateOutput:
        """Typed reads of a non-streaming /generate answer: a field of the wrong type is a MalformedAnswerError."""
        w = "the /generate answer"
        if isinstance(doc, list):  # a batch answer: the gate sends one prompt
            if not doc:
                raise MalformedAnswerError(f"{w}: expected an object or a one-element list, got an empty list")
            doc, w = doc[0], f"{w}[0]"
        d = as_object(doc, w, null_ok=False)
        mi = object_field(d, "meta_info", w)
        fr, _ = finish_field(mi, "finish_reason", f"{w}.meta_info")
        ids = ids_field(d, "output_ids", w)
        out = GateOutput(text=str_field(d, "text", w) or "", token_ids=tuple(ids) if ids else None,
                         completion_tokens=count_field(mi, "completion_tokens", f"{w}.meta_info"),
                         finish_reason=fr, spec_verify_ct=count_field(mi, "spec_verify_ct", f"{w}.meta_info"))
        return checked_gate_output(out, counts_answer(mi, f"{w}.meta_info", None if ids is None else len(ids)))

    def new_parser(self, api: str, keep_text: bool = False) -> StreamParser:
        return SGLangNativeParser(keep_text) if api == "native" else OpenAIStreamParser(keep_text)

    def parse_info(self, name: str, doc: Any) -> Any:
        if name == "server_info":
            return check_server_info(doc)
        return as_object(doc, f"/{name}", null_ok=False)

    def resolved_args(self, infos: Mapping[str, JsonValue]) -> dict[str, JsonValue]:
        si = infos.get("server_info")
        if not isinstance(si, dict):
            return {}
        out = {k: v for k, v in si.items() if k not in ("internal_states", "launch_command", "kv_events")}
        cap = concurrency_cap_from_server_info(si)
        if cap is not None:
            # the cap the scheduler enforces (not a server arg): fairness compares it across variants
            out[RESOLVED_CAP_KEY] = cap.value
        return out

    def concurrency_cap(self, infos: Mapping[str, JsonValue],
                        log_lines: Sequence[str] = ()) -> Optional[ConcurrencyCap]:
        """server_info's scheduler figure (which on 0.5.23 already includes the Mamba state-slot cap), lowered to and
        explained by the log's state-slot line where it is lower or the figure is missing (older releases)."""
        cap = concurrency_cap_from_server_info(infos.get("server_info"))
        slots = mamba_cap_from_log(log_lines)
        if slots is None:
            return cap
        value, cause = slots
        if cap is None or value < cap.value:
            return ConcurrencyCap(value, "server log: mamba state cache line", cap.declared if cap else None, cause)
        return ConcurrencyCap(cap.value, cap.source, cap.declared, cause if value == cap.value else None)

    def window_acceptance(self, before: Mapping[str, float], after: Mapping[str, float],
                          n_requests: int) -> dict[str, float]:
        """Cross-check from counters: (generated − one prefill token per request) / verify calls."""
        verify = after.get("verify_calls", 0.0) - before.get("verify_calls", 0.0)
        gen = after.get("generation_tokens", 0.0) - before.get("generation_tokens", 0.0)
        if verify <= 0 or "generation_tokens" not in after:
            return {}
        return {"accept_length": (gen - n_requests) / verify}

    def spec_counters(self, metrics_text: str) -> dict[str, float]:
        # SGLang exposes a verify-call counter; accepted tokens come per request from meta_info instead.
        from cluster.engines.prometheus import parse_prometheus, sum_metric

        samples = parse_prometheus(metrics_text)
        v = sum_metric(samples, "sglang:spec_verify_calls_total")
        gen = sum_metric(samples, "sglang:generation_tokens_total")
        out: dict[str, float] = {}
        if v is not None:
            out["verify_calls"] = v
        if gen is not None:
            out["generation_tokens"] = gen
        return out


_SPEC_KEYS = {
    ADAPTIVE_FLAG,
    CONFIG_FLAG,
    "speculative-algorithm",
    "speculative-num-steps",
    "speculative-eagle-topk",
    "speculative-num-draft-tokens",
}
