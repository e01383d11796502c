"""The real SGLang gateway (`smg` from the SGLang venv) over two simulator servers, no Ray: started from
engines/gateway.py's argv, ready on /readiness, each request's `worker` recorded by sglbench's own client from the
routed-worker header and the split equal to the gateway's smg_worker_requests_total; with --disable-retries a
killed replica fails the requests routed to it, naming its URL. The PD argv is accepted by smg's own parser.

Skipped without smg in SGLBENCH_SGLANG_VENV (default .ci/venvs/sglang), a failure instead when
SGLBENCH_REQUIRE_TIERS names `sglang` (CI builds that venv with scripts/setup_sglang_venv.sh, smg included)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Iterator

import pytest

from cluster.engines.base import Prompt, StreamRequest
from cluster.engines.gateway import (
    METRICS_PATH, READINESS_PATH, PrefillWorker, gateway_counters, gateway_program, pd_gateway, regular_gateway,
)
from cluster.engines.registry import get_engine
from cluster.kernel.records import RequestRecord
from cluster.loadgen.client import StreamPool, stream_request
from cluster.loadgen.sink import request_batches
from cluster.analysis.metrics import summarize_run
from cluster.config.engines import EngineLauncher
from cluster.server.process import free_port
from tests.conftest import tier_required
from tests.contract.sim_process import SimHandle, start_sim, stop_sim

REPO = Path(__file__).resolve().parents[2]
VENV = Path(os.environ.get("SGLBENCH_SGLANG_VENV") or REPO / ".ci" / "venvs" / "sglang")
SMG = Path(gateway_program(EngineLauncher(python=str(VENV / "bin" / "python"))))
MISSING = f"SGLang's gateway (smg) not installed at {SMG} (scripts/setup_sglang_venv.sh installs it)"
READY_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def smg() -> Path:
    if not SMG.exists():
        if tier_required("sglang"):
            pytest.fail(MISSING + "; SGLBENCH_REQUIRE_TIERS requires this tier", pytrace=False)
        pytest.skip(MISSING)
    return SMG


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


class Gateway:
    """smg started by this test from the argv builder, stopped by its own process group."""

    def __init__(self, argv: tuple[str, ...], port: int, metrics_port: int, log: Path) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.metrics_url = f"http://127.0.0.1:{metrics_port}{METRICS_PATH}"
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self) -> float:
        t0 = time.monotonic()
        while time.monotonic() - t0 < READY_TIMEOUT_S:
            assert self.proc.poll() is None, f"smg exited {self.proc.returncode}:\n{self.log.read_text()[-3000:]}"
            try:
                if _get(self.url + READINESS_PATH)[0] == 200:
                    return time.monotonic() - t0
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"smg not ready in {READY_TIMEOUT_S} s:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # its own group: start_new_session above
            try:
                self.proc.wait(timeout=20)  # it drains for about 5 s
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


@pytest.fixture
def sims() -> Iterator[list[SimHandle]]:
    started: list[SimHandle] = []
    try:
        for _ in range(2):
            started.append(start_sim(["--host", "127.0.0.1"], {"time_scale": 0.02}))
        yield started
    finally:
        for h in started:
            stop_sim(h)


def _send(url: str, n: int) -> list[RequestRecord]:
    """n native streaming requests through sglbench's own client, two at a time."""
    engine = get_engine("sim")

    async def main() -> list[RequestRecord]:
        async with StreamPool(url, 2) as pool:
            async def one(i: int) -> RequestRecord:
                req = engine.build_request(StreamRequest("native", Prompt(input_ids=(1, 2, 3, i)), 4, True, 0.0,
                                                         "sim-model"))
                rec = RequestRecord(request_index=i, intended_send_ns=0, actual_send_ns=0, prompt_tokens_sent=4,
                                    max_tokens=4)
                await stream_request(pool, req.path, req.body, engine.new_parser("native"), time.monotonic_ns(), 30.0,
                                     rec, req.headers)
                return rec
            return list(await asyncio.gather(*(one(i) for i in range(n))))

    return asyncio.run(main())


def test_two_replicas_behind_the_real_gateway(smg: Path, sims: list[SimHandle], tmp_path: Path) -> None:
    a, b = (h.base for h in sims)
    port, metrics_port = free_port(), free_port()
    cmd = regular_gateway(str(smg), [a, b], "round_robin", port, metrics_port)
    assert "--disable-retries" in cmd.argv
    gw = Gateway(cmd.argv, port, metrics_port, tmp_path / "smg.log")
    try:
        ready_s = gw.wait_ready()
        recs = _send(gw.url, 10)
        assert [r.error for r in recs] == [None] * 10
        split = Counter(r.worker for r in recs)
        assert set(split) <= {a, b}, split  # each record names one of the two workers, as given to --worker-urls
        counters = gateway_counters(_get(gw.metrics_url)[1])
        assert counters.worker_requests == {a: float(split[a]), b: float(split[b])}
        assert split == Counter({a: 5, b: 5})  # round robin over 10
        assert counters.retries == 0.0
        reqs, chunks = request_batches(recs)
        assert reqs.column("worker").to_pylist() == [r.worker for r in recs]
        assert summarize_run(reqs, chunks, 1.0)["worker_imbalance"] == 1.0  # 5 and 5: max share = mean share
        print(f"[gateway] ready in {ready_s:.2f} s; split {dict(split)}; gateway counts {counters.worker_requests}")

        # one replica killed: with --disable-retries the requests routed to it fail at once, naming its URL
        sims[1].proc.kill()
        sims[1].proc.wait(timeout=10)
        after = _send(gw.url, 4)
        failed = [r for r in after if r.error is not None]
        assert failed and all(b in (r.error or "") and r.worker is None and r.http_status == 500 for r in failed)
        assert all(r.worker == a for r in after if r.error is None)
        assert gateway_counters(_get(gw.metrics_url)[1]).retries == 0.0
    finally:
        gw.stop()
    assert gw.proc.returncode is not None


def test_the_pd_argv_is_what_smg_s_own_parser_reads(smg: Path) -> None:
    cmd = pd_gateway(str(smg), [PrefillWorker("http://127.0.0.1:30001", 8998),
                                PrefillWorker("http://127.0.0.1:30003", None)], ["http://127.0.0.1:30002"],
                     "round_robin", 40000, 40001, decode_policy="power_of_two", gateway_args={"log_level": "info"})
    assert cmd.argv[1] == "launch"
    read = ("import json, sys; from smg.launch_router import parse_router_args; a = parse_router_args(sys.argv[1:]); "
            "print(json.dumps({k: getattr(a, k) for k in ('pd_disaggregation', 'prefill_urls', 'decode_urls', "
            "'policy', 'prefill_policy', 'decode_policy', 'host', 'port', 'prometheus_host', 'prometheus_port', "
            "'disable_retries', 'log_level', 'worker_urls')}))")
    proc = subprocess.run([str(smg.parent / "python"), "-c", read, *cmd.argv[2:]], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {
        "pd_disaggregation": True, "prefill_urls": [["http://127.0.0.1:30001", 8998], ["http://127.0.0.1:30003", None]],
        "decode_urls": ["http://127.0.0.1:30002"], "policy": "round_robin", "prefill_policy": None,
        "decode_policy": "power_of_two", "host": "127.0.0.1", "port": 40000, "prometheus_host": "127.0.0.1",
        "prometheus_port": 40001, "disable_retries": True, "log_level": "info", "worker_urls": []}
