"""`sglbench smoke` against the REAL SGLang gateway (smg 1.13.0 from the SGLang venv) over two simulator servers:
the gateway's table and one per worker; a worker killed under it is named (exit 4). Skips without the venv's smg,
unless SGLBENCH_REQUIRE_TIERS requires the sglang tier."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cluster.engines.gateway_smoke import ROUTED_WORKER_HEADER, deployment_failure, smoke_deployment
from cluster.server.process import free_port
from tests.conftest import tier_required

REPO = Path(__file__).resolve().parents[2]
START_S = 60.0


def _smg() -> Path:
    venv = Path(os.environ.get("SGLBENCH_SGLANG_VENV") or REPO / ".ci" / "venvs" / "sglang")
    smg = venv / "bin" / "smg"
    if not os.access(smg, os.X_OK):
        problem = f"SGLang's gateway not found at {smg} (scripts/setup_sglang_venv.sh installs smg 1.13.0)"
        if tier_required("sglang"):
            pytest.fail(problem + "; SGLBENCH_REQUIRE_TIERS requires this tier", pytrace=False)
        pytest.skip(problem)
    return smg


def _wait(url: str, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1).close()
            return
        except (OSError, urllib.error.HTTPError):
            assert proc.poll() is None, f"{what} exited with {proc.returncode}"
            time.sleep(0.2)
    raise AssertionError(f"{what} did not answer 200 at {url} within {START_S:g} s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def test_smoke_checks_the_real_gateway_and_each_simulator_behind_it() -> None:
    from cluster.cli import app

    smg = _smg()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        sims = []
        for _ in range(2):
            port = free_port()
            env = {**os.environ, "SGLBENCH_SIM": json.dumps({"time_scale": 0.05})}
            procs.append(subprocess.Popen([sys.executable, "-m", "cluster.sim.server", "--model-path", "sim://q",
                                           "--host", "127.0.0.1", "--port", str(port)], env=env,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            sims.append((f"http://127.0.0.1:{port}", procs[-1]))
        for url, proc in sims:
            _wait(url + "/health", proc, "simulator")
        port, metrics = free_port(), free_port()
        gateway = subprocess.Popen([str(smg), "launch", "--host", "127.0.0.1", "--port", str(port), "--worker-urls",
                                    *(u for u, _ in sims), "--policy", "round_robin", "--prometheus-host",
                                    "127.0.0.1", "--prometheus-port", str(metrics), "--disable-retries"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(gateway)
        url = f"http://127.0.0.1:{port}"
        _wait(url + "/readiness", gateway, "the gateway")

        targets = smoke_deployment(url, 10.0)
        assert (targets[0].target, targets[0].url) == ("gateway", url)
        assert sorted((t.target, t.url) for t in targets[1:]) == sorted(("regular worker", u) for u, _ in sims)
        assert [(t.target, c.name, c.found) for t in targets for c in t.checks if not c.ok] == []
        assert deployment_failure(targets) is None  # the CLI's exit 0
        (routed,) = [c for c in targets[0].checks if c.name == ROUTED_WORKER_HEADER]
        assert routed.found in {u for u, _ in sims}

        dead_url, dead = sims[1]
        _stop(dead)  # by its own handle
        res = CliRunner().invoke(app, ["smoke", url, "--timeout", "10"])
        flat = " ".join(res.output.split())
        assert res.exit_code == 4, res.output
        assert f"regular worker {dead_url}: GET /health" in flat and "connection refused" in flat, flat
    finally:
        for proc in reversed(procs):
            _stop(proc)
