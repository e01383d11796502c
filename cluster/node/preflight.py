"""Preflight, in one place: what `validate`, `plan` and `run` check here and the driver's task checks on the GPU node.

Both paths run the same steps in the same order, before any GPU is reserved: the tuning back ends, the checkpoint
probe and its MTP rule (plan/preflight.py), the fairness rules, the inputs (prompt files, output root, ports, engine
interpreters on the node), the launch flags through each engine's parser. This module imports no Ray: the driver
calls `node_preflight` inside a Ray task on the GPU node (distributed/cluster_state.py) and gets its `NodePreflight`
record back as is. Lines meant for the user go to `say` as `PreflightLine`s; the command decides how they look.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Literal, Mapping, Optional, Sequence

from cluster.analysis.adaptive_config import adaptive_configs, checkable, write_adaptive_configs
from cluster.config.experiment import ExperimentSpec
from cluster.config.relevance import no_op_notes
from cluster.engines.flagcheck import check_launch_flags
from cluster.engines.interconnect import collect_interconnect
from cluster.engines.registry import get_engine, is_simulated
from cluster.errors import EnvironmentFault, PreflightError
from cluster.kernel.runs import ResolvedVariant
from cluster.plan.fairness import Finding, ModelFacts, check_fairness, format_findings
from cluster.plan.inputs import check_inputs, check_on_node, resolve_output_root
from cluster.plan.load_cap import load_above_cap
from cluster.plan.preflight import check_speculative_support
from cluster.plan.runs import expand_variants, launch_form
from cluster.probe.checkpoint import ProbeReport, probe_here
from cluster.plan.deployment import placement_problems, processes_of
from cluster.server.endpoint import endpoint_status
from cluster.tuning.stage import tuning_options_check

LineKind = Literal["dataset", "note", "adaptive", "warning", "summary", "checkpoint"]
"""dataset: what a prompt source read; note: a documented no-op; adaptive: a derived adaptive config; warning: a
flag, load cap, fairness or interconnect warning; summary: no fairness finding; checkpoint: not readable here."""


@dataclass(frozen=True)
class PreflightLine:
    """One line preflight says on this machine, in the order it is found."""

    kind: LineKind
    text: str


Say = Callable[[PreflightLine], object]


@dataclass(frozen=True)
class NodePreflight:
    """The GPU node's answer: the probe report of each checkpoint path it read, and the warnings to show."""

    reports: dict[str, ProbeReport]
    warnings: list[str]


def check_tuning(variants: Sequence[ResolvedVariant]) -> None:
    """Back ends SGLang 0.5.23 has (the spec itself refuses unknown option keys)."""
    for v in variants:
        tuning_options_check(v)


def run_root(spec: ExperimentSpec, output: Optional[str], base_dir: Path) -> str:
    """The dataset root `run` uses (`--output`, else the spec's output), resolved as the driver resolves it."""
    return resolve_output_root(output or spec.output, base_dir)


def as_launched(spec: ExperimentSpec, v: ResolvedVariant, output: Optional[str], base_dir: Path) -> ResolvedVariant:
    """The variant as `run` launches it from `base_dir` (an adaptive config at its absolute path)."""
    return launch_form(spec, v, run_root(spec, output, base_dir), base_dir)


def probe_readable(spec: ExperimentSpec) -> dict[str, ProbeReport]:
    """The checkpoint probe where this machine can read it ({} otherwise: the GPU node probes it)."""
    return check_speculative_support(spec, expand_variants(spec)) if probe_here(spec.model.path) else {}


def _sglang_version(spec: ExperimentSpec, variants: Sequence[ResolvedVariant], python: str) -> Optional[str]:
    """The SGLang release the argv is built for: installed for the engine's interpreter where it can be run, else the
    declared one (VersionMismatchError when the two disagree)."""
    if not any(v.engine == "sglang" for v in variants):
        return None
    return get_engine("sglang").version_for(spec.engines.get("sglang"), python)


def _fairness(variants: Sequence[ResolvedVariant], reports: Mapping[str, ProbeReport], version: Optional[str],
              gpu_sm: Optional[int] = None) -> list[Finding]:
    """The fairness rules with the probe's facts (none where nothing was probed); they judge the argv sglbench
    launches, so an endpoint already running (no argv) is not theirs."""
    return check_fairness([v for v in variants if v.launched], {p: r.quant.kv_cache_quant_algo for p, r in reports.items()},
                          facts={p: ModelFacts.from_report(r) for p, r in reports.items()}, gpu_sm=gpu_sm,
                          version=version)


def input_checks(spec: ExperimentSpec, base_dir: Path, say: Say, output: Optional[str] = None,
                 reports: Optional[dict[str, ProbeReport]] = None,
                 write_adaptive: bool = False) -> dict[str, ProbeReport]:
    """The checkpoint probe where this machine can read it, then the inputs a server would fail on later (prompt
    files and their fit to the model, the output root, Ray's ports, adaptive configs): PreflightError naming file
    and field. `write_adaptive` (run only): write the derived adaptive configs. Returns the probe reports."""
    variants = expand_variants(spec)
    misfits = placement_problems(variants, spec.isolation, spec.cluster.gpus_per_node, spec.cluster.nodes)
    if misfits:  # before the probe: nothing else matters for a deployment that can never start
        raise PreflightError("; ".join(misfits), field="cluster",
                             expected=f"deployments that fit {spec.cluster.nodes} node(s) of "
                                      f"{spec.cluster.gpus_per_node} GPUs (cluster.nodes, cluster.gpus_per_node)")
    reports = probe_readable(spec) if reports is None else reports
    root = None if output is None else resolve_output_root(output, base_dir)
    for note in check_inputs(spec, variants, reports, base_dir, root):
        say(PreflightLine("dataset", note))
    for field, why in no_op_notes(spec.variants):  # a documented no-op is accepted, never silently
        say(PreflightLine("note", f"note: {field}: {why}"))
    # derived and checked in memory; only `run` writes a derived config, before any server, where SGLang reads it
    configs = adaptive_configs(spec, run_root(spec, output, base_dir), base_dir)
    notes = [f"{c.variant}: {n}" for c in configs for n in c.notes]
    if write_adaptive:
        notes += write_adaptive_configs(configs)
    else:
        notes += [f"{c.variant}: `run` writes {c.path} (nothing is written now)" for c in configs if c.text is not None]
    for note in notes:
        say(PreflightLine("adaptive", f"adaptive speculation of {note}"))
    # the simulator's flags here; SGLang's and vLLM's by their own parsers in the GPU node's preflight
    # every process of a deployment as it is launched (each rank, pool and replica); an endpoint has no argv
    with checkable([pv for v in variants if v.launched for pv in processes_of(as_launched(spec, v, output, base_dir))],
                   [] if write_adaptive else configs) as launched:
        lines = check_launch_flags(spec, launched, sys.executable, on_node=False)
    for line in lines + load_above_cap(spec, variants):
        say(PreflightLine("warning", line))
    return reports


def check_endpoints(variants: Sequence[ResolvedVariant], say: Optional[Say] = None, on_node: bool = False) -> None:
    """Every endpoint variant answers its health check from here, before anything runs: a variable named by
    api_key_env that is unset is a PreflightError (exit 2; on the node it may be unset: the driver reads the key
    and hands it to the actors), an endpoint that does not answer (refused, timed out, another status) an
    EnvironmentFault naming its URL (exit 3), one that refuses the key (401, 403) a PreflightError."""
    for v in variants:
        ep = v.endpoint
        if ep is None:
            continue
        key = os.environ.get(ep.api_key_env) if ep.api_key_env else None
        if ep.api_key_env and not key and not on_node:
            raise PreflightError(f"variant {v.name!r}: endpoint {ep.url}: the environment variable {ep.api_key_env} "
                                 "(deployment.api_key_env) is not set", field=f"variants.{v.family}.deployment",
                                 expected=f"{ep.api_key_env} set to the endpoint's API key")
        engine = get_engine(v.engine).with_api_key(key)
        status, why = endpoint_status(engine, ep.url)
        if status in (401, 403) and on_node and not key:
            continue  # it answers; the key is the driver's to send
        if status in (401, 403):
            raise PreflightError(f"variant {v.name!r}: endpoint {ep.url} refused the key"
                                 f"{' in ' + ep.api_key_env if ep.api_key_env else ' (none given)'}: {why}",
                                 field=f"variants.{v.family}.deployment.api_key_env", expected="a key it accepts")
        if why is not None:
            raise EnvironmentFault(f"variant {v.name!r}: endpoint {ep.url} is unreachable: {why}; nothing was run")
        if say is not None:
            say(PreflightLine("summary", f"endpoint {ep.url} ({v.name}) answers its health check; already running, "
                                         "not launched by sglbench"))


def local_preflight(spec: ExperimentSpec, base_dir: Path, say: Say, output: Optional[str] = None,
                    write_adaptive: bool = False) -> dict[str, ProbeReport]:
    """`plan` and `run` on this machine: the tuning back ends, the fairness rules and the checkpoint probe where this
    machine can read the checkpoint, then `input_checks`; `run` (`write_adaptive`) first checks that every endpoint
    variant answers. Returns the probe reports."""
    variants = expand_variants(spec)
    if write_adaptive:
        check_endpoints(variants, say)
    check_tuning(variants)
    reports = probe_readable(spec)
    findings = _fairness(variants, reports, _sglang_version(spec, variants, "python"))
    errors = [f for f in findings if f.level == "error"]
    for line in format_findings([f for f in findings if f.level != "error"]):
        say(PreflightLine("warning", line))
    if errors:  # the CLI's one `error:` line, every refusing rule on it
        raise PreflightError("fairness: " + "; ".join(f"{f.variant}: {f.rule}: {f.message}" for f in errors),
                             expected="variants that differ only in what is compared")
    if not findings:
        deferred = "" if reports else "; the checkpoint- and GPU-dependent rules run again on the GPU node"
        say(PreflightLine("summary", f"fairness: no findings over {len(variants)} variant(s){deferred}"))
    for line in collect_interconnect().width_warnings():  # where this machine is a GPU node
        say(PreflightLine("warning", f"warning: interconnect: {line}"))
    if not Path(spec.model.path).exists() and not is_simulated(spec.model.engine):
        say(PreflightLine("checkpoint", f"checkpoint {spec.model.path} is not readable here; it is probed on a GPU "
                                        "node before any GPU is reserved"))
    # a PreflightError names the experiment, the variant and what is missing; the CLI's handler prints it
    return input_checks(spec, base_dir, say, output, reports, write_adaptive)


def node_preflight(spec: ExperimentSpec, base_dir: Path, output_root: Optional[str],
                   ray_ports: Mapping[int, str]) -> NodePreflight:
    """The same checks on the GPU node, where the weights, prompt files and engine interpreters are: the probe, the
    node's prompt files, free ports and engine interpreters, each launch argv through its engine's own parser, then
    the fairness rules with the probe's facts, the node's GPUs (SM120?) and the installed version."""
    variants = expand_variants(spec)
    check_endpoints(variants, on_node=True)  # reached from the node the load actors send from
    reports = check_speculative_support(spec, variants)
    modules = {v.engine: get_engine(v.engine).module for v in variants}
    check_on_node(spec, variants, reports, base_dir, modules, sys.executable, ray_ports)
    root = output_root or resolve_output_root(spec.output, base_dir)  # adaptive configs as launched
    # each process of a deployment as launched (role flags and pool args through the engine's own parser too)
    warnings = check_launch_flags(spec, [pv for v in variants if v.launched
                                         for pv in processes_of(launch_form(spec, v, root, base_dir))],
                                  sys.executable, on_node=True)
    wiring = collect_interconnect()
    findings = _fairness(variants, reports, _sglang_version(spec, variants, sys.executable), wiring.compute_sm())
    lines = format_findings(findings)
    errors = [line for f, line in zip(findings, lines) if f.level == "error"]
    if errors:
        raise PreflightError(f"experiment {spec.name!r} on the GPU node: " + "; ".join(errors))
    warnings += [line for f, line in zip(findings, lines) if f.level == "warning"]
    warnings += wiring.width_warnings()
    # the shard headers stay here: the driver never needed them and they grow with the tensor count
    return NodePreflight({p: replace(r, headers=[]) for p, r in reports.items()}, warnings)
