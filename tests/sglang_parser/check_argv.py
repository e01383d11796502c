"""Run inside SGLang's own venv: validate many argv lists, stream chunks and request bodies with SGLang's code.

stdin: JSON {"argv": [{"id", "argv"}], "openai_chunks": [{"id", "kind": "completion"|"chat", "chunk"}],
"openai_requests": [{"id", "kind", "body"}], "generate_requests": [{"id", "body"}]}.
stdout (last line): JSON {"sglang_version", "import_s", "results": [{"id", "ok", "error", "values"}]}.
Imports are paid once for the whole batch. This file imports only SGLang and the standard library.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import io
import json
import sys
import time
import types
from typing import Any

REPORTED = (
    "model_path", "tp_size", "max_running_requests", "kv_cache_dtype", "attention_backend", "moe_runner_backend",
    "fp4_gemm_runner_backend", "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
    "speculative_num_draft_tokens", "speculative_draft_model_path", "cuda_graph_max_bs_decode",
    "disable_flashinfer_autotune", "enable_metrics", "host", "port", "disable_radix_cache",
)


class _Placeholder:
    """Stands in for any torchvision attribute: sglang's multimodal configs import names at module load only."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return _Placeholder


class _PlaceholderModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder


class _TorchvisionFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name == "torchvision" or name.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        mod = _PlaceholderModule(spec.name)
        mod.__path__ = []
        return mod

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def _torchvision_or_placeholder() -> str:
    """io_struct imports sglang's model configs, which import torchvision at module load. PyPI's torchvision
    wheels need CUDA torch, so without a CPU build a placeholder module is registered; nothing checked here calls
    into it (a check that did would fail on _Placeholder, never pass by accident)."""
    try:
        import torchvision  # noqa: F401

        return "real"
    except Exception:
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
        sys.meta_path.insert(0, _TorchvisionFinder())
        return "placeholder"


def _option_strings(parser: argparse.ArgumentParser) -> set[str]:
    return {s for action in parser._actions for s in action.option_strings}


def check_argv(parser: argparse.ArgumentParser, options: set[str], argv: list[str]) -> dict[str, Any]:
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.speculative.spec_registry import _reserved_names

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = parser.parse_args(argv)
            args = ServerArgs.from_cli_args(ns)
    except SystemExit:
        lines = [ln for ln in err.getvalue().splitlines() if "error:" in ln]
        return {"ok": False, "error": lines[-1] if lines else err.getvalue()[-300:]}
    except Exception as e:  # a field constructor or action raising is a rejection too
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}
    # argparse accepts unambiguous prefixes silently; this tool promises full names, so check them too.
    for word in argv:
        if word.startswith("--") and word.split("=", 1)[0] not in options:
            return {"ok": False, "error": f"not a full flag name in this release: {word}"}
    algo = getattr(args, "speculative_algorithm", None)
    # the parser takes any string (plugins may register names); resolution on a GPU node would reject the rest
    if algo is not None and algo.upper() not in _reserved_names():
        return {"ok": False, "error": f"speculative algorithm {algo!r} unknown to SGLang {sorted(_reserved_names())}"}
    values = {k: getattr(args, k, None) for k in REPORTED}
    return {"ok": True, "error": None, "values": json.loads(json.dumps(values, default=str))}


def _extra_keys(obj: dict[str, Any], model: Any, where: str) -> list[str]:
    return [f"{where}.{k}" for k in obj if k not in model.model_fields]


def check_chunk(kind: str, chunk: dict[str, Any]) -> dict[str, Any]:
    from sglang.srt.entrypoints.openai import protocol as p

    model = p.CompletionStreamResponse if kind == "completion" else p.ChatCompletionStreamResponse
    choice_model = p.CompletionResponseStreamChoice if kind == "completion" else p.ChatCompletionResponseStreamChoice
    try:
        parsed = model.model_validate(chunk)
    except Exception as e:
        return {"ok": False, "error": f"{type(e).__name__}: {str(e)[:500]}"}
    extra = _extra_keys(chunk, model, "chunk")
    for i, c in enumerate(chunk.get("choices") or []):
        extra += _extra_keys(c, choice_model, f"choices[{i}]")
    if isinstance(chunk.get("usage"), dict):
        extra += _extra_keys(chunk["usage"], p.UsageInfo, "usage")
    if extra:
        return {"ok": False, "error": f"fields SGLang's model does not define: {extra}"}
    usage = parsed.usage.model_dump() if parsed.usage is not None else None
    return {"ok": True, "error": None, "values": {"usage": usage, "n_choices": len(parsed.choices)}}


def check_openai_request(kind: str, body: dict[str, Any]) -> dict[str, Any]:
    from sglang.srt.entrypoints.openai import protocol as p

    model = p.CompletionRequest if kind == "completion" else p.ChatCompletionRequest
    try:
        parsed = model.model_validate(body)
    except Exception as e:
        return {"ok": False, "error": f"{type(e).__name__}: {str(e)[:500]}"}
    extra = _extra_keys(body, model, "body")
    if extra:
        return {"ok": False, "error": f"fields SGLang's request model does not define: {extra}"}
    return {"ok": True, "error": None, "values": {"stream": parsed.stream, "max_tokens": body.get("max_tokens")}}


def check_generate(body: dict[str, Any]) -> dict[str, Any]:
    from sglang.srt.managers.io_struct import GenerateReqInput
    from sglang.srt.sampling.sampling_params import SamplingParams

    try:
        req = GenerateReqInput(**body)
        req.normalize_batch_and_arguments()
        sp = SamplingParams(**(body.get("sampling_params") or {}))
        sp.verify(vocab_size=1 << 20)
    except Exception as e:
        return {"ok": False, "error": f"{type(e).__name__}: {str(e)[:500]}"}
    return {
        "ok": True,
        "error": None,
        "values": {"stream": req.stream, "is_single": req.is_single, "max_new_tokens": sp.max_new_tokens},
    }


def main() -> int:
    job = json.load(sys.stdin)
    t0 = time.monotonic()
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    options = _option_strings(parser)
    results: list[dict[str, Any]] = []
    for item in job.get("argv", []):
        results.append({"id": item["id"], **check_argv(parser, options, list(item["argv"]))})
    t_argv = time.monotonic() - t0
    torchvision = _torchvision_or_placeholder()
    for item in job.get("openai_chunks", []):
        results.append({"id": item["id"], **check_chunk(item["kind"], item["chunk"])})
    for item in job.get("openai_requests", []):
        results.append({"id": item["id"], **check_openai_request(item["kind"], item["body"])})
    for item in job.get("generate_requests", []):
        results.append({"id": item["id"], **check_generate(item["body"])})
    out = {
        "sglang_version": importlib.metadata.version("sglang"),
        "torchvision": torchvision,
        "argv_s": round(t_argv, 3),
        "total_s": round(time.monotonic() - t0, 3),
        "results": results,
    }
    sys.stdout.write("\n" + json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
