"""Layout rules: no import cycles (AST, lazy imports included), a thin package face, Ray only in distributed/,
and mypy --strict clean on the core (scripts/layout_report.py computes each figure)."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def _report() -> ModuleType:
    spec = importlib.util.spec_from_file_location("layout_report", REPO / "scripts" / "layout_report.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_no_import_cycles() -> None:
    assert _report().import_cycles() == []


def test_the_package_face_is_at_most_five_modules() -> None:
    flat = _report().flat_modules()
    assert "__init__.py" in flat and "cli.py" in flat and "errors.py" in flat
    assert len(flat) <= 5, flat


def test_no_dict_str_any_in_the_spec_package() -> None:
    assert _report().spec_dict_any_count() == 0


def _imports_ray(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import) and any(a.name == "ray" or a.name.startswith("ray.") for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None \
                and (node.module == "ray" or node.module.startswith("ray.")):
            return True
    return False


def test_only_distributed_imports_ray() -> None:
    importers = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "cluster").rglob("*.py") if _imports_ray(p))
    assert importers and all(p.startswith("cluster/distributed/") for p in importers), importers


@pytest.mark.slow
def test_mypy_strict_is_clean_on_the_core() -> None:
    paths = _report().core_paths()
    proc = subprocess.run([sys.executable, "-m", "mypy", "--strict", *paths], cwd=REPO, capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0, proc.stdout[-6000:]
