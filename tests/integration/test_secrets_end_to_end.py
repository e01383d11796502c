"""Secrets a spec declares (secret-looking env vars in server.env, an `api-key` server arg, `--api-key` in a
launcher) are never printed or written: plan, validate, run and report on the simulator, then every file under
the output root and the log dir, and everything printed, is searched for each secret value."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

pytestmark = pytest.mark.ray

SECRETS = {
    "OPENAI_API_KEY": "sk-planted-openai-4f1d9c",
    "HF_TOKEN": "hf_planted_token_7a2b",
    "db_password": "pw-planted-e5e1",
}
API_KEY = "planted-api-key-93c0"
LAUNCHER_KEY = "planted-launcher-key-11ab"


def _spec(tmp_path: Path) -> dict[str, object]:
    return {
        "version": 1, "name": "secrets",
        "model": {"path": "sim://tiny", "engine": "sim", "tp": 1},
        "engines": {"sim": {"launcher": [sys.executable, "-m", "cluster.sim.server", "--api-key", LAUNCHER_KEY]}},
        "server": {"args": {"api-key": API_KEY, "max-running-requests": 8},
                   "env": {**SECRETS, "PLAIN_SETTING": "visible"}},
        "sim": {"time_scale": 0.02},
        "variants": [{"name": "baseline", "baseline": True},
                     {"name": "nextn", "speculative": {"algorithm": "NEXTN", "num_steps": 1},
                      "env": {"MY_SECRET": "planted-variant-secret-0d"}}],
        "workloads": [{"name": "w", "input_tokens": 16, "output_tokens": 8, "num_requests": 4}],
        "load": {"concurrency": [1]},
        "warmup_requests": 1,
        "max_client_lag_ms": 1000.0,
        "output": str(tmp_path / "results"),
    }


def _file_text(path: Path) -> str:
    """A file's bytes as text, and for Parquet its decoded rows too (compressed pages hide strings from a grep)."""
    text = path.read_bytes().decode("utf-8", "replace")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        text += str(pq.read_table(path).to_pylist())
    return text


def _hits(text: str, secrets: list[str]) -> list[str]:
    return [s for s in secrets if s in text]


def test_no_secret_is_printed_or_written(ray_local: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capfd: pytest.CaptureFixture[str]) -> None:
    from cluster.cli import app

    secrets = [*SECRETS.values(), API_KEY, LAUNCHER_KEY, "planted-variant-secret-0d"]
    log_dir = tmp_path / "logs"
    monkeypatch.setenv("SGLBENCH_LOG_DIR", str(log_dir))
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "secrets.yaml"
    path.write_text(yaml.safe_dump(_spec(tmp_path)))
    runner = CliRunner()
    printed: list[str] = []
    for argv in (["validate", str(path)], ["plan", str(path)], ["run", str(path), "--no-progress"],
                 ["results", "report", "secrets", "--root", str(tmp_path / "results"), "--n-boot", "100"]):
        res = runner.invoke(app, argv, catch_exceptions=False)
        printed.append(res.output)
        assert res.exit_code == 0, (argv, res.output)
    plan_out = printed[1]
    assert "PLAIN_SETTING=visible" in plan_out and "sha256:" in plan_out, plan_out
    cap = capfd.readouterr()
    printed += [cap.out, cap.err]
    for text in printed:
        assert not _hits(text, secrets), text

    files = [p for root in (tmp_path / "results", log_dir) for p in root.rglob("*") if p.is_file()]
    assert any(p.name == "experiment.json" for p in files)
    assert any(p.suffix == ".log" for p in files), files
    leaked = {str(p): _hits(_file_text(p), secrets) for p in files}
    assert not {p: h for p, h in leaked.items() if h}
