"""Start, query and stop one real SGLang 0.5.23 server on the CPU (with the sglbench CPU test stand-ins), stdlib only."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
ORACLE_MAX_NEW_TOKENS = 32
"""Greedy budget of the prompts the oracle baseline and the NEXTN servers compared with it answer."""
SERVER_ENV = {"SGLANG_USE_CPU_ENGINE": "1", "SGLBENCH_CPU_STANDINS": "1"}
START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 20.0
PROMPTS = (
    "The cat runs",
    "A dog sleeps on the node",
    "Our test measures",
    "the cluster waits twice",
    "My model decodes every request",
)


def free_port(host: str = HOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def baseline_args() -> list[str]:
    """SGLang's own torch_native attention: the oracle the stand-in attention and NEXTN are compared with."""
    return ["--attention-backend", "torch_native"]


def nextn_args(steps: int) -> list[str]:
    """NEXTN over the model's own MTP layer; intel_amx is the only CPU backend with draft and target-verify support."""
    return [
        "--attention-backend", "intel_amx",
        "--speculative-algorithm", "NEXTN",
        "--speculative-num-steps", str(steps),
        "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", str(steps + 1),
        "--disable-cuda-graph",
    ]


@dataclass
class SGLangCPUServer:
    """One launch_server process group, started in its own session and stopped only through its own handle."""

    python: Path
    model: Path
    extra_args: list[str]
    log_path: Path
    port: int = field(default_factory=free_port)
    env: dict[str, str] = field(default_factory=dict)
    """Set for this server only, over SERVER_ENV."""
    proc: subprocess.Popen | None = None
    start_s: float = 0.0

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def argv(self) -> list[str]:
        return [
            str(self.python), "-m", "sglang.launch_server",
            "--model-path", str(self.model),
            "--device", "cpu",
            "--host", HOST,
            "--port", str(self.port),
            "--max-total-tokens", "8192",
            "--enable-metrics",
            "--served-model-name", "tiny",
            "--sleep-on-idle",
            *self.extra_args,
        ]

    def start(self, timeout_s: float = START_TIMEOUT_S) -> float:
        """Launch and wait for /health to answer 200; returns the seconds that took."""
        env = {**os.environ, **SERVER_ENV, **self.env}
        t0 = time.monotonic()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True, stdin=subprocess.DEVNULL)
        while time.monotonic() - t0 < timeout_s:
            if self.proc.poll() is not None:
                raise RuntimeError(f"SGLang server exited with {self.proc.returncode} during start:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        self.start_s = time.monotonic() - t0
                        return self.start_s
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(0.5)
        self.stop()
        raise TimeoutError(f"SGLang server not healthy after {timeout_s:.0f} s:\n{self.log_tail()}")

    def stop(self) -> None:
        """SIGTERM the server's own process group, SIGKILL it if it lingers."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        pgid = proc.pid  # start_new_session=True: the group id is the server's pid
        try:
            os.killpg(pgid, signal.SIGTERM)
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(pgid, signal.SIGKILL)
            proc.wait(timeout=STOP_TIMEOUT_S)
        except ProcessLookupError:
            pass
        # The scheduler/detokenizer die with the parent (PR_SET_PDEATHSIG); reap any group member left.
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def log_tail(self, n_chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n_chars:]
        except OSError:
            return "<no log>"

    def request(self, path: str, body: dict[str, Any] | None = None, timeout_s: float = 120.0) -> tuple[int, str]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def generate(self, text: str, max_new_tokens: int = 32, stream: bool = False) -> tuple[int, str]:
        params = {"temperature": 0, "max_new_tokens": max_new_tokens, "ignore_eos": True}
        return self.request("/generate", {"text": text, "sampling_params": params, "stream": stream})

    def greedy_outputs(self, max_new_tokens: int = 32) -> list[dict[str, Any]]:
        outs = []
        for p in PROMPTS:
            status, body = self.generate(p, max_new_tokens)
            if status != 200:
                raise RuntimeError(f"/generate answered {status}: {body[:500]}")
            outs.append(json.loads(body))
        return outs


def accept_length(outputs: list[dict[str, Any]]) -> float:
    """Tokens per verify step beyond each request's first (prefill) token: sum(completion_tokens-1)/sum(spec_verify_ct)."""
    metas = [o["meta_info"] for o in outputs]
    return sum(m["completion_tokens"] - 1 for m in metas) / sum(m["spec_verify_ct"] for m in metas)
