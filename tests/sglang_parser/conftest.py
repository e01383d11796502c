"""The SGLang-parser tier: runs only where scripts/setup_sglang_venv.sh built SGLang 0.5.23's venv.

SGLBENCH_SGLANG_VENV names the venv (default <repo>/.ci/venvs/sglang). When SGLBENCH_REQUIRE_TIERS contains
"sglang", a missing venv fails the tier instead of skipping it (CI sets this).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def sglang_python() -> Path:
    venv = Path(os.environ.get("SGLBENCH_SGLANG_VENV") or REPO / ".ci" / "venvs" / "sglang")
    return venv / "bin" / "python"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for it in items:
        if here in Path(str(it.fspath)).parents:
            it.add_marker(pytest.mark.sglang_parser)


@pytest.fixture(scope="session")
def sglang_venv_python() -> Path:
    py = sglang_python()
    if py.exists():
        return py
    why = f"SGLang venv not found at {py.parent.parent} (build it with scripts/setup_sglang_venv.sh)"
    if "sglang" in os.environ.get("SGLBENCH_REQUIRE_TIERS", ""):
        pytest.fail(why + "; SGLBENCH_REQUIRE_TIERS requires this tier", pytrace=False)
    pytest.skip(why)
