"""What every peer benchmark client shares (benchmarks/peers.py): the run's result record, the peer base class, the
offline environment, the endpoints and the local tokenizer they all load."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
ENDPOINTS = ("native", "openai-usage", "openai")
MODEL = "stub"  # the model name sent in requests (benchmarks/paced_stub.c and sglbench's simulator take any)
# Per-chunk usage, as vLLM's and SGLang's OpenAI servers (and benchmarks/paced_stub.c) read it.
USAGE_EACH_CHUNK = {"stream_options": {"include_usage": True, "continuous_usage_stats": True}}
# A closed port on loopback: a hub client pointed here fails at once, on this machine.
DEAD_ENDPOINT = "http://127.0.0.1:9"

# The environment every peer runs under (AIPerf's differs: AIPerfPeer.env): no hub, no telemetry.
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "DO_NOT_TRACK": "1",
    "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1",
}


class NotSupported(ValueError):
    """This peer cannot drive that endpoint."""


def sibling(name: str) -> Any:
    """benchmarks/<name>.py as a module, loaded by path (works as a script, as a module and under pytest)."""
    mod = sys.modules.get(f"benchmarks.{name}") or sys.modules.get(f"_sglbench_{name}")
    if mod is not None:
        return mod
    spec = importlib.util.spec_from_file_location(f"_sglbench_{name}", Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def build_tokenizer(out_dir: str | Path, python: str | Path) -> Path:
    """Write benchmarks/client_capacity.py's tiny WordLevel tokenizer (vocab w3..w4095) into out_dir with `python`.

    `python` needs `tokenizers` and `transformers` (every peer venv has both); nothing is downloaded."""
    out = Path(out_dir)
    if not (out / "tokenizer.json").exists():
        script: str = sibling("client_capacity").TOKENIZER_SCRIPT
        subprocess.run([str(python), "-c", script, str(out)], check=True, env={**os.environ, **OFFLINE_ENV},
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return out


@dataclass
class PeerResult:
    """One peer run in the peer's own terms (ms), successful requests only.

    itl_ms: every inter-chunk latency the peer recorded, flattened over requests, when itl_per_chunk; otherwise
    (GuideLLM) one per-request average per request. duration_s is the peer's own benchmark duration."""

    completed: int
    duration_s: float
    ttft_ms: list[float]
    itl_ms: list[float]
    output_tokens: int
    notes: str
    itl_per_chunk: bool = True
    failed: int = 0
    e2e_ms: list[float] = field(default_factory=list)


def check_endpoint(endpoint: str, supported: Sequence[str], peer: str) -> None:
    if endpoint not in ENDPOINTS:
        raise ValueError(f"endpoint {endpoint!r}: one of {ENDPOINTS}")
    if endpoint not in supported:
        raise NotSupported(f"{peer} cannot drive the {endpoint!r} endpoint (it drives {', '.join(supported)})")


def rate_arg(request_rate: Optional[float]) -> str:
    return "inf" if request_rate is None else repr(float(request_rate))


class Peer:
    """One peer client: its venv, its command line, its environment and how its records are read."""

    name: ClassVar[str]
    venv_dir: ClassVar[str]  # under ROOT/.ci/venvs
    setup: ClassVar[str]  # what builds the venv
    endpoints: ClassVar[tuple[str, ...]]
    ttft_definition: ClassVar[str]
    itl_definition: ClassVar[str]
    itl_per_chunk: ClassVar[bool] = True

    def venv(self) -> Path:
        """ROOT/.ci/venvs/<venv_dir>, or env SGLBENCH_PEER_<NAME>_VENV."""
        env = os.environ.get(f"SGLBENCH_PEER_{self.name.upper().replace('-', '_')}_VENV")
        return Path(env) if env else ROOT / ".ci" / "venvs" / self.venv_dir

    def python(self) -> Path:
        return self.venv() / "bin" / "python"

    def available(self) -> bool:
        return self.python().exists()

    def supports(self, endpoint: str) -> bool:
        return endpoint in self.endpoints

    def env(self) -> dict[str, str]:
        """Variables to add to os.environ for the peer's process."""
        return dict(OFFLINE_ENV)

    def argv(self, base_url: str, endpoint: str, concurrency: int, num_requests: int, input_tokens: int,
             output_tokens: int, tokenizer_dir: str | Path, out_dir: str | Path,
             request_rate: Optional[float] = None, model: str = MODEL) -> list[str]:
        """The command line of one run; raises NotSupported for an endpoint the peer lacks.

        request_rate None: closed loop, `concurrency` requests in flight, each next one sent as a slot frees
        (infinite rate). A rate: open loop, Poisson arrivals at that many requests/s, at most `concurrency` in
        flight when concurrency > 0. Every request has input_tokens prompt tokens and asks for exactly
        output_tokens (ignore_eos)."""
        raise NotImplementedError

    def parse(self, out_dir: str | Path) -> PeerResult:
        raise NotImplementedError


def ok_flags(errors: Sequence[Any]) -> list[bool]:
    return [not e for e in errors]
