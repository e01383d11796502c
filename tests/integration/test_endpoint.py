"""An endpoint already running as a variant (deployment: {kind: endpoint}): the simulator started here, outside
sglbench, and stopped by its own handle, measured through `sglbench run` and the driver on local Ray; nothing
launched, killed or flushed without leave; an unreachable endpoint refused before anything runs (exit 3, naming
the URL); a restart under the run (its /server_info startup_time changes) makes the runs measured on the new
server invalid, naming that; its API key never printed or written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml
from typer.testing import CliRunner

from cluster.server.process import free_port

pytestmark = pytest.mark.ray

KEY = "planted-endpoint-key-5c21e9"
KEY_ENV = "SGLBENCH_TEST_ENDPOINT_KEY"


class SimEndpoint:
    """The simulator as someone else's server: started and stopped by this test, never by sglbench."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.proc: "subprocess.Popen[bytes] | None" = None

    def start(self) -> None:
        argv = [sys.executable, "-m", "cluster.sim.server", "--model-path", "sim://tiny", "--host", "127.0.0.1",
                "--port", str(self.port), "--max-running-requests", "8", "--api-key", KEY]
        env = {**os.environ, "SGLBENCH_SIM": json.dumps({"time_scale": 0.02})}
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"{self.url}/health", timeout=1).close()
                return
            except OSError:
                assert self.proc.poll() is None, "simulator exited"
                time.sleep(0.1)
        raise AssertionError("simulator did not answer /health in 60 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=20)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@pytest.fixture
def endpoint() -> Iterator[SimEndpoint]:
    ep = SimEndpoint(free_port())
    ep.start()
    try:
        yield ep
    finally:
        ep.stop()


def _spec(tmp_path: Path, url: str, repeats: int = 1, flush: bool = False) -> dict[str, Any]:
    return {
        "version": 1, "name": "endpoint",
        "model": {"path": "sim://tiny", "engine": "sim", "tp": 1},
        "variants": [{"name": "prod", "deployment": {"kind": "endpoint", "url": url, "api_key_env": KEY_ENV,
                                                     "flush_cache": flush}}],
        "workloads": [{"name": "w", "input_tokens": 16, "output_tokens": 8, "num_requests": 4}],
        "load": {"concurrency": [1]},
        "repeats": repeats,
        "warmup_requests": 1,
        "max_client_lag_ms": 1000.0,
        "output": str(tmp_path / "results"),
    }


def _runs(root: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    rows: list[dict[str, Any]] = []
    for f in sorted((root / "endpoint" / "runs").rglob("*.parquet")):
        rows += pq.read_table(f).to_pylist()
    return sorted(rows, key=lambda r: r["order_index"])


def _text(path: Path) -> str:
    text = path.read_bytes().decode("utf-8", "replace")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        text += str(pq.read_table(path).to_pylist())
    return text


def test_endpoint_measured_through_run_nothing_launched_key_never_written(
        ray_local: None, endpoint: SimEndpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str]) -> None:
    from cluster.cli import app

    monkeypatch.setenv(KEY_ENV, KEY)
    log_dir = tmp_path / "logs"
    monkeypatch.setenv("SGLBENCH_LOG_DIR", str(log_dir))
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "endpoint.yaml"
    path.write_text(yaml.safe_dump(_spec(tmp_path, endpoint.url)))
    root = tmp_path / "results"
    printed: list[str] = []
    runner = CliRunner()
    for argv in (["validate", str(path)], ["plan", str(path)], ["run", str(path), "--no-progress"],
                 ["results", "show", "endpoint", "--root", str(root)],
                 ["results", "compare", "endpoint", "--root", str(root)]):
        res = runner.invoke(app, argv, catch_exceptions=False)
        printed.append(res.output)
        assert res.exit_code == 0, (argv, res.output)
    plan_out = printed[1]
    assert f"is an endpoint already running at {endpoint.url}: no argv" in plan_out, plan_out
    assert "cluster.sim.server" not in plan_out  # no launch command
    assert endpoint.alive(), "sglbench stopped a server it did not launch"
    rows = _runs(root)
    assert [r["status"] for r in rows] == ["ok"], [(r["status"], r["invalid_reasons"]) for r in rows]
    row = rows[0]
    assert row["launched_by_sglbench"] is False and row["endpoint_url"] == endpoint.url
    assert row["n_ok"] == 4 and json.loads(row["launch_argv_json"]) == []
    prov = json.loads(row["provenance_json"])
    assert prov["server_pid"] is None and prov["gpu_ids"] == []
    ep = prov["endpoint"]
    assert ep["flush_cache"] is False and ep["cache_flushed"] is False and ep["start_mark"] is not None
    assert ep["server_info"]["startup_time"] is not None and ep["models"]["data"], ep
    # no flush without leave: the window was not flushed, and that alone does not make the run invalid
    assert row["invalid_reasons"] is None
    # the gate, the workload audit and the client-lag rule judged it as any launched server's run
    assert prov["correctness"]["passed"] is True and not prov["correctness"].get("skipped"), prov["correctness"]
    assert row["distinct_prompts_sent"] == 4 and row["distinct_prompts_planned"] == 4
    assert row["m_lag_ms_p99"] is not None and row["m_lag_ms_p99"] < 1000.0
    assert "not launched by sglbench" in printed[2] or "endpoint" in printed[2]
    assert "endpoint" in printed[3] and endpoint.url in printed[3], printed[3]
    assert "endpoint" in printed[4], printed[4]
    cap = capfd.readouterr()
    printed += [cap.out, cap.err]
    assert not [t for t in printed if KEY in t]
    files = [p for d in (root, log_dir) if d.exists() for p in d.rglob("*") if p.is_file()]
    assert any(p.suffix == ".parquet" for p in files)
    assert not [str(p) for p in files if KEY in _text(p)]


def test_unreachable_endpoint_is_exit_3_naming_the_url_before_anything_runs(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from cluster.cli import app

    monkeypatch.setenv(KEY_ENV, KEY)
    monkeypatch.chdir(tmp_path)
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    path = tmp_path / "endpoint.yaml"
    path.write_text(yaml.safe_dump(_spec(tmp_path, url)))
    import cluster.distributed.driver as driver

    started: list[object] = []
    monkeypatch.setattr(driver, "init_ray", lambda *a, **k: started.append(a))  # Ray is neither started nor joined
    res = CliRunner().invoke(app, ["run", str(path), "--no-progress"])
    assert res.exit_code == 3, res.output
    assert url in res.output and "unreachable" in res.output, res.output
    assert not (tmp_path / "results").exists()  # nothing ran, nothing was written
    assert started == []  # refused before Ray (so before any actor or placement)
    # a job's driver (ray job submit, no CLI preflight before it) refuses it too, before the node's preflight task
    from cluster.config.loader import load_spec
    from cluster.errors import EnvironmentFault

    def no_task(*a: object, **k: object) -> None:
        raise AssertionError("the node preflight task ran")

    import cluster.distributed.cluster_state as cluster_state

    monkeypatch.setattr(cluster_state, "remote_preflight", no_task)
    with pytest.raises(EnvironmentFault, match=url):
        driver.run_experiment(load_spec(path), base_dir=tmp_path, log=lambda s: None)
    assert not (tmp_path / "results" / "endpoint" / "runs").exists()


def test_restart_under_the_run_makes_later_runs_invalid_naming_it(
        ray_local: None, endpoint: SimEndpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cluster.config.loader import load_spec
    from cluster.distributed.driver import run_experiment

    monkeypatch.setenv(KEY_ENV, KEY)
    path = tmp_path / "endpoint.yaml"
    path.write_text(yaml.safe_dump(_spec(tmp_path, endpoint.url, repeats=2, flush=True)))
    spec = load_spec(path)
    restarted: list[str] = []
    import ray

    free_gpus: list[float] = []

    def on_run(plan: Any, status: str) -> None:
        free_gpus.append(ray.available_resources().get("GPU", 0.0))  # the endpoint's segment holds none
        if not restarted:  # after the first run: the server is restarted on the same port, under the experiment
            endpoint.stop()
            endpoint.start()
            restarted.append(plan.run_key)

    result = run_experiment(spec, base_dir=tmp_path, log=lambda s: None, on_run=on_run)
    assert restarted and result.counts().get("failed", 0) == 0, result.counts()
    rows = _runs(tmp_path / "results")
    assert [r["status"] for r in rows] == ["ok", "invalid"], [(r["status"], r["invalid_reasons"]) for r in rows]
    reason = rows[1]["invalid_reasons"]
    assert f"endpoint {endpoint.url} restarted under the run" in reason and "server_info.startup_time" in reason
    assert rows[0]["invalid_reasons"] is None  # measured on the server that was checked: whole
    assert free_gpus == [ray.cluster_resources()["GPU"]] * 2, free_gpus
    assert [json.loads(r["provenance_json"])["endpoint"]["cache_flushed"] for r in rows] == [True, True]  # leave given
    assert endpoint.alive()
