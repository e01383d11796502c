"""A simulated prefill + decode pair behind the REAL gateway (smg 1.13.0, PD mode): smg discovers both sims as SGLang
workers, injects bootstrap_host/port/room into both bodies, and the pair serves streamed and plain /generate; each
side's per-stage series count the requests. The servers are simulated (cluster/sim, labelled so), the gateway is
real. Skipped without the SGLang venv's smg (SGLBENCH_SGLANG_VENV), a failure when SGLBENCH_REQUIRE_TIERS names
`sglang`."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Optional

import pytest

from cluster.server.process import free_port
from tests.conftest import tier_required
from tests.contract.sim_process import SimHandle, start_sim, stop_sim
from tests.unit.sim.test_roles import metrics, series_count, stage_count

REPO = Path(__file__).resolve().parents[2]
VENV = Path(os.environ.get("SGLBENCH_SGLANG_VENV") or REPO / ".ci" / "venvs" / "sglang")
SMG = VENV / "bin" / "smg"
MISSING = f"smg (SGLang's gateway) not found at {SMG} (scripts/setup_sglang_venv.sh installs it)"
READY_TIMEOUT_S = 60.0

pytestmark = pytest.mark.skipif(not SMG.exists() and not tier_required("sglang"), reason=MISSING)


def _http(url: str, body: Optional[dict[str, object]] = None, timeout: float = 30.0) -> tuple[int, bytes, dict[str, str]]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def test_a_simulated_pd_pair_serves_through_the_real_gateway(tmp_path: Path) -> None:
    if not SMG.exists():
        pytest.fail(MISSING + "; SGLBENCH_REQUIRE_TIERS requires this tier", pytrace=False)
    boot = free_port()
    knobs = {"time_scale": 0.05}
    prefill = start_sim(["--enable-metrics", "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port",
                         str(boot)], knobs)
    decode: Optional[SimHandle] = None
    gateway: Optional[subprocess.Popen[bytes]] = None
    log = tmp_path / "smg.log"
    port = free_port()
    try:
        decode = start_sim(["--enable-metrics", "--disaggregation-mode", "decode"], knobs)
        prom = free_port()
        with log.open("wb") as out:  # smg is started once both workers are healthy: it checks each once
            gateway = subprocess.Popen(
                [str(SMG), "launch", "--host", "127.0.0.1", "--port", str(port), "--pd-disaggregation",
                 "--prefill", prefill.base, str(boot), "--decode", decode.base, "--policy", "round_robin",
                 "--prometheus-host", "127.0.0.1", "--prometheus-port", str(prom)],
                stdout=out, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + READY_TIMEOUT_S
        ready = False
        while time.monotonic() < deadline and gateway.poll() is None and not ready:
            try:
                ready = _http(url + "/readiness", timeout=2)[0] == 200
            except OSError:
                pass
            time.sleep(0.2)
        assert ready, "smg never ready:\n" + log.read_text()[-3000:]
        workers = json.loads(_http(url + "/workers")[1])["workers"]
        assert sorted((w["worker_type"], w["runtime_type"]) for w in workers) == \
            [("decode", "sglang"), ("prefill", "sglang")]
        before = {"prefill": metrics(prefill), "decode": metrics(decode)}
        body = {"text": "the simulated pair", "sampling_params": {"max_new_tokens": 5, "ignore_eos": True}}
        status, raw, headers = _http(url + "/generate", body)
        assert status == 200, raw
        assert len(json.loads(raw)["output_ids"]) == 5
        assert headers.get("x-smg-routed-worker-id") == decode.base  # PD mode names the decode worker
        status, raw, _ = _http(url + "/generate", {**body, "stream": True})
        events = [json.loads(line[6:]) for line in raw.decode().splitlines()
                  if line.startswith("data: ") and line != "data: [DONE]"]
        assert status == 200 and len(events[-1]["output_ids"]) == 5 and raw.rstrip().endswith(b"data: [DONE]")
        after = {"prefill": metrics(prefill), "decode": metrics(decode)}
        for role, stages in (("prefill", ("prefill_bootstrap", "prefill_forward", "prefill_transfer_kv_cache")),
                             ("decode", ("decode_bootstrap", "decode_transferred", "decode_waiting"))):
            for stage in stages:
                assert stage_count(after[role], stage) - stage_count(before[role], stage) == 2, (role, stage)
        assert series_count(after["prefill"], "kv_transfer_latency_ms") - \
            series_count(before["prefill"], "kv_transfer_latency_ms") == 2
    finally:
        if gateway is not None:
            stop_sim(SimHandle(gateway, port))  # terminate, then kill after 10 s: by its own handle
        for h in (decode, prefill):
            if h is not None:
                stop_sim(h)
