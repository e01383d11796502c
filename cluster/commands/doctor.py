"""`sglbench doctor [SPEC] [--address ADDR]`: before a GPU-day starts, check what has silently broken real runs.

One line per check (GPUs and their compute capability, NVML, `nvidia-smi topo -m`, PCIe link width, the engine
interpreter's SGLang / FlashInfer / torch, the checkpoint, free disk, /dev/shm, the open-file limit, CPU for the load
actor, the clock source), each with what to do. Exit 0 all fine, 1 warnings, 3 a run cannot work on this node."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from cluster.errors import UserError
from cluster.node.checks import NodeNeeds, exit_code, run_checks
from cluster.node.facts import FactQuery, NodeFacts
from cluster.config.locations import DATASET_SCHEMES, check_location, check_ray_address


def check_address(address: str) -> str:
    """The --address value when Ray can join it as given, else a UserError naming what was expected."""
    try:
        return check_ray_address(address, "--address")
    except ValueError as e:
        raise UserError(str(e), field="--address", expected="auto, host:port or ray://host:port") from None


def check_output(output: str) -> str:
    """The --output value when a run could use it as its dataset root (the spec's `output` rules)."""
    try:
        if not output:
            raise ValueError("--output is empty")
        return check_location(output, "--output", DATASET_SCHEMES)
    except ValueError as e:
        raise UserError(str(e), field="--output",
                        expected="a local directory or one of " + ", ".join(f"{s}://" for s in DATASET_SCHEMES)
                        ) from None


def _facts(address: Optional[str], query: FactQuery) -> NodeFacts:
    if address is None:
        from cluster.node.collect import collect

        return collect(query)
    from cluster.distributed.doctor_task import facts_at

    return facts_at(address, query)


def doctor_command(
    experiment: Optional[Path] = typer.Argument(None, help="Experiment YAML whose needs to check (optional)."),
    address: Optional[str] = typer.Option(None, help="Ray address: check the cluster's GPU node (default: here)."),
    output: Optional[str] = typer.Option(None, help="Dataset root to check for free space (default: the spec's)."),
) -> None:
    """Check the serving node: GPUs, NVML, topology, link width, engine versions, checkpoint, disk, /dev/shm,
    open files, CPU and clock source; one line each with what to do.

    Example: sglbench doctor experiments/qwen35-397b-nvfp4-mtp.yaml --address ray://head:10001
    """
    from cluster.node.needs import needs_for, query_for
    from cluster.config.loader import load_spec

    if address is not None:
        check_address(address)
    if output is not None:
        check_output(output)
    spec = load_spec(experiment) if experiment is not None else None
    needs = needs_for(spec) if spec is not None else NodeNeeds()
    facts = _facts(address, query_for(spec, output, Path.cwd()))
    where = f"Ray node {facts.ray_node_id} of the cluster at {address}" if address else "this machine"
    what = f"experiment {spec.name!r}" if spec else "no experiment given: a GPU SGLang server assumed"
    print(f"doctor: {facts.hostname} ({where}); {what}", flush=True)
    results = run_checks(facts, needs)
    for r in results:
        print(r.line(), flush=True)
    code = exit_code(results)
    verdict = {0: "all checks passed", 1: "warnings: a run can start, read the lines above"}.get(
        code, "a run cannot work on this node as it is")
    print(f"doctor: {verdict}", file=sys.stderr, flush=True)
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor_command)

