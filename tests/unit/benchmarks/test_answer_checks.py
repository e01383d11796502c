"""benchmarks/answer_checks.py measures every figure on this tree, the answer invariants among them, and leaves the
caller's own `cluster` modules in place."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

import pytest

import cluster.loadgen.framing


def test_every_measure_runs_on_this_tree(ac: ModuleType) -> None:
    tree = ac.load_tree(ac.HERE)
    assert tree.invariants is not None  # engines/answer_invariants.py is in this tree
    assert sys.modules["cluster.loadgen.framing"] is cluster.loadgen.framing  # the caller's modules are back
    assert tree.Response is not cluster.loadgen.framing.Response  # the tree's own, imported fresh
    rows = ac.measure([tree, tree], events=16, repeats=1, rounds=1, number=2)
    by_name = {name: (unit, vals) for name, unit, vals in rows}
    assert by_name["native: answer invariants"][0] == by_name["openai: answer invariants"][0] == "us/request"
    assert by_name["openai-usage, 1 frame(s) a read"][0] == "us/event"
    assert all(v is not None and v > 0 for _, vals in by_name.values() for v in vals)
    text = ac.table([tree, tree], rows)
    assert f"A: {ac.HERE}" in text and "A/B" in text and "native: whole recorded request" in text


def test_a_tree_without_cluster_is_refused_by_name(ac: ModuleType, tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=f"--tree {tmp_path}: expected a folder holding a cluster/ package"):
        ac.main(["--tree", str(tmp_path)])
