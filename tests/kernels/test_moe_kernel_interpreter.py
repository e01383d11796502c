"""The tuning stage's Triton MoE kernel matches its torch reference under Triton's CPU interpreter.

The `gpu` tests run the same kernel on a CUDA device; this one checks its index arithmetic (routing, expert
alignment, masking) on any machine, using the SGLang-parser tier's environment, which has CPU torch and Triton.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import tier_required

REPO = Path(__file__).resolve().parents[2]


def _python() -> Path:
    import os

    venv = Path(os.environ.get("SGLBENCH_SGLANG_VENV", REPO / ".ci" / "venvs" / "sglang"))
    py = venv / "bin" / "python"
    if not py.exists():
        msg = f"no torch + Triton environment at {venv} (scripts/setup_sglang_venv.sh builds it)"
        if tier_required("sglang"):
            pytest.fail(msg)
        pytest.skip(msg)
    return py


def test_kernel_matches_reference_under_the_interpreter() -> None:
    out = subprocess.run([str(_python()), str(REPO / "tests" / "kernels" / "check_moe_kernel.py"), str(REPO)],
                         capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    results = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(results) == 4
    for r in results:
        assert r["max_abs_err"] < 1e-4, r
