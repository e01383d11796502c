"""Every Ray cluster the tests, benchmarks and sglbench itself start listens on loopback, and every test cluster of
several nodes or a job API has a temp dir of its own (tests/conftest.py `loopback_cluster`)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCANNED = ("tests", "benchmarks", "cluster")
HELPER = ("tests/conftest.py", "loopback_cluster")
"""The one place a test builds ray.cluster_utils.Cluster: it pins 127.0.0.1 and a private temp dir."""


def _name(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return f"{_name(func.value)}.{func.attr}"
    return func.id if isinstance(func, ast.Name) else ""


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _starts_a_cluster(call: ast.Call) -> bool:
    """`ray.init()` without an address, or with "local", starts a cluster; with any other address it joins one."""
    address = _keyword(call, "address")
    return address is None or (isinstance(address, ast.Constant) and address.value == "local")


def _loopback(value: ast.expr | None) -> bool:
    return isinstance(value, ast.Constant) and value.value == "127.0.0.1"


def _violations(path: Path, source: str) -> list[str]:
    rel = path.relative_to(REPO).as_posix()
    tree = ast.parse(source)
    found: list[str] = []
    helper_lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and (rel, node.name) == HELPER:
            helper_lines = set(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _name(node.func)
        where = f"{rel}:{node.lineno}"
        if name.split(".")[-1] == "Cluster" and node.lineno not in helper_lines:
            found.append(f"{where}: builds a Ray Cluster itself; use tests.conftest.loopback_cluster")
        elif name == "ray.init" and _starts_a_cluster(node) and not _loopback(_keyword(node, "_node_ip_address")):
            found.append(f"{where}: ray.init starts a cluster without _node_ip_address='127.0.0.1'")
        elif name.endswith(".add_node") and not (_loopback(_keyword(node, "node_ip_address"))
                                                 or any(k.arg is None and _name(k.value) == "LOOPBACK_NODE"
                                                        for k in node.keywords)):
            found.append(f"{where}: add_node without **LOOPBACK_NODE")
    return found


def test_every_ray_start_is_on_loopback() -> None:
    found = [v for d in SCANNED for p in sorted((REPO / d).rglob("*.py")) for v in _violations(p, p.read_text())]
    assert not found, "\n".join(found)


def test_the_rule_sees_each_way_of_starting_off_loopback() -> None:
    bad = '''
import ray
from ray.cluster_utils import Cluster
def f(c):
    Cluster(initialize_head=True)
    ray.init(num_gpus=8)
    ray.init(address="local")
    c.add_node(num_cpus=1)
    ray.init(address=c.address)
    ray.init(address="local", _node_ip_address="127.0.0.1")
    c.add_node(num_cpus=1, **LOOPBACK_NODE)
'''
    found = _violations(REPO / "tests" / "x.py", bad)
    assert [v.split(":")[1] for v in found] == ["5", "6", "7", "8"], found
