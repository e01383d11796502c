"""`sglbench plan` says which port each variant's server will really use (issue 13 case 3)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from cluster.cli import app

REPO = Path(__file__).resolve().parents[2]


def test_plan_prints_the_real_port(tmp_path: Path) -> None:
    text = (REPO / "experiments" / "demo-sim.yaml").read_text()
    spec = tmp_path / "exp.yaml"
    spec.write_text(text)
    out = CliRunner().invoke(app, ["plan", str(spec)])
    assert out.exit_code == 0, out.output
    assert "a free port chosen at start" in out.output
