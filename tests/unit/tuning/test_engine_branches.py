"""The tuning stage asks the engine adapter (cluster/engines/tuning_surfaces.py) what differs per engine: neither its
pure part (cluster/tuning/) nor its Ray side (distributed/tuning_stage.py) compares an engine name or imports the
simulator."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from cluster.config.engines import engine_names

REPO = Path(__file__).resolve().parents[3]
MODULES = sorted(REPO.glob("cluster/tuning/*.py")) + [REPO / "cluster/distributed/tuning_stage.py"]


def _problems(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Compare):
            names = [c.value for c in [node.left, *node.comparators] if isinstance(c, ast.Constant)]
            out += [f"line {node.lineno}: compares with the engine name {n!r}" for n in names if n in engine_names()]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("cluster.sim"):
            out.append(f"line {node.lineno}: imports {node.module}")
    return out


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_no_engine_branch_and_no_simulator_import(path: Path) -> None:
    assert _problems(path) == []


def test_the_check_sees_a_branch(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text('from cluster.sim.tuning import x\nif v.engine == "sim":\n    pass\n')
    assert _problems(probe) == ["line 1: imports cluster.sim.tuning", "line 2: compares with the engine name 'sim'"]


def test_sglang_tuning_facts_stay_stdlib_only() -> None:
    """engines/sglang_tuning.py (SGLang's tuning facts) imports no project module, so it loads wherever its facts
    are needed (the MoE search's workers, the simulator); the contract built on it is engines/tuning_contract.py."""
    tree = ast.parse((REPO / "cluster/engines/sglang_tuning.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | \
        {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in imported if m and m.split(".")[0] == "cluster"}
