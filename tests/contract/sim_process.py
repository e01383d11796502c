"""The simulated SGLang server as a subprocess on a free loopback port, and its handle (started and stopped by tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from cluster.server.process import free_port

REPO = Path(__file__).resolve().parents[2]


@dataclass
class SimHandle:
    proc: subprocess.Popen[bytes]
    port: int

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.base + path, timeout=10) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def post(self, path: str, body: Optional[dict[str, Any]] = None) -> tuple[int, bytes]:
        data = json.dumps(body or {}).encode()
        req = urllib.request.Request(self.base + path, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()


def start_sim(argv: list[str], knobs: dict[str, Any], wait_healthy: bool = True) -> SimHandle:
    port = free_port()
    env = dict(os.environ, SGLBENCH_SIM=json.dumps(knobs), PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "cluster.sim.server", "--model-path", "sim-model", "--port", str(port), *argv]
    proc = subprocess.Popen(cmd, env=env, cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    h = SimHandle(proc, port)
    if wait_healthy:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"sim exited early: {proc.stdout.read().decode() if proc.stdout else ''}")
            try:
                if h.get("/health")[0] == 200:
                    return h
            except OSError:
                pass
            time.sleep(0.05)
        stop_sim(h)
        raise RuntimeError("sim did not become healthy within 20 s")
    return h


def stop_sim(h: SimHandle) -> None:
    if h.proc.poll() is None:
        h.proc.terminate()
        try:
            h.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            h.proc.kill()
            h.proc.wait()
    if h.proc.stdout:
        h.proc.stdout.close()
