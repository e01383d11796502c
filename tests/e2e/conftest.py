"""e2e tier fixtures: the vLLM venv (skip, or fail when CI requires the tier) and the tiny locally built model."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VENV_ENV = "SGLBENCH_VLLM_VENV"
REQUIRE_ENV = "SGLBENCH_REQUIRE_TIERS"
DEFAULT_VENV = REPO / ".ci" / "venvs" / "vllm"
BUILDER = Path(__file__).with_name("build_tiny_model.py")
MODEL_BUILD_TIMEOUT_S = 300


def _required() -> bool:
    tiers = os.environ.get(REQUIRE_ENV, "")
    return "vllm" in {t.strip() for t in tiers.replace(",", " ").split()}


@pytest.fixture(scope="session")
def vllm_python() -> str:
    """The vLLM venv's interpreter; skips the tier when it is missing unless SGLBENCH_REQUIRE_TIERS names vllm."""
    venv = Path(os.environ.get(VENV_ENV) or DEFAULT_VENV)
    py = venv / "bin" / "python"
    problem = None
    if not py.exists():
        problem = f"vLLM venv not found at {venv} (create it with scripts/setup_vllm_venv.sh, or set {VENV_ENV})"
    else:
        probe = subprocess.run([str(py), "-c", "import vllm, transformers, tokenizers"], capture_output=True,
                               text=True, timeout=300)
        if probe.returncode != 0:
            last = (probe.stderr.strip().splitlines() or ["?"])[-1]
            problem = f"vLLM venv at {venv} cannot import vllm/transformers/tokenizers: {last}"
    if problem:
        if _required():
            pytest.fail(f"{problem}; {REQUIRE_ENV} requires the vllm tier", pytrace=False)
        pytest.skip(problem)
    return str(py)


@pytest.fixture(scope="session")
def tiny_model(vllm_python: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-weight Qwen2 model + BPE tokenizer built locally (nothing downloaded), shared by the tier."""
    out = tmp_path_factory.mktemp("tiny-qwen2")
    t0 = time.monotonic()
    proc = subprocess.run([vllm_python, str(BUILDER), str(out), "--seed", "0"], capture_output=True, text=True,
                          timeout=MODEL_BUILD_TIMEOUT_S)
    assert proc.returncode == 0, f"tiny model build failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    print(f"[e2e] tiny model built in {time.monotonic() - t0:.1f} s: {proc.stdout.strip()}")
    assert (out / "config.json").exists() and (out / "model.safetensors").exists()
    assert (out / "tokenizer.json").exists()
    return out
