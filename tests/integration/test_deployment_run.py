"""Deployments through `sglbench run` on local Ray, simulated servers behind the REAL gateway (smg from the SGLang
venv): two replicas against one on the same workload (per-replica counts recorded, GPUs and per-GPU throughput in
the row), every process's facts stored, nothing left running; one replica killed mid-window fails those runs naming
it, and every process of the deployment is torn down.

Skipped without smg in SGLBENCH_SGLANG_VENV (default .ci/venvs/sglang), a failure instead when
SGLBENCH_REQUIRE_TIERS names `sglang`."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from cluster.config.engines import EngineLauncher
from cluster.engines.gateway import gateway_program
from cluster.server.process import pid_alive, wait_group_gone
from tests.conftest import tier_required

pytestmark = pytest.mark.ray

REPO = Path(__file__).resolve().parents[2]
VENV = Path(os.environ.get("SGLBENCH_SGLANG_VENV") or REPO / ".ci" / "venvs" / "sglang")
SMG = Path(gateway_program(EngineLauncher(python=str(VENV / "bin" / "python"))))


@pytest.fixture(scope="module")
def smg() -> Path:
    if not SMG.exists():
        why = f"SGLang's gateway (smg) not installed at {SMG} (scripts/setup_sglang_venv.sh installs it)"
        if tier_required("sglang"):
            pytest.fail(why + "; SGLBENCH_REQUIRE_TIERS requires this tier", pytrace=False)
        pytest.skip(why)
    return SMG


def _spec(tmp_path: Path, smg: Path, name: str, variants: list[dict[str, Any]], num_requests: int = 24,
          time_scale: float = 0.05) -> dict[str, Any]:
    return {
        "version": 1, "name": name,
        "model": {"path": "sim://tiny", "engine": "sim", "tp": 1},
        "engines": {"sim": {"gateway": str(smg)}},
        "server": {"args": {"max-running-requests": 8, "enable-metrics": True}},
        "sim": {"time_scale": time_scale},
        "variants": variants,
        "workloads": [{"name": "w", "input_tokens": 32, "output_tokens": 16, "num_requests": num_requests}],
        "load": {"concurrency": [4]},
        "warmup_requests": 2,
        "max_client_lag_ms": 1000.0,
        "isolation": "gpus",
        "output": str(tmp_path / "results"),
    }


def _table(root: Path, name: str, table: str) -> list[dict[str, Any]]:
    """A table's rows with its partition columns (variant=...)."""
    import pyarrow.parquet as pq

    d = root / name / table
    return pq.read_table(d).to_pylist() if d.exists() else []


def _runs(root: Path, name: str) -> list[dict[str, Any]]:
    return sorted(_table(root, name, "runs"), key=lambda r: r["order_index"])


def _requests(root: Path, name: str) -> list[dict[str, Any]]:
    return _table(root, name, "requests")


def test_two_replicas_behind_the_gateway_against_one(ray_local: None, smg: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from cluster.cli import app

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SGLBENCH_LOG_DIR", str(tmp_path / "logs"))
    path = tmp_path / "dep.yaml"
    path.write_text(yaml.safe_dump(_spec(tmp_path, smg, "dep", [
        {"name": "one"},
        {"name": "two", "deployment": {"kind": "replicas", "replicas": 2, "policy": "round_robin"}}])))
    runner = CliRunner()
    plan = runner.invoke(app, ["plan", str(path)], catch_exceptions=False)
    assert plan.exit_code == 0, plan.output
    assert plan.output.count("cluster.sim.server") == 3 and "smg launch --worker-urls" in plan.output
    res = runner.invoke(app, ["run", str(path), "--no-progress"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    rows = {r["variant"]: r for r in _runs(tmp_path / "results", "dep")}
    assert {v: r["status"] for v, r in rows.items()} == {"one": "ok", "two": "ok"}, \
        {v: r["invalid_reasons"] for v, r in rows.items()}
    two = rows["two"]
    split = json.loads(two["worker_requests_json"])
    assert len(split) == 2 and sum(split.values()) == 24 and all(n == 12 for n in split.values()), split  # round robin
    assert two["m_worker_imbalance"] == pytest.approx(1.0)
    assert rows["one"]["worker_requests_json"] is None
    prov = json.loads(two["provenance_json"])
    assert prov["load_event_loop"].startswith("uvloop "), prov["load_event_loop"]  # the loop a node runs
    assert prov["gpus"] == 2 and prov["deployment"]["kind"] == "replicas"
    names = [p["name"] for p in prov["processes"]]
    assert names == ["replica-0", "replica-1", "gateway"], names
    reqs = [r for r in _requests(tmp_path / "results", "dep") if r["variant"] == "two"]
    assert {r["worker"] for r in reqs} == set(split)
    for p in prov["processes"]:
        assert not pid_alive(p["pid"]), f"{p['name']} (pid {p['pid']}) outlived its segment"


def test_a_replica_killed_mid_window_fails_the_run_naming_it(ray_local: None, smg: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from cluster.config.experiment import ExperimentSpec
    from cluster.distributed.driver import Driver
    from cluster.distributed.progress import PointRecords, ProgressEvent

    monkeypatch.setenv("SGLBENCH_LOG_DIR", str(tmp_path / "logs"))
    spec = ExperimentSpec.model_validate(_spec(tmp_path, smg, "kill", [
        {"name": "two", "deployment": {"kind": "replicas", "replicas": 2, "policy": "round_robin"}}],
        num_requests=60, time_scale=0.2))
    holder: dict[str, Any] = {}
    killed: list[tuple[str, int]] = []

    def on_event(e: ProgressEvent) -> None:
        # the first finished requests of the window: replica-1's server is killed by its own pid, as recorded
        if isinstance(e, PointRecords) and not killed:
            facts = holder["drv"].result.servers["two"].facts
            proc = next(p for p in facts.processes if p.name == "replica-1")
            os.kill(proc.facts.server_pid or proc.facts.pid, signal.SIGKILL)
            killed.append((proc.name, proc.facts.server_pid or proc.facts.pid))

    drv = Driver(spec, tmp_path, None, lambda s: None, lambda p, s: None, on_event)
    holder["drv"] = drv
    result = drv.run()
    assert killed, "the window never streamed a record"
    rows = _runs(tmp_path / "results", "kill")
    assert [r["status"] for r in rows] == ["failed"], [(r["status"], r["failure_reason"]) for r in rows]
    text = (rows[0]["failure_reason"] or "") + "\n" + (rows[0]["log_tail"] or "")
    assert "replica-1" in text and "died" in text, text[:3000]
    assert "(dead: replica-1" in rows[0]["failure_reason"], rows[0]["failure_reason"]  # the reason names it too
    facts = result.servers["two"].facts
    for p in facts.processes:  # every process of the deployment torn down, the gateway too
        assert wait_group_gone(p.facts.pgid, 20, poll_s=0.2) == [], f"{p.name} group {p.facts.pgid} survived"


def test_prefill_decode_pools_behind_the_gateway_in_pd_mode(ray_local: None, smg: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """1 prefill + 2 decode simulator servers (SIMULATED prefill/decode: the simulator's own bootstrap exchange over
    SGLang's request fields) behind the real gateway in PD mode, through `sglbench run`: every request answered by a
    decode server, the split over the two decode servers recorded, each role's series scraped under its name."""
    from cluster.cli import app

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SGLBENCH_LOG_DIR", str(tmp_path / "logs"))
    path = tmp_path / "pd.yaml"
    path.write_text(yaml.safe_dump(_spec(tmp_path, smg, "pd", [
        {"name": "pd", "deployment": {"kind": "pd", "prefill": {"tp": 1}, "decode": {"servers": 2, "tp": 1},
                                      "policy": "round_robin"}}], num_requests=16)))
    res = CliRunner().invoke(app, ["run", str(path), "--no-progress"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    rows = _runs(tmp_path / "results", "pd")
    assert [r["status"] for r in rows] == ["ok"], [(r["status"], r["invalid_reasons"], r["failure_reason"]) for r in rows]
    prov = json.loads(rows[0]["provenance_json"])
    procs = {p["name"]: p for p in prov["processes"]}
    assert set(procs) == {"prefill-0", "decode-0", "decode-1", "gateway"}
    assert "--disaggregation-mode" in procs["prefill-0"]["argv"] and "--pd-disaggregation" in procs["gateway"]["argv"]
    split = json.loads(rows[0]["worker_requests_json"])
    decode_urls = {procs["decode-0"]["base_url"], procs["decode-1"]["base_url"]}
    assert set(split) == decode_urls and sum(split.values()) == 16, split  # the header names the decode side
    assert prov["gpus"] == 3
    import pyarrow.parquet as pq

    sm = pq.read_table(tmp_path / "results" / "pd" / "server_metrics").to_pylist()
    assert {lab.split("process=")[1].split(",")[0] for r in sm if "process=" in (lab := r["labels"] or "")} >= {
        "prefill-0", "decode-0", "decode-1"}  # each role's series under its name, on the window's clock
    parts = json.loads(rows[0]["ttft_parts_json"] or "null")  # the TTFT split from the servers' stage histograms
    assert parts is not None and parts.get("prefill_bootstrap_s") is not None, parts
    assert parts.get("decode_transferred_s") is not None, parts
