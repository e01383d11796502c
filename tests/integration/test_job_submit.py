"""`sglbench submit` through Ray's real job API: a local head with the dashboard, a sim experiment, the dataset read back."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest


EXPERIMENT = """\
version: 1
name: submit-demo
model: {{path: sim://tiny, engine: sim}}
server: {{args: {{max-running-requests: 8, kv-cache-dtype: bf16, attention-backend: flashinfer}}}}
sim: {{time_scale: 0.02}}
variants:
  - {{name: base, baseline: true}}
workloads:
  - {{name: w, input_tokens: 16, output_tokens: 8, num_requests: 6}}
load: {{concurrency: [2]}}
warmup_requests: 0
health_timeout_s: 120
output: {output}
"""
JOB_TOKEN = "sglbench-job-submit-test-" + "0123456789abcdef" * 2
HEAD: list[object] = []
"""The module's head (ray._private.node.Node), for the test of what its job supervisor resolves."""


@pytest.fixture(scope="module")
def job_api() -> Iterator[str]:
    """A one-node Ray cluster with the dashboard (job API) on 127.0.0.1, started and stopped by this test.

    Token auth with this module's own token in RAY_AUTH_TOKEN, so the head, `sglbench submit` and the job's driver
    (which inherits the head's environment) hold the same token by construction. Left to Ray's default (token auth
    from ~/.ray/auth_token, the machine's shared file, or whatever mode an earlier test in this worker left), the
    job's driver was once refused by its own cluster in CI ("InvalidAuthToken ... requires token authentication")."""
    from tests.conftest import token_auth_head

    with token_auth_head(JOB_TOKEN) as cluster:
        HEAD[:] = [cluster.head_node]
        url = cluster.head_node.webui_url
        yield url if url.startswith("http") else f"http://{url}"


def _submit(args: list[str], env: dict[str, str], cwd: Path, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cluster.cli", "submit", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=timeout_s)


@pytest.mark.ray
def test_submit_runs_the_driver_and_writes_the_dataset(job_api: str, tmp_path: Path) -> None:
    import pyarrow.dataset as ds

    from cluster.distributed.jobs import JobClient

    work = tmp_path / "work"
    work.mkdir()
    out = tmp_path / "out"
    (work / "exp.yaml").write_text(EXPERIMENT.format(output=out))
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    proc = _submit(["exp.yaml", "--address", job_api, "--job-id", "sglbench-submit-test",
                    "--env", "SGLBENCH_TEST_MARK=1", "--follow"], env, cwd=work)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "SUCCEEDED" in proc.stderr
    assert '"dataset_root"' in proc.stdout, "the driver's summary line comes through the followed logs"
    assert "means over ok repeats" in proc.stdout and "×base" in proc.stdout, "the comparison `run` prints"

    client = JobClient(job_api)
    assert client.status("sglbench-submit-test") == "SUCCEEDED"
    info = client._client.get_job_info("sglbench-submit-test")
    assert info.entrypoint == "python -m cluster.distributed.driver exp.yaml"
    assert info.runtime_env is not None
    assert info.runtime_env["env_vars"] == {"SGLBENCH_TEST_MARK": "1"}
    assert "pip" not in info.runtime_env and "conda" not in info.runtime_env

    requests = ds.dataset(out / "submit-demo" / "requests", format="parquet", partitioning="hive").to_table()
    assert requests.num_rows == 6
    assert set(requests.column("variant").to_pylist()) == {"base"}
    runs = ds.dataset(out / "submit-demo" / "runs", format="parquet", partitioning="hive").to_table()
    assert runs.num_rows == 1


@pytest.mark.ray
def test_the_job_supervisor_resolves_this_head_whatever_else_runs(job_api: str) -> None:
    """Ray's job supervisor gives a job's driver RAY_ADDRESS by resolving "auto" against its head's temp dir: the
    address in its `ray_current_cluster`, else any raylet running on the machine. In the shared /tmp/ray the last
    Cluster started on the machine writes that file, and a CI run's job driver joined the cluster another xdist worker
    had started (InvalidAuthToken, then gone when it shut down); with a temp dir of its own and no file in it, the
    driver took whichever raylet came first. The head's own temp dir names the head, which listens on loopback."""
    from ray._common.utils import get_default_ray_temp_dir
    from ray._private.services import canonicalize_bootstrap_address_or_die
    from ray._private.utils import read_ray_address

    node = HEAD[0]
    temp_dir = node.get_temp_dir_path()  # type: ignore[attr-defined]
    assert os.path.realpath(temp_dir) != os.path.realpath(get_default_ray_temp_dir())
    assert read_ray_address(temp_dir) == node.address  # type: ignore[attr-defined]
    assert canonicalize_bootstrap_address_or_die("auto", temp_dir) == node.address  # type: ignore[attr-defined]
    assert node.node_ip_address == "127.0.0.1" and node.address.startswith("127.0.0.1:")  # type: ignore[attr-defined]


@pytest.mark.ray
def test_bad_experiment_never_reaches_the_cluster(job_api: str, tmp_path: Path) -> None:
    from cluster.distributed.jobs import JobClient

    (tmp_path / "bad.yaml").write_text(EXPERIMENT.format(output=tmp_path / "out").replace(
        "num_requests: 6", "num_requests: -6"))
    before = len(JobClient(job_api)._client.list_jobs())
    proc = _submit(["bad.yaml", "--address", job_api, "--working-dir", str(tmp_path)], dict(os.environ), cwd=tmp_path)
    assert proc.returncode == 2
    assert "bad.yaml:9: workloads.0.num_requests" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(JobClient(job_api)._client.list_jobs()) == before


@pytest.mark.ray
def test_stop_a_running_job(job_api: str, tmp_path: Path) -> None:
    from cluster.distributed.jobs import JobClient, JobRequest

    client = JobClient(job_api)
    job = client._client.submit_job(entrypoint=f"{sys.executable} -c 'import time; time.sleep(120)'")
    proc = _submit(["--stop", job, "--address", job_api], dict(os.environ), cwd=tmp_path, timeout_s=60)
    assert proc.returncode == 0, proc.stderr
    assert client.wait(job, timeout_s=60, poll_s=0.5) == "STOPPED"
    assert JobRequest("x.yaml").runtime_env() == {}


def test_request_shape_and_secret_handling(tmp_path: Path) -> None:
    from cluster.distributed.jobs import JobClient, JobError, JobRequest, auth_headers, cluster_path, parse_env

    req = JobRequest("my exp.yaml", working_dir=tmp_path, env={"A": "1"}, output="s3://b/p")
    assert req.entrypoint() == "python -m cluster.distributed.driver 'my exp.yaml' --output s3://b/p"
    env = req.runtime_env()
    assert env["working_dir"] == str(tmp_path) and env["env_vars"] == {"A": "1"}
    assert {"/results/", "/.ci/", "/venv/", ".venv*/"} <= set(env["excludes"])
    assert set(env) == {"working_dir", "excludes", "env_vars"}
    assert parse_env(["A=1", "B=x=y"]) == {"A": "1", "B": "x=y"}
    for bad in (["1A=2"], ["NOEQUALS"], ["HF_TOKEN=abc"], ["my_api_key=abc"]):
        with pytest.raises(JobError):
            parse_env(bad)
    assert auth_headers("T", {"T": "s3cr3t"}) == {"Authorization": "Bearer s3cr3t"}
    assert auth_headers("T", {}) == {}
    with pytest.raises(JobError) as info:
        auth_headers("T", {"T": " "}, required=True)
    assert "T" in str(info.value)
    (tmp_path / "sub").mkdir()
    assert cluster_path(tmp_path / "sub" / "e.yaml", tmp_path) == "sub/e.yaml"
    with pytest.raises(JobError):
        cluster_path(tmp_path.parent / "e.yaml", tmp_path)
    with pytest.raises(JobError) as unreachable:
        JobClient("http://127.0.0.1:1", headers={"Authorization": "Bearer s3cr3t"})
    assert "s3cr3t" not in str(unreachable.value)


def test_token_env_that_is_named_must_be_set(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SGLBENCH_MISSING_TOKEN"}
    proc = _submit(["--stop", "x", "--token-env", "SGLBENCH_MISSING_TOKEN"], env, cwd=tmp_path, timeout_s=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: --token-env SGLBENCH_MISSING_TOKEN: that environment variable is empty or not set"
