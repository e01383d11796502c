"""Spec → resolved variants and RunPlans (variant × workload × load point × repeat) with stable run keys."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Optional

from cluster.errors import UserError
from cluster.config.expansion import step_names, sweep_name, sweep_pairs
from cluster.kernel.runs import RECORD_SCHEMA_VERSION, SWEPT_ARGS, LoadPoint, ResolvedVariant, RunPlan, SpecDecode
from cluster.config.experiment import ExperimentSpec
from cluster.config.deployment import EndpointDeployment, PDDeployment
from cluster.config.variants import SpeculativeSpec, VariantSpec
from cluster.config.fields import check_name
from cluster.config.workload import WorkloadSpec
from cluster.config.template_settings import expand_workloads
from cluster.config.tuning import BackendSweepOptions, BackendSweepTuning, NoTuning
from cluster.config.load import LoadSpec
from cluster.kernel.load_shapes import ClosedLoop, OpenLoop, load_shapes
from cluster.config.repeats import planned_repeats

def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    out.update(over)
    return out


def expand_variants(spec: ExperimentSpec) -> list[ResolvedVariant]:
    """Expand spec variants: a speculative block with a list of num_steps gives one variant per value, a
    backend_sweep one per back-end pair (whether SGLang has those back ends is cluster/tuning/stage.py's check)."""
    out: list[ResolvedVariant] = []
    for v in spec.variants:
        out.extend(_expand_one(spec, v))
    out = [x for v in out for x in expand_backend_sweep(v)]
    names = [v.name for v in out]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise UserError(f"variant expansion produced duplicate names: {sorted(dup)} (a speculative num_steps list "
                        "or a backend_sweep names its variants <name>-<value>; rename the clashing variant)",
                        field="variants", expected="unique names after expansion")
    if not any(v.is_baseline for v in out) and out:
        first_plain = next((v for v in out if v.speculative is None and v.tuning is None), out[0])
        out = [
            ResolvedVariant(**{**v.__dict__, "is_baseline": True}) if v is first_plain else v for v in out
        ]
    return out


def _expand_one(spec: ExperimentSpec, v: VariantSpec) -> list[ResolvedVariant]:
    common = dict(
        engine=v.engine or spec.model.engine,
        tp=v.tp or spec.model.tp,
        model_path=spec.model.path,
        args=_merge(spec.server.args, v.args),
        env=_merge(spec.server.env, v.env),
        tuning=None if v.tuning is None or isinstance(v.tuning, NoTuning) else v.tuning,
        sim=spec.sim.merged(v.sim),
        is_baseline=v.baseline,
        family=v.name,
        profile=v.profile,
    )
    if isinstance(v.deployment, EndpointDeployment):  # launches nothing: server-wide args and env are not its own
        common.update(args={}, env={})
    if isinstance(v.deployment, PDDeployment):  # each pool gives its tp; the variant's is the prefill's
        common.update(tp=v.deployment.prefill.tp)
    common.update(deployment=v.deployment)
    sp: Optional[SpeculativeSpec] = v.speculative
    if sp is None:
        return [ResolvedVariant(name=v.name, **common)]  # type: ignore[arg-type]
    out = []
    for s, name in zip(sp.steps(), step_names(v.name, sp.steps())):
        dec = SpecDecode(
            algorithm=sp.algorithm,
            num_steps=s,
            eagle_topk=sp.eagle_topk,
            num_draft_tokens=sp.draft_tokens_for(s),
            draft_model_path=sp.draft_model_path,
            adaptive_config=sp.adaptive.config_path(spec.output) if sp.adaptive is not None else None,
        )
        out.append(ResolvedVariant(name=name, speculative=dec, **common))  # type: ignore[arg-type]
    return out


def launch_form(spec: ExperimentSpec, v: ResolvedVariant, output_root: str, base_dir: Path) -> ResolvedVariant:
    """The variant as its server is launched: an adaptive config at its absolute path under the output root the run
    uses (`output_root`, resolved), relative paths taken from `base_dir`; its declared identity (run key) is
    `expand_variants`' and unchanged."""
    sp = v.speculative
    declared = next((sv for sv in spec.variants if sv.name == (v.family or v.name)), None)
    if sp is None or sp.adaptive_config is None or declared is None or declared.speculative is None:
        return v
    adaptive = declared.speculative.adaptive
    if adaptive is None:
        return v
    return replace(v, speculative=replace(sp, adaptive_config=adaptive.launch_path(output_root, base_dir)))


def load_points(spec: ExperimentSpec) -> list[LoadPoint]:
    """The experiment's fixed load points: each registered load shape's, in registration order."""
    return [p for shape in load_shapes() for p in shape.points(spec.load)]


def search_point(load: LoadSpec, value: float) -> LoadPoint:
    """The load point of a capacity-search probe at `value`: the point a fixed load of that value would be (same
    run key), so a probe that lands on a fixed point reuses its run."""
    assert load.search is not None
    rb = load.read_batch_ms / 1000.0
    if load.search.over == "concurrency":
        return LoadPoint(ClosedLoop.kind, float(value), read_batch_s=rb)
    return LoadPoint(OpenLoop.kind, float(value), load.max_concurrency,
                     load.arrival_cv if load.arrival == "gamma" else None, read_batch_s=rb)


def plan_run(spec: ExperimentSpec, v: ResolvedVariant, w: WorkloadSpec, lp: LoadPoint, r: int,
             order_index: int) -> RunPlan:
    seed = workload_seed(spec.seed, w, r)
    return RunPlan(experiment=spec.name, variant=v, workload=w, load=lp, repeat=r, seed=seed,
                   run_key=run_key(spec.name, v, w, lp, r, seed), order_index=order_index)


def run_key(
    experiment: str, variant: ResolvedVariant, workload: WorkloadSpec, load: LoadPoint, repeat: int, seed: int
) -> str:
    """Hash of what defines the run as declared; resolved server args are recorded, not keyed."""
    ident = {
        "experiment": experiment,
        "variant": variant.identity(),
        "workload": workload.identity(),
        "load": load.identity(),
        "repeat": repeat,
        "seed": seed,
        "schema_version": RECORD_SCHEMA_VERSION,
    }
    blob = json.dumps(ident, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:20]


def workload_seed(spec_seed: int, workload: WorkloadSpec, repeat: int) -> int:
    """Prompts and arrival schedules depend on (seed, workload, repeat) only — identical across variants, and
    across the chat template settings a workload expands into (its declared name seeds them)."""
    h = hashlib.sha256(f"{spec_seed}|{workload.seed_name()}|{repeat}".encode()).digest()
    return int.from_bytes(h[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF


def make_plan(spec: ExperimentSpec, keep: Optional[Callable[[ResolvedVariant], bool]] = None) -> list[RunPlan]:
    """Every run of the experiment, in execution order (`keep`: which expanded variants run, e.g. without the
    back-end sweep duplicates plan/sweep_collapse.py finds; run keys do not depend on it).

    grouped (default): a variant's runs are contiguous, so each server starts once.
    interleaved: repeat r of every variant runs before repeat r+1 of any (ABAB...), which cancels drift
    but restarts servers; worth it only where a restart is cheap.
    In both, the baseline comes first (within each repeat when interleaved): its gate answers are what the other
    variants' gates compare with, so its first segment runs before any other. The driver executes this order.
    """
    variants = sorted((v for v in expand_variants(spec) if keep is None or keep(v)),
                      key=lambda v: not v.is_baseline)  # stable: baseline first
    points = load_points(spec)
    runs: list[RunPlan] = []
    repeats = planned_repeats(spec.repeats)  # repeats until sure plan `min`; the driver adds the rest as it goes
    if spec.order == "grouped":
        order = [(v, r) for v in variants for r in range(repeats)]
    else:
        order = [(v, r) for r in range(repeats) for v in variants]
    search = spec.load.search
    for v, r in order:
        for w in expand_workloads(spec.workloads):
            first = [] if search is None else [search_point(spec.load, search.min)]
            # a search's first probe (its min) is planned; where it is a fixed point it is that point's run
            for lp in points + [x for x in first if x not in points]:
                runs.append(plan_run(spec, v, w, lp, r, len(runs)))
    return runs


def server_segments(runs: list[RunPlan]) -> list[tuple[ResolvedVariant, list[RunPlan]]]:
    """Split the ordered runs into contiguous segments served by one server start each."""
    segs: list[tuple[ResolvedVariant, list[RunPlan]]] = []
    for r in runs:
        if segs and segs[-1][0].name == r.variant.name:
            segs[-1][1].append(r)
        else:
            segs.append((r.variant, [r]))
    return segs


def expand_backend_sweep(v: ResolvedVariant) -> list[ResolvedVariant]:
    """One variant per (moe_runner_backend, fp4_gemm_backend) pair not excluded, named `<name>-<short>-<short>`;
    every other variant (and an already expanded combination) passes through unchanged."""
    t = v.tuning
    if not isinstance(t, BackendSweepTuning) or t.options.combination is not None:
        return [v]
    o = t.options
    excluded = {(e.moe_runner_backend, e.fp4_gemm_backend) for e in o.exclude}
    pairs = sweep_pairs(o.moe_runner_backend, o.fp4_gemm_backend, excluded)
    if not o.moe_runner_backend and not o.fp4_gemm_backend:
        raise UserError(f"variant {v.name}: backend_sweep needs tuning.options.moe_runner_backend and/or "
                        "fp4_gemm_backend (lists of back ends)", field="tuning.options",
                        expected="moe_runner_backend and/or fp4_gemm_backend")
    out = []
    for pair in pairs:
        args = dict(v.args)
        combo: dict[str, str] = {}
        for arg, val in zip(SWEPT_ARGS, pair):
            if val is not None:
                flag = arg.replace("_", "-")
                for k in [k for k in args if k.replace("_", "-") == flag]:
                    args.pop(k)
                args[flag] = val
                combo[arg] = val
        name = sweep_name(v.name, pair)
        check_name(name, "swept variant name")
        tuning = BackendSweepTuning(options=BackendSweepOptions(combination=combo))
        # a baseline must be one variant (the spec refuses a baseline sweep of several pairs): a one-pair sweep
        # marked baseline stays the baseline instead of silently handing the role to the first plain variant
        out.append(replace(v, name=name, args=args, tuning=tuning, is_baseline=v.is_baseline and len(pairs) == 1,
                           family=v.family or v.name))
    return out
