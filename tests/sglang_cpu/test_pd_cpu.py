"""Real SGLang 0.5.23 prefill + decode servers on the CPU behind the real gateway's PD mode, KV over mooncake's TCP transport."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from cluster.engines.prometheus import parse_prometheus, sum_metric
from tests.conftest import tier_required
from sglang_cpu_server import HOST, SGLangCPUServer, baseline_args, free_port

PD_START_TIMEOUT_S = 600.0
"""Two servers starting together on a loaded 2-core machine: 171-221 s each when started one after the other."""
GATEWAY_READY_TIMEOUT_S = 60.0
REQUESTS = 3
MAX_NEW_TOKENS = 8
MOONCAKE_ENV = {"MOONCAKE_PROTOCOL": "tcp"}
"""SGLang's mooncake engine uses RDMA unless told otherwise (environ.py MOONCAKE_PROTOCOL, default "rdma")."""
PREFILL_STAGES = ("prefill_bootstrap", "prefill_forward", "prefill_transfer_kv_cache")
DECODE_STAGES = ("decode_prepare", "decode_bootstrap", "decode_transferred", "decode_waiting")
STAGE_SERIES = "sglang:per_stage_req_latency_seconds_count"
SETTLE_S = 2.0
SETTLE_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def mooncake_python(sglang_cpu_python: Path) -> Path:
    """The SGLang venv's interpreter where mooncake's transfer engine loads (setup_sglang_venv.sh installs it)."""
    probe = subprocess.run([str(sglang_cpu_python), "-c", "import mooncake.engine"], capture_output=True, text=True,
                           timeout=120)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        why = (f"mooncake's transfer engine does not load in {sglang_cpu_python.parent.parent} "
               f"(rerun scripts/setup_sglang_venv.sh): {last}")
        if tier_required("sglang"):
            pytest.fail(why + "; SGLBENCH_REQUIRE_TIERS requires the sglang tier", pytrace=False)
        pytest.skip(why)
    return sglang_cpu_python


def _stage_counts(server: SGLangCPUServer, stages: tuple[str, ...]) -> dict[str, float]:
    status, text = server.request("/metrics")
    assert status == 200, f"{server.url}/metrics answered {status}"
    samples = parse_prometheus(text)
    return {s: sum_metric(samples, STAGE_SERIES, stage=s) or 0.0 for s in stages}


def _settled_counts(server: SGLangCPUServer, stages: tuple[str, ...]) -> dict[str, float]:
    """Per-stage counts once no request is between stages: every stage equal, unchanged for SETTLE_S.

    A `/health` answers 200 as soon as its fake-host generation is scheduled (http_server.py), so the probes of
    the server start and of the gateway's worker registration may still be passing through the stages."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    last = _stage_counts(server, stages)
    while time.monotonic() < deadline:
        time.sleep(SETTLE_S)
        now = _stage_counts(server, stages)
        if now == last and len(set(now.values())) == 1:
            return now
        last = now
    raise AssertionError(f"{server.url}: per-stage counts did not settle in {SETTLE_TIMEOUT_S:.0f} s: {last}")


def _post(url: str, body: dict) -> tuple[int, dict[str, str], str]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read().decode()


def _wait_ready(gateway: subprocess.Popen, url: str, log: Path) -> None:
    deadline = time.monotonic() + GATEWAY_READY_TIMEOUT_S
    while time.monotonic() < deadline:
        assert gateway.poll() is None, f"smg exited with {gateway.returncode}:\n{log.read_text(errors='replace')[-3000:]}"
        try:
            with urllib.request.urlopen(url + "/readiness", timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        time.sleep(0.3)
    raise AssertionError(f"smg not ready after {GATEWAY_READY_TIMEOUT_S:.0f} s:\n{log.read_text(errors='replace')[-3000:]}")


def test_prefill_decode_pair_serves_through_gateway(mooncake_python: Path, mimo_models: Path, tmp_path: Path) -> None:
    """/generate through `smg --pd-disaggregation` answers 200 from the decode server, and each side's per-stage
    series count exactly the requests sent (the KV went prefill -> decode over mooncake TCP for each)."""
    model = mimo_models / "echo"
    bootstrap_port = free_port()
    prefill = SGLangCPUServer(mooncake_python, model, baseline_args() + [
        "--disaggregation-mode", "prefill", "--disaggregation-transfer-backend", "mooncake",
        "--disaggregation-bootstrap-port", str(bootstrap_port),
        # with overlap on, prefill.py:1494-1497 records a torch.cuda.Event for a cached-prefix early send
        "--disable-overlap-schedule",
    ], tmp_path / "prefill.log", env=MOONCAKE_ENV)
    decode = SGLangCPUServer(mooncake_python, model, baseline_args() + [
        "--disaggregation-mode", "decode", "--disaggregation-transfer-backend", "mooncake",
        # unset, a decode server builds a CUDA-pinned HiCache host pool for retraction (kv_cache_builder.py:186-240)
        "--disaggregation-decode-retraction-backup", "cpu_tensor",
    ], tmp_path / "decode.log", env=MOONCAKE_ENV)
    gateway: subprocess.Popen | None = None
    gateway_log = tmp_path / "smg.log"
    try:
        t0 = time.monotonic()
        with ThreadPoolExecutor(max_workers=2) as pool:  # independent until the first request: start both at once
            starts = [pool.submit(s.start, PD_START_TIMEOUT_S) for s in (prefill, decode)]
            start_s = [f.result() for f in starts]
        print(f"[pd] prefill healthy in {start_s[0]:.1f} s, decode in {start_s[1]:.1f} s "
              f"(both after {time.monotonic() - t0:.1f} s)")
        port = free_port()
        argv = [str(mooncake_python.parent / "smg"), "launch", "--host", HOST, "--port", str(port),
                "--pd-disaggregation", "--prefill", prefill.url, str(bootstrap_port), "--decode", decode.url,
                "--policy", "round_robin", "--prometheus-host", HOST, "--prometheus-port", str(free_port()),
                # no health probe inside the measured window: SGLang's /health runs a (fake-host) generation that
                # the per-stage series count too (http_server.py, SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION)
                "--health-check-interval-secs", "3600", "--request-timeout-secs", "120"]
        with open(gateway_log, "wb") as log:
            gateway = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                       stdin=subprocess.DEVNULL)
        gateway_url = f"http://{HOST}:{port}"
        _wait_ready(gateway, gateway_url, gateway_log)
        before = (_settled_counts(prefill, PREFILL_STAGES), _settled_counts(decode, DECODE_STAGES))
        for i in range(REQUESTS):
            t1 = time.monotonic()
            status, headers, body = _post(gateway_url + "/generate", {
                "text": f"The cat runs {i}",
                "sampling_params": {"temperature": 0, "max_new_tokens": MAX_NEW_TOKENS, "ignore_eos": True}})
            assert status == 200, (f"request {i}: {status} {body[:500]}\nprefill log:\n{prefill.log_tail(2500)}"
                                   f"\ndecode log:\n{decode.log_tail(2500)}")
            out = json.loads(body)
            assert out["meta_info"]["completion_tokens"] == MAX_NEW_TOKENS
            # in PD mode the gateway names the decode worker only (deployments-facts.md §2)
            assert headers.get("x-smg-routed-worker-id") == decode.url
            print(f"[pd] /generate {i}: 200 in {time.monotonic() - t1:.2f} s")
        after = (_settled_counts(prefill, PREFILL_STAGES), _settled_counts(decode, DECODE_STAGES))
        print(f"[pd] per-stage counts before {before} after {after}")
        for side_before, side_after in zip(before, after):
            for stage, n in side_after.items():
                assert n - side_before[stage] == REQUESTS, f"stage {stage}: {side_before[stage]} -> {n}"
        assert prefill.proc is not None and prefill.proc.poll() is None, prefill.log_tail()
        assert decode.proc is not None and decode.proc.poll() is None, decode.log_tail()
    finally:
        if gateway is not None and gateway.poll() is None:
            os.killpg(gateway.pid, signal.SIGTERM)
            try:
                gateway.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(gateway.pid, signal.SIGKILL)
                gateway.wait(timeout=15)
        for s in (prefill, decode):
            s.stop()
