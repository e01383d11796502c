"""`validate` builds every variant's server argv as `plan` and `run` do, so a refusal made while building it comes
at validate too (an SGLang alias given beside its full flag name: validate said ok, plan refused it)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from cluster.cli import app

SPEC = """version: 1
name: alias
model: {path: /nonexistent/model, engine: sglang, tp: 1}
engines: {sglang: {version: "0.5.23"}}
server:
  args: {mem-frac: 0.8, mem-fraction-static: 0.7, max-running-requests: 8, kv-cache-dtype: bf16}
variants: [{name: base, baseline: true}]
workloads: [{name: w, input_tokens: 8, output_tokens: 8, num_requests: 4}]
load: {concurrency: [1]}
"""


def test_validate_refuses_what_plan_refuses(tmp_path: Path) -> None:
    path = tmp_path / "alias.yaml"
    path.write_text(SPEC)
    for command in ("validate", "plan"):
        res = CliRunner().invoke(app, [command, str(path)])
        assert res.exit_code == 2, (command, res.output)
        assert "mem-frac" in res.output and "under two names" in res.output and str(path) in res.output


def test_validate_accepts_the_same_spec_with_one_spelling(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text(SPEC.replace("mem-frac: 0.8, ", ""))
    res = CliRunner().invoke(app, ["validate", str(path)])
    assert res.exit_code == 0, res.output
