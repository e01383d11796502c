"""A Ray head with token authentication (RAY_AUTH_MODE=token), started and stopped by this test: `run --address` with
only RAY_AUTH_TOKEN set joins it (and says it set the mode); without a token `run` and `submit` say in one line what
to set, with the user-error exit code, and print no traceback."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from cluster.errors import EXIT_USER_ERROR

pytestmark = pytest.mark.ray

TOKEN = secrets.token_hex(16)
EXPERIMENT = """\
version: 1
name: token-auth
model: {{path: sim://tiny, engine: sim}}
server: {{args: {{max-running-requests: 8, kv-cache-dtype: bf16, attention-backend: flashinfer}}}}
sim: {{time_scale: 0.02}}
variants:
  - {{name: base, baseline: true}}
workloads:
  - {{name: w, input_tokens: 16, output_tokens: 8, num_requests: 4}}
load: {{concurrency: [2]}}
warmup_requests: 0
health_timeout_s: 120
max_client_lag_ms: 1000
output: {output}
"""


@pytest.fixture(scope="module")
def token_head() -> Iterator[tuple[str, str]]:
    """(GCS address, job API URL) of a one-node token-auth cluster on 127.0.0.1; shut down by its handle."""
    from tests.conftest import token_auth_head

    with token_auth_head(TOKEN) as cluster:
        url = cluster.head_node.webui_url
        yield cluster.address, url if url.startswith("http") else f"http://{url}"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS")}
    return {**env, "RAY_USAGE_STATS_ENABLED": "0", **extra}


def _cli(args: list[str], env: dict[str, str], cwd: Path, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cluster.cli", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=timeout_s)


def test_run_with_only_the_token_joins_and_says_it_set_the_mode(token_head: tuple[str, str], tmp_path: Path) -> None:
    gcs, _ = token_head
    (tmp_path / "exp.yaml").write_text(EXPERIMENT.format(output=tmp_path / "out"))
    proc = _cli(["run", "exp.yaml", "--address", gcs, "--no-progress"], _env(RAY_AUTH_TOKEN=TOKEN), tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "note: RAY_AUTH_TOKEN is set and RAY_AUTH_MODE is not: using RAY_AUTH_MODE=token" in proc.stderr
    assert TOKEN not in proc.stdout + proc.stderr
    assert (tmp_path / "out" / "token-auth" / "runs").is_dir()


@pytest.mark.parametrize("mode", [{}, {"RAY_AUTH_MODE": "token"}], ids=["mode-unset", "mode-token"])
def test_run_without_a_token_says_what_to_set(token_head: tuple[str, str], tmp_path: Path,
                                              mode: dict[str, str]) -> None:
    gcs, _ = token_head
    (tmp_path / "exp.yaml").write_text(EXPERIMENT.format(output=tmp_path / "out"))
    # HOME: no ~/.ray/auth_token of this machine's own local clusters is found
    proc = _cli(["run", "exp.yaml", "--address", gcs, "--no-progress"], _env(HOME=str(tmp_path), **mode),
                tmp_path, 180)
    out = proc.stdout + proc.stderr
    assert proc.returncode == EXIT_USER_ERROR, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    errors = [ln for ln in out.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and "RAY_AUTH_TOKEN" in errors[0] and "RAY_AUTH_MODE=token" in errors[0], out[-3000:]


def test_submit_without_a_token_is_one_line(token_head: tuple[str, str], tmp_path: Path) -> None:
    _, url = token_head
    (tmp_path / "exp.yaml").write_text(EXPERIMENT.format(output=tmp_path / "out"))
    proc = _cli(["submit", "exp.yaml", "--address", url, "--working-dir", str(tmp_path)], _env(), tmp_path, 120)
    assert proc.returncode == EXIT_USER_ERROR, proc.stderr[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"error: the Ray cluster at {url} requires token authentication: set RAY_AUTH_TOKEN to its token "
        "(`ray get-auth-token` on its head node) and RAY_AUTH_MODE=token"]


def test_submit_with_a_wrong_token_is_one_line(token_head: tuple[str, str], tmp_path: Path) -> None:
    _, url = token_head
    proc = _cli(["submit", "--stop", "nosuchjob", "--address", url], _env(RAY_AUTH_TOKEN="wrong-" + TOKEN[:8]),
                tmp_path, 120)
    assert proc.returncode == EXIT_USER_ERROR, proc.stderr[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"error: the Ray cluster at {url} refused the token in RAY_AUTH_TOKEN")
    assert TOKEN[:8] not in line
