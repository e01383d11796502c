"""The real-SGLang-on-CPU tier: runs only where scripts/setup_sglang_venv.sh built SGLang 0.5.23's venv with the CPU test stand-ins.

SGLBENCH_SGLANG_VENV names the venv (default <repo>/.ci/venvs/sglang). When SGLBENCH_REQUIRE_TIERS contains
"sglang", a missing venv (or one without the stand-ins) fails the tier instead of skipping it (CI sets this).
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILDER = Path(__file__).with_name("build_mimo_model.py")
PROBE_TIMEOUT_S = 300
MODEL_BUILD_TIMEOUT_S = 300


def sglang_venv() -> Path:
    return Path(os.environ.get("SGLBENCH_SGLANG_VENV") or REPO / ".ci" / "venvs" / "sglang")


def _required() -> bool:
    return "sglang" in os.environ.get("SGLBENCH_REQUIRE_TIERS", "")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for it in items:
        if here in Path(str(it.fspath)).parents:
            it.add_marker(pytest.mark.sglang_cpu)


@pytest.fixture(scope="session")
def sglang_cpu_python() -> Path:
    """The SGLang venv's interpreter, checked to import sglang and the stand-ins; skips (or fails when required)."""
    venv = sglang_venv()
    py = venv / "bin" / "python"
    problem = None
    if not py.exists():
        problem = f"SGLang venv not found at {venv} (build it with scripts/setup_sglang_venv.sh)"
    else:
        probe = subprocess.run([str(py), "-c", "import sglang, sgl_kernel, torchvision, sglbench_cpu_standins"],
                               capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
        if probe.returncode != 0:
            last = (probe.stderr.strip().splitlines() or ["?"])[-1]
            problem = f"SGLang venv at {venv} lacks sglang or the CPU stand-ins (rerun scripts/setup_sglang_venv.sh): {last}"
    if problem:
        if _required():
            pytest.fail(problem + "; SGLBENCH_REQUIRE_TIERS requires this tier", pytrace=False)
        pytest.skip(problem)
    return py


@pytest.fixture(scope="session")
def mimo_models(sglang_cpu_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """echo/, mix/ and rand/ tiny MiMo models built locally (seeded, nothing downloaded), shared by the tier."""
    out = tmp_path_factory.mktemp("tiny-mimo")
    t0 = time.monotonic()
    proc = subprocess.run([str(sglang_cpu_python), str(BUILDER), str(out), "--seed", "0"], capture_output=True,
                          text=True, timeout=MODEL_BUILD_TIMEOUT_S)
    assert proc.returncode == 0, f"tiny MiMo build failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    print(f"[sglang_cpu] tiny MiMo models built in {time.monotonic() - t0:.1f} s")
    for variant in ("echo", "mix", "rand"):
        assert (out / variant / "config.json").exists() and (out / variant / "model.safetensors").exists()
    return out
