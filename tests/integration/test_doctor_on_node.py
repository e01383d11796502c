"""`sglbench doctor --address` and `sglbench run`'s node checks on a two-node Ray cluster (a GPU-less head and a node
of 8 logical GPUs): the facts are collected by a task pinned to the GPU node, with that node's CPU figures."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest

from cluster.node.facts import FactQuery
from cluster.config.loader import parse_spec_text
from tests.checkpoints import qwen35_nvfp4

pytestmark = pytest.mark.ray


ADDRESS: list[str] = []
"""The module cluster's GCS address, for a second driver (the `sglbench doctor --address` subprocess)."""


@pytest.fixture(scope="module")
def head_and_gpu_node() -> Iterator[str]:
    from tests.conftest import joined_loopback_cluster

    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    head = {"num_cpus": 1, "num_gpus": 0, "include_dashboard": False, "object_store_memory": 100 * 1024**2}
    gpu_node = {"num_cpus": 3, "num_gpus": 8, "object_store_memory": 100 * 1024**2}
    with joined_loopback_cluster(head, [gpu_node]) as (cluster, nodes):
        ADDRESS[:] = [cluster.address]
        yield nodes[0].node_id


def test_the_facts_come_from_the_gpu_node_not_the_driver(head_and_gpu_node: str, tmp_path: Path) -> None:
    import ray

    from cluster.distributed.doctor_task import facts_on_cluster

    facts = facts_on_cluster(FactQuery(disk_paths=(str(tmp_path),)))
    assert facts.ray_node_id == head_and_gpu_node != ray.get_runtime_context().get_node_id()
    assert facts.ray_node_cpus == 3.0  # the GPU node's CPU resource, not the head's 1
    assert facts.ray_available_cpus is not None and facts.disks[0].path == str(tmp_path)
    # a server across 2 nodes of 8 GPUs: this cluster has one GPU node (the head has none)
    from cluster.node.checks import NodeNeeds, NodesNeed, check_nodes

    assert facts.cluster_gpus == (8,)
    (line,) = check_nodes(facts, NodeNeeds(from_spec=True, nodes=(NodesNeed(variant="n2", nodes=2, gpus_per_node=8),)))
    assert line.level == "fail" and "the cluster has 1 such node(s) (GPUs per node: 8)" in line.message


def test_run_prints_the_failures_before_placement(head_and_gpu_node: str, tmp_path: Path) -> None:
    from cluster.distributed.doctor_task import run_time_failures

    model = qwen35_nvfp4(tmp_path / "model")
    spec = parse_spec_text(f"""version: 1
name: x
model: {{path: {model}, engine: sglang, tp: 8}}
engines: {{sglang: {{python: {tmp_path}/no-venv/bin/python}}}}
variants: [{{name: baseline}}]
workloads: [{{name: w, input_tokens: 8, output_tokens: 8, num_requests: 2, prompts: {{source: random_ids}}}}]
load: {{concurrency: [1], actors_per_server: 1}}
""")
    lines: list[str] = []
    bad = run_time_failures(spec, str(tmp_path / "results"), tmp_path, lines.append)
    assert {r.name for r in bad} >= {"engine"} and all(ln.startswith("doctor: ") for ln in lines)
    assert any(f"engine      {tmp_path}/no-venv/bin/python: no such interpreter" in ln for ln in lines), lines
    assert not any(" ok " in ln or ln.startswith("doctor: ok") for ln in lines)


def test_doctor_address_runs_the_checks_on_the_gpu_node(head_and_gpu_node: str, tmp_path: Path) -> None:
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-m", "cluster.cli", "doctor", "--address", ADDRESS[0],
                           "--output", str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=180,
                          env={**os.environ, "PYTHONPATH": str(repo)}, check=False)
    assert done.stdout.splitlines()[0].startswith("doctor: "), done.stdout + done.stderr
    assert f"Ray node {head_and_gpu_node} of the cluster at {ADDRESS[0]}" in done.stdout.splitlines()[0]
    cpu = next(ln for ln in done.stdout.splitlines() if ln.split()[1:2] == ["cpu"])
    assert "Ray node has 3 CPU" in cpu, done.stdout
    assert done.returncode in (0, 1), done.stdout + done.stderr
