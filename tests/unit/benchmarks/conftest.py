"""Fixtures of the benchmarks/ scripts' tests: each script loaded from its file, and the paced stub built once."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[3] / "benchmarks"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def ps() -> ModuleType:
    """benchmarks/paced_stub.py."""
    return _load("paced_stub")


@pytest.fixture(scope="module")
def pc() -> ModuleType:
    """benchmarks/paced_clients.py."""
    return _load("paced_clients")


@pytest.fixture(scope="module")
def ac() -> ModuleType:
    """benchmarks/answer_checks.py."""
    return _load("answer_checks")


@pytest.fixture(scope="module")
def binary(ps: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The paced stub built from benchmarks/paced_stub.c (skips where there is no gcc)."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed: paced_stub.c cannot be built")
    out = tmp_path_factory.mktemp("paced_stub")
    path: Path = ps.build(out)
    assert ps.build(out) == path  # cached by source hash
    return path
