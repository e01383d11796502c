"""Launch commands, request bodies and OpenAI stream chunks checked by SGLang 0.5.23's own code (one subprocess)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from cluster.engines.base import Prompt, StreamRequest
from cluster.engines.sglang import SGLangEngine
from cluster.engines.sglang_dialect import build_sglang_request
from cluster.plan.runs import expand_variants
from cluster.kernel.runs import ResolvedVariant
from cluster.config.experiment import ExperimentSpec
from cluster.config.loader import load_spec

REPO = Path(__file__).resolve().parents[2]
VERSION = "0.5.23"
MODEL = "/models/Qwen3.5-397B-A17B-NVFP4"


def _argv(v: ResolvedVariant, version: str = VERSION) -> list[str]:
    return SGLangEngine().server_args(v, "127.0.0.1", 30000, version)


def experiment_argvs() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for path in sorted((REPO / "experiments").glob("*.yaml")):
        spec = load_spec(path)
        for v in expand_variants(spec):
            if v.engine in ("sglang", "sim"):
                out[f"experiment:{path.stem}:{v.name}"] = _argv(v)
    return out


MATRIX_BASE: dict[str, Any] = {
    "max-running-requests": 64,
    "kv-cache-dtype": "bf16",
    "attention-backend": "triton",
    "mem-fraction-static": 0.85,
    "cuda-graph-max-bs": 64,
    "enable-metrics": True,
    "trust-remote-code": True,
}

MATRIX_VARIANTS: list[dict[str, Any]] = [
    {"name": "baseline", "baseline": True},
    {"name": "nextn", "speculative": {"algorithm": "NEXTN", "num_steps": [1, 2, 3]}},
    {"name": "eagle-topk4", "speculative": {"algorithm": "EAGLE", "num_steps": 3, "eagle_topk": 4,
                                            "num_draft_tokens": 8}},
    {"name": "tuned-off", "args": {"disable-flashinfer-autotune": True},
     "env": {"SGLANG_FLASHINFER_AUTOTUNE_CACHE": "0"}},
    {"name": "moe-cutlass", "args": {"moe-runner-backend": "flashinfer_cutlass"}},
    {"name": "moe-marlin", "args": {"moe-runner-backend": "marlin"}},
    {"name": "fp4-cudnn", "args": {"fp4-gemm-backend": "flashinfer_cudnn"}},
    {"name": "fp4-cutlass", "args": {"fp4-gemm-backend": "flashinfer_cutlass"}},
    {"name": "attn-flashinfer", "args": {"attention-backend": "flashinfer"}},
    {"name": "kv-fp8", "args": {"kv-cache-dtype": "fp8_e4m3"}},
    # tp and the draft path go through model.tp and the speculative: block; as args the spec refuses them
    # a recipe's short spelling of a flag the base does not set (beside the base's mem-fraction-static, `mem-frac`
    # would be one flag under two names, which the spec refuses)
    {"name": "recipe-spellings", "args": {"disable-radix": True},
     "speculative": {"algorithm": "nextn", "num_steps": 3, "draft_model_path": MODEL}},
    # overrides the base's cuda-graph-max-bs under the base's own spelling (another spelling of the same flag is
    # refused as one flag under two names); 0.5.23 takes it as --cuda-graph-max-bs-decode
    {"name": "nextn-tuned-sm120", "args": {"moe-runner-backend": "flashinfer_cutlass",
                                           "fp4-gemm-backend": "flashinfer_cutlass",
                                           "quantization": "modelopt_fp4", "cuda-graph-max-bs": 32},
     "speculative": {"algorithm": "NEXTN", "num_steps": 2}},
]


def matrix_variants() -> list[ResolvedVariant]:
    spec = ExperimentSpec.model_validate(
        {
            "name": "parser-matrix",
            "model": {"path": MODEL, "engine": "sglang", "tp": 8},
            "server": {"args": MATRIX_BASE},
            "variants": MATRIX_VARIANTS,
            "workloads": [{"name": "w", "input_tokens": 16, "output_tokens": 8, "num_requests": 1}],
            "load": {"concurrency": [1]},
        }
    )
    return expand_variants(spec)


REJECTED: dict[str, tuple[list[str], str]] = {
    "old-cuda-graph-flag": (["--model-path", MODEL, "--cuda-graph-max-bs", "256"], "ambiguous option"),
    "ambiguous-draft": (["--model-path", MODEL, "--speculative-draft", MODEL], "ambiguous option"),
    "abbreviated-tp": (["--model-path", MODEL, "--tp", "8"], "not a full flag name"),
    "bad-kv-dtype": (["--model-path", MODEL, "--kv-cache-dtype", "int3"], "invalid choice"),
    "unknown-algorithm": (["--model-path", MODEL, "--speculative-algorithm", "MTP"], "unknown to SGLang"),
}


def hand_built_chunks() -> list[dict[str, Any]]:
    """OpenAI stream chunks as SGLang sends them (reference §3.3), built by hand; the simulator's real chunks are
    checked too (sim_chunks)."""
    created = int(time.time())
    usage = {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17, "reasoning_tokens": 0}
    spec = {"spec_accept_rate": 0.6, "spec_accept_length": 2.5, "spec_num_correct_drafts": 3,
            "spec_num_proposed_drafts": 6, "spec_verify_ct": 2}
    return [
        {"id": "chunk:completion:text", "kind": "completion", "chunk": {
            "id": "cmpl-1", "object": "text_completion", "created": created, "model": "m",
            "choices": [{"index": 0, "text": " hello", "logprobs": None, "finish_reason": None,
                         "matched_stop": None}], "usage": usage}},
        {"id": "chunk:completion:final", "kind": "completion", "chunk": {
            "id": "cmpl-1", "object": "text_completion", "created": created, "model": "m",
            "choices": [{"index": 0, "text": "", "logprobs": None, "finish_reason": "length",
                         "matched_stop": None}]}},
        {"id": "chunk:completion:usage", "kind": "completion", "chunk": {
            "id": "cmpl-1", "object": "text_completion", "created": created, "model": "m", "choices": [],
            "usage": usage}},
        {"id": "chunk:completion:sglext", "kind": "completion", "chunk": {
            "id": "cmpl-1", "object": "text_completion", "created": created, "model": "m", "choices": [],
            "sglext": {"spec_tokens_details": spec}}},
        {"id": "chunk:chat:role", "kind": "chat", "chunk": {
            "id": "chat-1", "object": "chat.completion.chunk", "created": created, "model": "m",
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                         "finish_reason": None, "matched_stop": None}]}},
        {"id": "chunk:chat:text", "kind": "chat", "chunk": {
            "id": "chat-1", "object": "chat.completion.chunk", "created": created, "model": "m",
            "choices": [{"index": 0, "delta": {"content": " hi"}, "logprobs": None, "finish_reason": "stop",
                         "matched_stop": 151645}]}},
        {"id": "chunk:chat:usage", "kind": "chat", "chunk": {
            "id": "chat-1", "object": "chat.completion.chunk", "created": created, "model": "m", "choices": [],
            "usage": usage}},
    ]


BAD_CHUNKS = [
    {"id": "badchunk:finish-reason", "kind": "completion", "chunk": {
        "id": "c", "model": "m", "choices": [{"index": 0, "text": "x", "finish_reason": "eos"}]}},
    {"id": "badchunk:extra-usage-field", "kind": "chat", "chunk": {
        "id": "c", "model": "m", "choices": [], "usage": {"prompt_tokens": 1, "total_tokens": 2,
                                                        "completion_tokens": 1, "output_tokens": 1}}},
]


def request_bodies() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    generate: list[dict[str, Any]] = []
    openai: list[dict[str, Any]] = []
    prompts = {"ids": Prompt(input_ids=(1, 2, 3, 4)), "text": Prompt(text="Reply with exactly one word: OK")}
    for pname, prompt in prompts.items():
        for ignore_eos in (True, False):
            for api in ("native", "completions", "chat"):
                req = build_sglang_request(StreamRequest(api, prompt, 64, ignore_eos, 0.0, "qwen", rid=f"r-{pname}"))
                body = json.loads(req.body)
                rid = f"request:{api}:{pname}:{ignore_eos}"
                if api == "native":
                    assert req.path == "/generate"
                    generate.append({"id": rid, "body": body})
                else:
                    kind = "completion" if api == "completions" else "chat"
                    openai.append({"id": rid, "kind": kind, "body": body})
    return generate, openai


def sim_chunks() -> list[dict[str, Any]]:
    """Every OpenAI stream chunk the simulator sends for sglbench's own requests (speculative server, usage on)."""
    import os
    import socket
    import sys
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    argv = [sys.executable, "-m", "cluster.sim.server", "--model-path", "sim://q", "--host", "127.0.0.1",
            "--port", str(port), "--max-running-requests", "8", "--speculative-algorithm", "NEXTN",
            "--speculative-num-steps", "2", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "3"]
    env = {**os.environ, "SGLBENCH_SIM": json.dumps({"time_scale": 0.05})}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out: list[dict[str, Any]] = []
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "simulator did not start"
                time.sleep(0.1)
        for api, kind in (("completions", "completion"), ("chat", "chat")):
            req = build_sglang_request(StreamRequest(api, Prompt(text="Reply with exactly one word: OK"), 6, True, 0.0, "q"))
            http = urllib.request.Request(f"http://127.0.0.1:{port}{req.path}", data=req.body,
                                          headers={"Content-Type": "application/json"}, method="POST")
            with urllib.request.urlopen(http, timeout=30) as resp:
                events = resp.read().decode().split("\n\n")
            payloads = [e[len("data: "):] for e in events if e.startswith("data: ") and e.strip() != "data: [DONE]"]
            for i, raw in enumerate(payloads):
                out.append({"id": f"simchunk:{kind}:{i}", "kind": kind, "chunk": json.loads(raw)})
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    return out


@pytest.fixture(scope="module")
def checked(sglang_venv_python: Path) -> dict[str, Any]:
    job: dict[str, Any] = {"argv": [], "openai_chunks": [], "openai_requests": [], "generate_requests": []}
    for key, argv in experiment_argvs().items():
        job["argv"].append({"id": key, "argv": argv})
    for v in matrix_variants():
        job["argv"].append({"id": f"matrix:{v.name}", "argv": _argv(v)})
    for name, (argv, _) in REJECTED.items():
        job["argv"].append({"id": f"rejected:{name}", "argv": argv})
    old = next(v for v in matrix_variants() if v.name == "baseline")
    job["argv"].append({"id": "rejected:rendered-for-0.5.12", "argv": _argv(old, "0.5.12")})
    job["openai_chunks"] = hand_built_chunks() + BAD_CHUNKS + sim_chunks()
    job["generate_requests"], job["openai_requests"] = request_bodies()
    t0 = time.monotonic()
    done = subprocess.run(
        [str(sglang_venv_python), str(Path(__file__).with_name("check_argv.py"))],
        input=json.dumps(job), capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["wall_s"] = time.monotonic() - t0
    out["by_id"] = {r["id"]: r for r in out["results"]}
    assert len(out["by_id"]) == len(out["results"]), "duplicate check ids"
    return out


def test_checked_the_pinned_release(checked: dict[str, Any]) -> None:
    assert checked["sglang_version"] == VERSION
    print(f"sglang parser tier: {len(checked['results'])} checks in {checked['wall_s']:.1f} s "
          f"(argv {checked['argv_s']:.1f} s incl. import)")


def test_every_experiment_launch_command_parses(checked: dict[str, Any]) -> None:
    keys = [k for k in checked["by_id"] if k.startswith("experiment:")]
    assert any(":qwen35-397b-nvfp4-mtp:" in k for k in keys), keys
    bad = {k: checked["by_id"][k]["error"] for k in keys if not checked["by_id"][k]["ok"]}
    assert not bad


def test_matrix_launch_commands_parse_with_intended_values(checked: dict[str, Any]) -> None:
    by = checked["by_id"]
    names = [v.name for v in matrix_variants()]
    bad = {n: by[f"matrix:{n}"]["error"] for n in names if not by[f"matrix:{n}"]["ok"]}
    assert not bad
    vals = {n: by[f"matrix:{n}"]["values"] for n in names}
    assert vals["baseline"]["speculative_algorithm"] is None
    assert vals["baseline"]["cuda_graph_max_bs_decode"] == 64  # the old spelling, renamed for 0.5.23
    for steps in (1, 2, 3):
        v = vals[f"nextn-{steps}"]
        assert (v["speculative_algorithm"], v["speculative_num_steps"], v["speculative_eagle_topk"],
                v["speculative_num_draft_tokens"]) == ("NEXTN", steps, 1, steps + 1)
        assert v["max_running_requests"] == 64
    assert vals["eagle-topk4"]["speculative_num_draft_tokens"] == 8
    assert vals["tuned-off"]["disable_flashinfer_autotune"] is True
    assert vals["moe-marlin"]["moe_runner_backend"] == "marlin"
    assert vals["fp4-cudnn"]["fp4_gemm_runner_backend"] == "flashinfer_cudnn"
    assert vals["attn-flashinfer"]["attention_backend"] == "flashinfer"
    assert vals["kv-fp8"]["kv_cache_dtype"] == "fp8_e4m3"
    assert vals["recipe-spellings"]["tp_size"] == 8  # model.tp
    assert vals["recipe-spellings"]["speculative_draft_model_path"] == MODEL
    assert vals["recipe-spellings"]["disable_radix_cache"] is True
    assert vals["nextn-tuned-sm120"]["cuda_graph_max_bs_decode"] == 32


@pytest.mark.parametrize("name", sorted(REJECTED))
def test_the_check_can_fail(checked: dict[str, Any], name: str) -> None:
    res = checked["by_id"][f"rejected:{name}"]
    assert not res["ok"]
    assert REJECTED[name][1] in res["error"]


def test_pre_refactor_argv_is_rejected_by_0523(checked: dict[str, Any]) -> None:
    res = checked["by_id"]["rejected:rendered-for-0.5.12"]
    assert not res["ok"] and "cuda-graph-max-bs" in res["error"]


def test_openai_chunks_match_sglang_protocol(checked: dict[str, Any]) -> None:
    by = checked["by_id"]
    good = [c["id"] for c in hand_built_chunks()]
    assert {i: by[i]["error"] for i in good if not by[i]["ok"]} == {}
    assert by["chunk:chat:usage"]["values"]["usage"]["completion_tokens"] == 5
    for bad in BAD_CHUNKS:
        assert not by[bad["id"]]["ok"], bad["id"]


def test_simulator_chunks_match_sglang_protocol(checked: dict[str, Any]) -> None:
    ids = [k for k in checked["by_id"] if k.startswith("simchunk:")]
    assert any(k.startswith("simchunk:chat:") for k in ids) and any(k.startswith("simchunk:completion:") for k in ids)
    assert {k: checked["by_id"][k]["error"] for k in ids if not checked["by_id"][k]["ok"]} == {}
    usages = [checked["by_id"][k]["values"]["usage"] for k in ids if checked["by_id"][k]["values"]["usage"]]
    assert usages and max(u["completion_tokens"] for u in usages) == 6


def test_request_bodies_match_sglang_models(checked: dict[str, Any]) -> None:
    ids = [k for k in checked["by_id"] if k.startswith("request:")]
    assert len(ids) == 12
    bad = {k: checked["by_id"][k]["error"] for k in ids if not checked["by_id"][k]["ok"]}
    assert not bad
    native = checked["by_id"]["request:native:text:True"]["values"]
    assert native == {"stream": True, "is_single": True, "max_new_tokens": 64}
