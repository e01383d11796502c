"""Issue 15: `sglbench plan` on both Qwen3.5 study YAMLs prints the pinned flags and no fairness warning."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cluster.cli import app

REPO = Path(__file__).resolve().parents[2]
PINS = ("--mamba-radix-cache-strategy extra_buffer", "--attention-backend triton", "--kv-cache-dtype bf16",
        "--max-running-requests 64", "--moe-runner-backend ", "--fp4-gemm-backend ")
"""Equal on every variant; the two back ends explicit everywhere (the SM120 study's sweep varies their values)."""


@pytest.mark.parametrize("name", ["qwen35-397b-nvfp4-mtp.yaml", "qwen35-397b-nvfp4-sm120.yaml"])
def test_study_plan_prints_pins_and_no_warning(name: str) -> None:
    out = CliRunner().invoke(app, ["plan", str(REPO / "experiments" / name)], terminal_width=400)
    assert out.exit_code == 0, out.output
    argv_lines = [ln for ln in out.output.splitlines() if "sglang.launch_server" in ln]
    assert argv_lines and all(pin in ln for ln in argv_lines for pin in PINS)
    nextn = [ln for ln in argv_lines if "--speculative-algorithm NEXTN" in ln]
    assert len(nextn) == 3 and all("--speculative-moe-runner-backend triton" in ln for ln in nextn)
    assert "warning:" not in out.output and "error:" not in out.output
    assert "fairness: no findings" in out.output
