"""Preflight is one module: `plan`/`run` on this machine and the driver's task on the GPU node run the steps of
cluster/node/preflight.py, so a check added there is seen by both, and neither path writes out a step of its own.

Failed before (issue 36): commands/run.py:_local_checks and distributed/cluster_state._probe_on_node each called the
probe, the input checks and the launch-flag check themselves (the AST test lists those calls), and there was no one
module whose change both paths saw."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Optional, Sequence

import pytest
from typer.testing import CliRunner

from cluster.cli import app
from cluster.config.loader import load_spec
from cluster.distributed import cluster_state
from cluster.errors import PreflightError
from cluster.kernel.runs import ResolvedVariant
from cluster.node import preflight
from cluster.node.preflight import NodePreflight
from cluster.plan.findings import Finding
from cluster.probe.checkpoint import ProbeReport
from tests.checkpoints import qwen35_nvfp4

REPO = Path(__file__).resolve().parents[3]
STEPS = {"check_speculative_support", "probe_here", "check_inputs", "check_on_node", "check_launch_flags",
         "load_above_cap", "no_op_notes", "tuning_options_check"}
"""Preflight's steps, each defined in its own package: only cluster/node/preflight.py strings them together."""

SPEC = """
version: 1
name: one-preflight
model: {{path: "{model}", engine: sim}}
server: {{args: {{max-running-requests: 8, kv-cache-dtype: bf16, attention-backend: flashinfer}}}}
variants:
  - {{name: baseline, baseline: true}}
  - {{name: nextn, speculative: {{algorithm: NEXTN, num_steps: 1}}}}
workloads:
  - {{name: w, input_tokens: 16, output_tokens: 8, num_requests: 2}}
load: {{concurrency: [1]}}
output: {out}
"""


def _called_names(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Call):
            f = node.func
            names.add(f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else "")
    return names


def test_the_command_and_the_driver_call_no_preflight_step_of_their_own() -> None:
    callers = sorted([*(REPO / "cluster" / "commands").glob("*.py"), *(REPO / "cluster" / "distributed").glob("*.py")])
    own = {p.relative_to(REPO).as_posix(): sorted(_called_names(p) & STEPS) for p in callers}
    assert {p: steps for p, steps in own.items() if steps} == {}
    assert {"local_preflight", "input_checks"} <= _called_names(REPO / "cluster" / "commands" / "run.py")
    assert "node_preflight" in _called_names(REPO / "cluster" / "distributed" / "cluster_state.py")


def _added_rule(monkeypatch: pytest.MonkeyPatch) -> list[Optional[int]]:
    """A refusing rule added to the one module's fairness step; returns the GPU generations it was asked about."""
    real = preflight._fairness
    asked: list[Optional[int]] = []

    def with_rule(variants: Sequence[ResolvedVariant], reports: dict[str, ProbeReport], version: Optional[str],
                  gpu_sm: Optional[int] = None) -> list[Finding]:
        asked.append(gpu_sm)
        assert all(isinstance(r, ProbeReport) for r in reports.values())
        return [*real(variants, reports, version, gpu_sm),
                Finding("error", "nextn", "added-here", "a rule added to cluster/node/preflight.py")]

    monkeypatch.setattr(preflight, "_fairness", with_rule)
    return asked


def test_a_check_added_to_the_module_is_seen_here_and_on_the_node(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    model = qwen35_nvfp4(tmp_path / "m")
    (tmp_path / "exp.yaml").write_text(SPEC.format(model=model, out=tmp_path / "out"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # the node task clears it for itself; restored after the test
    monkeypatch.setattr(cluster_state, "_ray_ports", lambda: {})  # the task's Ray ports, without a Ray cluster
    spec = load_spec(tmp_path / "exp.yaml")

    node = cluster_state._probe_on_node(spec.model_dump(mode="json"), str(tmp_path))  # the task's body, no Ray
    assert isinstance(node, NodePreflight) and list(node.reports) == [str(model)]
    assert node.reports[str(model)].mtp.verdict == "present" and node.reports[str(model)].headers == []

    asked = _added_rule(monkeypatch)
    res = CliRunner().invoke(app, ["plan", "exp.yaml"])
    assert res.exit_code == 2
    assert "fairness: nextn: added-here: a rule added to cluster/node/preflight.py" in res.output
    with pytest.raises(PreflightError) as refused:
        cluster_state._probe_on_node(spec.model_dump(mode="json"), str(tmp_path))
    assert str(refused.value).startswith("experiment 'one-preflight' on the GPU node: ")
    assert "error: nextn: added-here: a rule added to cluster/node/preflight.py" in str(refused.value)
    assert len(asked) == 2, "each path asked the one module's rules once"
