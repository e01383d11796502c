"""The simulator plays a deployment's roles in SGLang 0.5.23's flags and wire (simulated, labelled so): a prefill and
a decode server paired by bootstrap_host/port/room, and one server across two ranks. Each process is a real
subprocess on loopback, stopped by its own handle."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Optional

import pytest

from cluster.config.sim_knobs import Knobs
from cluster.engines.sim_launch import LaunchError, build_parser, resolve_args
from cluster.engines.sim_roles import FAKE_PREFILL_REFUSED
from cluster.server.process import free_port
from tests.contract.sim_process import REPO, SimHandle, start_sim, stop_sim

FAST = {"time_scale": 0.05}


def _resolve(argv: list[str]) -> dict[str, Any]:
    ns, _ = build_parser().parse_known_args(["--model-path", "m", *argv])
    return resolve_args(ns, Knobs())[0]


def stage_count(metrics: str, stage: str) -> float:
    m = re.search(r'sglang:per_stage_req_latency_seconds_count\{[^}]*stage="' + stage + r'"[^}]*\} (\S+)', metrics)
    assert m, f"no {stage} series in:\n{metrics[-2000:]}"
    return float(m.group(1))


def series_count(metrics: str, name: str) -> float:
    m = re.search(r"sglang:" + name + r"_count\{[^}]*\} (\S+)", metrics)
    assert m, f"no {name} series"
    return float(m.group(1))


def metrics(h: SimHandle) -> str:
    status, body = h.get("/metrics")
    assert status == 200
    return body.decode()


def test_prefill_refuses_the_fake_backend_in_sglangs_words() -> None:
    cmd = [sys.executable, "-m", "cluster.sim.server", "--model-path", "m", "--port", str(free_port()),
           "--disaggregation-mode", "prefill", "--disaggregation-transfer-backend", "fake"]
    try:
        res = subprocess.run(cmd, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True,
                             text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("a fake-backend prefill server started instead of being refused")
    assert res.returncode == 1 and FAKE_PREFILL_REFUSED in res.stderr, res.stderr
    args = _resolve(["--disaggregation-mode", "decode", "--disaggregation-transfer-backend", "fake"])
    assert (args["disaggregation_mode"], args["disaggregation_transfer_backend"]) == ("decode", "fake")


@pytest.mark.parametrize("argv, words", [
    (["--nnodes", "2", "--tp-size", "2"], "--dist-init-addr None"),
    (["--nnodes", "2", "--tp-size", "2", "--dist-init-addr", "nohost"], "HOST:PORT"),
    (["--nnodes", "2", "--node-rank", "2", "--tp-size", "2", "--dist-init-addr", "127.0.0.1:5000"], "node rank"),
    (["--nnodes", "2", "--tp-size", "3", "--dist-init-addr", "127.0.0.1:5000"], "not divisible"),
])
def test_bad_rank_flags_are_refused_before_anything_starts(argv: list[str], words: str) -> None:
    with pytest.raises(LaunchError, match=re.escape(words)):
        _resolve(argv)


def _post_json(h: SimHandle, path: str, body: dict[str, Any], out: dict[str, Any], key: str) -> None:
    out[key] = h.post(path, body)


def test_a_prefill_and_a_decode_server_pair_by_bootstrap_room() -> None:
    boot = free_port()
    prefill = start_sim(["--enable-metrics", "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port",
                         str(boot)], FAST)
    decode: Optional[SimHandle] = None
    unified: Optional[SimHandle] = None
    try:
        decode = start_sim(["--enable-metrics", "--disaggregation-mode", "decode"], FAST)
        unified = start_sim([], FAST)
        info = json.loads(prefill.get("/server_info")[1])
        assert (info["disaggregation_mode"], info["disaggregation_transfer_backend"],
                info["disaggregation_bootstrap_port"]) == ("prefill", "mooncake", boot)
        assert json.loads(decode.get("/model_info")[1])["disaggregation_mode"] == "decode"
        for h in (prefill, decode):  # SGLang's 400 without a room (managers/scheduler.py:3048-3065)
            status, body = h.post("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 2}})
            assert status == 400 and b"Disaggregated request received without bootstrap room id" in body
        before = {"prefill": metrics(prefill), "decode": metrics(decode)}
        base = {"input_ids": list(range(1, 65)), "sampling_params": {"max_new_tokens": 6, "ignore_eos": True}}
        fields = {"bootstrap_host": "127.0.0.1", "bootstrap_port": boot, "bootstrap_room": 2**62 + 7}
        out: dict[str, Any] = {}
        threads = [threading.Thread(target=_post_json, args=(h, "/generate", {**base, **fields}, out, k))
                   for h, k in ((decode, "d"), (prefill, "p"))]  # decode first: it waits for the prefill's KV
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        (ps, pb), (ds, db) = out["p"], out["d"]
        assert ps == 200 and ds == 200, (pb, db)
        assert len(json.loads(pb)["output_ids"]) == 1  # the prefill computes the first token only
        want = json.loads(unified.post("/generate", base)[1])["output_ids"]
        assert json.loads(db)["output_ids"] == want and len(want) == 6
        after = {"prefill": metrics(prefill), "decode": metrics(decode)}
        for h, stages in (("prefill", ("prefill_bootstrap", "prefill_forward", "prefill_transfer_kv_cache")),
                          ("decode", ("decode_bootstrap", "decode_transferred", "decode_waiting"))):
            for stage in stages:
                assert stage_count(after[h], stage) == stage_count(before[h], stage) + 1, stage
            assert series_count(after[h], "kv_transfer_bootstrap_ms") == \
                series_count(before[h], "kv_transfer_bootstrap_ms") + 1
        assert series_count(after["prefill"], "kv_transfer_latency_ms") == 1
        assert 'engine_type="decode"' in after["decode"] and 'engine_type="prefill"' in after["prefill"]
    finally:
        for h in (unified, decode, prefill):
            if h is not None:
                stop_sim(h)


def test_a_decode_server_fails_clearly_when_its_prefill_is_gone() -> None:
    decode = start_sim(["--disaggregation-mode", "decode"], FAST)
    boot = free_port()
    prefill: Optional[SimHandle] = None
    try:
        body = {"text": "hi", "sampling_params": {"max_new_tokens": 2}, "bootstrap_host": "127.0.0.1",
                "bootstrap_port": free_port(), "bootstrap_room": 1}
        t0 = time.monotonic()
        status, text = decode.post("/generate", body)
        assert status == 500 and b"gone or unreachable" in text and time.monotonic() - t0 < 10, text
        # the prefill dies while the decode waits for the room's KV (its request never reached the prefill)
        prefill = start_sim(["--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(boot)], FAST)
        out: dict[str, Any] = {}
        t = threading.Thread(target=_post_json, args=(decode, "/generate", {**body, "bootstrap_port": boot,
                                                                           "bootstrap_room": 2}, out, "d"))
        t.start()
        time.sleep(1.0)
        prefill.proc.send_signal(signal.SIGKILL)
        prefill.proc.wait(10)
        t.join(20)
        status, text = out["d"]
        assert status == 500 and f"127.0.0.1:{boot}".encode() in text, text
    finally:
        for h in (prefill, decode):
            if h is not None:
                stop_sim(h)


def test_a_prefill_server_gives_up_when_no_decode_registers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", "1")
    boot = free_port()
    prefill = start_sim(["--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(boot)], FAST)
    try:
        status, text = prefill.post("/generate", {"text": "hi", "bootstrap_host": "127.0.0.1",
                                                  "bootstrap_port": boot, "bootstrap_room": 3})
        assert status == 500 and b"KVPoll.Bootstrapping" in text, text
        # SGLang's fake host (its own warmup and health probes) skips the handshake and the transfer
        status, text = prefill.post("/generate", {"text": "hi", "bootstrap_host": "2.2.2.2", "bootstrap_room": 4})
        assert status == 200, text
    finally:
        stop_sim(prefill)


def _wait_status(h: SimHandle, path: str, want: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if h.get(path)[0] == want:
                return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


def _rank(rank: int, dist: int) -> SimHandle:
    return start_sim(["--tp-size", "2", "--nnodes", "2", "--node-rank", str(rank), "--dist-init-addr",
                      f"127.0.0.1:{dist}", "--enable-metrics"], FAST, wait_healthy=False)


@pytest.mark.parametrize("killed", [1, 0])
def test_a_server_across_two_ranks_serves_once_joined_and_dies_with_either(killed: int) -> None:
    dist = free_port()
    r0 = _rank(0, dist)
    r1: Optional[SimHandle] = None
    try:
        time.sleep(1.0)
        with pytest.raises(OSError):  # rank 0 serves nothing before every rank joined
            r0.get("/health")
        r1 = _rank(1, dist)
        assert _wait_status(r0, "/health", 200, 30), "rank 0 never served"
        assert _wait_status(r1, "/health", 200, 10)
        assert r1.get("/ping") == (200, b"") and r1.get("/health") == (200, b"")
        assert r1.get("/metrics")[0] == 200 and r1.get("/server_info")[0] == 404  # no API on rank 1
        info = json.loads(r0.get("/server_info")[1])
        assert (info["tp_size"], info["nnodes"], info["node_rank"], info["dist_init_addr"]) == \
            (2, 2, 0, f"127.0.0.1:{dist}")
        assert len(json.loads(r0.get("/sim_device")[1])["gpus"]) == 1  # tp 2 over 2 nodes: one GPU per rank
        dead, other = (r1, r0) if killed == 1 else (r0, r1)
        dead.proc.send_signal(signal.SIGKILL)
        dead.proc.wait(10)
        t0 = time.monotonic()
        rc = other.proc.wait(10)
        assert rc != 0 and time.monotonic() - t0 < 10
    finally:
        for h in (r1, r0):
            if h is not None:
                stop_sim(h)


def test_rank_one_exits_cleanly_when_rank_zero_is_stopped() -> None:
    dist = free_port()
    r0 = _rank(0, dist)
    r1 = _rank(1, dist)
    try:
        assert _wait_status(r0, "/health", 200, 30)
        r0.proc.terminate()
        assert r0.proc.wait(10) == 0
        assert r1.proc.wait(10) == 0
    finally:
        for h in (r1, r0):
            stop_sim(h)


def test_plan_refuses_a_fake_prefill_before_anything_starts() -> None:
    from cluster.engines.flagcheck import check_launch_flags
    from cluster.errors import PreflightError
    from cluster.plan.runs import expand_variants
    from tests.unit.engines.test_flagcheck import _spec

    spec = _spec(server={"args": {"disaggregation-mode": "prefill", "disaggregation-transfer-backend": "fake"}})
    with pytest.raises(PreflightError, match=re.escape(FAKE_PREFILL_REFUSED)):
        check_launch_flags(spec, expand_variants(spec), sys.executable, on_node=False)
