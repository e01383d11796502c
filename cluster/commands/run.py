"""`sglbench validate | plan | run`: load the spec, preflight it, show the plan, run it on Ray."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator, Optional

import typer
from rich.console import Console
from rich.table import Table

from cluster.commands.results import print_run_summary
from cluster.commands.shell_lines import shell_command
from cluster.engines.base import LaunchCommand
from cluster.engines.registry import get_engine
from cluster.plan.runs import expand_variants, make_plan
from cluster.kernel.runs import ResolvedVariant
from cluster.plan.fairness import ModelFacts
from cluster.plan.repeats import repeats_bound
from cluster.config.bounds import PORT_MAX, PORT_MIN
from cluster.config.repeats import RepeatsUntil
from cluster.errors import PreflightError, UserError
from cluster.node.preflight import LineKind, PreflightLine, as_launched, check_tuning, input_checks, local_preflight
from cluster.probe.checkpoint import ProbeReport
from cluster.config.loader import load_spec, restate_at_field
from cluster.config.experiment import ExperimentSpec
from cluster.tuning.stage import with_artifact

console = Console()
err_console = Console(stderr=True)


@contextlib.contextmanager
def _naming(experiment: Path) -> Iterator[None]:
    """A user error that names no file is about the experiment YAML: say so (file, field and expectation kept)."""
    try:
        yield
    except UserError as e:
        at_field = restate_at_field(experiment, e)  # the experiment's file:line and field, the path it named kept
        if at_field is not None:
            raise PreflightError(at_field, file=str(experiment), field=e.field, expected=e.expected) from None
        if e.file:
            raise
        where = f"{experiment}: {e.field}" if e.field and e.field not in str(e) else str(experiment)
        raise PreflightError(f"{where}: {e}", file=str(experiment), field=e.field, expected=e.expected) from None


_SHOWN: dict[LineKind, tuple[str, Optional[str], Optional[bool], Optional[bool]]] = {
    # (form, style, markup, highlight); markup off where variant names, flag values or paths must print literally
    "dataset": ("[cyan]dataset[/] {}", None, None, False),
    "note": ("{}", "yellow", False, False),
    "adaptive": ("{}", None, False, False),
    "warning": ("{}", "yellow", False, None),
    "summary": ("{}", None, False, None),
    "checkpoint": ("[yellow]note[/] {}", None, None, None),
}
"""How each kind of preflight line is shown on stderr (None: rich's default)."""


def _say(line: PreflightLine) -> None:
    form, style, markup, highlight = _SHOWN[line.kind]
    err_console.print(form.format(line.text), style=style, markup=markup, highlight=highlight, soft_wrap=True)


def _local_checks(spec: ExperimentSpec, output: Optional[str] = None,
                  write_adaptive: bool = False) -> dict[str, ProbeReport]:
    """Preflight on this machine (cluster/node/preflight.py), its lines on stderr."""
    return local_preflight(spec, Path.cwd(), _say, output, write_adaptive)


def _launched(spec: ExperimentSpec, v: ResolvedVariant, output: Optional[str]) -> ResolvedVariant:
    """The variant as `run` launches it from this directory (an adaptive config at its absolute path)."""
    return as_launched(spec, v, output, Path.cwd())


def validate(experiment: Path = typer.Argument(..., help="experiment YAML")) -> None:
    """Check an experiment file against the spec (no cluster, no GPU)."""
    spec = load_spec(experiment)
    variants = expand_variants(spec)
    check_tuning(variants)
    with _naming(experiment):
        input_checks(spec, Path.cwd(), _say, spec.output)
        for v in variants:  # the argv plan prints and run launches: refusals made while building it (an SGLang
            if v.launched:  # alias next to its full flag name) come at validate too; an endpoint has no argv
                _launch_command(spec, _launched(spec, v, None), 30000)
    console.print(f"[green]ok[/] {experiment}: experiment {spec.name!r}, {len(variants)} variant(s), "
                  f"{len(make_plan(spec))} run(s)")


def _launch_command(spec: ExperimentSpec, v: ResolvedVariant, port: int) -> LaunchCommand:
    """The variant's server command as run builds it; a tuned variant's artifact exists only at run time, so it is
    a placeholder here."""
    return get_engine(v.engine).launch(with_artifact(v, None), "127.0.0.1", port, spec.engines.get(v.engine), "python")


def port_value(port: int) -> int:
    """A --port a server can listen on (before, `plan --port 99999` printed `--port 99999` in every command)."""
    if not PORT_MIN <= port <= PORT_MAX:
        raise UserError(f"--port {port}: expected a TCP port from {PORT_MIN} to {PORT_MAX}", field="--port",
                        expected=f"{PORT_MIN}-{PORT_MAX}")
    return port


def plan(experiment: Path = typer.Argument(..., help="experiment YAML"),
         port: int = typer.Option(30000, help="port shown in the printed commands", callback=port_value)) -> None:
    """List every run and print each variant's exact server command line and environment."""
    spec = load_spec(experiment)
    with _naming(experiment):
        _plan(spec, port)


def _plan(spec: ExperimentSpec, port: int) -> None:
    from cluster.plan.sweep_collapse import collapse_fp4_duplicates, undecided_note

    reports = _local_checks(spec)
    facts = {p: ModelFacts.from_report(r) for p, r in reports.items()}
    variants, notes = collapse_fp4_duplicates(expand_variants(spec), facts)
    kept = {v.name for v in variants}
    runs = make_plan(spec, keep=lambda v: v.name in kept)
    for line in notes + [n for n in [undecided_note(variants, facts)] if n]:
        err_console.print(f"note: {line}", style="yellow", markup=False, soft_wrap=True)
    for v in variants:
        base = " (baseline)" if v.is_baseline else ""
        if v.endpoint is not None:  # nothing launched: its URL, never its key
            ep = v.endpoint
            console.print(f"# {v.name}{base} engine={v.engine} is an endpoint already running at {ep.url}: no argv, "
                          f"nothing launched or killed, no GPU reserved; cache flush "
                          f"{'allowed' if ep.flush_cache else 'not allowed'}"
                          f"{'; key from $' + ep.api_key_env if ep.api_key_env else ''}", style="bold", markup=False,
                          highlight=False, soft_wrap=True)
            continue
        if v.deployment is not None:
            _plan_deployment(spec, v, port, base)
            continue
        cmd = _launch_command(spec, _launched(spec, v, None), port)
        fixed = v.args.get("port")
        where = f"port {fixed} (fixed by args.port)" if fixed is not None else "a free port chosen at start"
        # the headline is a shell comment, so a copied block runs only the command line under it
        console.print(f"# {v.name}{base} engine={v.engine} tp={v.tp} serves on {where}", style="bold",
                      markup=False, highlight=False, soft_wrap=True)
        shell = shell_command(cmd.argv, cmd.env)  # secrets as "$NAME" references, never their values
        if shell.comment():
            console.print(shell.comment(), markup=False, highlight=False, soft_wrap=True)
        console.print(shell.line, markup=False, highlight=False, soft_wrap=True)
    t = Table(title=f"{spec.name}: {len(runs)} runs ({spec.order} order, isolation={spec.isolation})")
    for col in ("#", "run key", "variant", "workload", "load", "repeat"):
        t.add_column(col)
    for r in runs:
        t.add_row(str(r.order_index), r.run_key, r.variant.name, r.workload.name, r.load.label, str(r.repeat))
    console.print(t)
    if isinstance(spec.repeats, RepeatsUntil):
        u, b = spec.repeats, repeats_bound(spec.repeats, len(runs))
        console.print(f"repeats until the 95 % interval of {u.until.metric} is within ±{u.until.half_width_pct:g} %: "
                      f"each of the {b.points} points runs {u.min} repeats (above), then more on the same server "
                      f"start while wider, at most {u.max}: at most {b.most_runs} runs, up to {u.max / u.min:.3g}x the "
                      "time of the runs above", highlight=False, soft_wrap=True)
    s = spec.load.search
    if s is not None:
        console.print(f"capacity search over {s.over}: each (variant, workload, repeat) starts at its planned probe "
                      f"{s.min:g}, doubles while SLO attainment >= {s.slo_attainment:g}, then bisects to "
                      f"{s.step():g} within [{s.min:g}, {s.max:g}] (a concurrency search stops at the server's own "
                      "cap); the later probes are decided at run time, each a recorded run", highlight=False,
                      soft_wrap=True)


def _plan_deployment(spec: ExperimentSpec, v: ResolvedVariant, port: int, base: str) -> None:
    """A deployment's headline, then every process's command, shell-quoted, one per line, each under a comment
    naming its node and GPUs (Ray picks the node and the GPU ids at start: the comment says which bundle)."""
    from cluster.kernel.deployment import placement_strategy
    from cluster.plan.deployment import describe, planned_processes, variant_reservation

    r = variant_reservation(v, spec.isolation, spec.cluster.gpus_per_node)
    strategy = placement_strategy(v, spec.cluster.gpus_per_node)
    console.print(f"# {v.name}{base} engine={v.engine}: {describe(v)}; {v.gpus} GPU(s) in one placement group "
                  f"({strategy}: {'each process on its own node' if strategy == 'STRICT_SPREAD' else 'one node' if strategy == 'STRICT_PACK' else 'as few nodes as fit'}"
                  f"{f'; {r.gpus - v.gpus} more held idle for isolation=node' if r.gpus > v.gpus else ''})",
                  style="bold", markup=False, highlight=False, soft_wrap=True)
    launched = _launched(spec, v, None)
    for i, (p, pv) in enumerate(planned_processes(launched)):
        node = f"node of rank {p.node_rank}" if p.role == "rank" else \
            "the deployment's node" if strategy == "STRICT_PACK" else "a node Ray picks"
        cmd = _launch_command(spec, pv, port + i)
        console.print(f"# {v.name} {p.name}: {p.tp} GPU(s) (bundle {i}), on {node}; port {port + i} here, a free "
                      "port at start", markup=False, highlight=False, soft_wrap=True)
        shell = shell_command(cmd.argv, cmd.env)
        if shell.comment():
            console.print(shell.comment(), markup=False, highlight=False, soft_wrap=True)
        console.print(shell.line, markup=False, highlight=False, soft_wrap=True)
    gateway = _gateway_plan_line(spec, v, port)
    if gateway:
        for line in gateway:
            console.print(line, markup=False, highlight=False, soft_wrap=True)


def _gateway_plan_line(spec: ExperimentSpec, v: ResolvedVariant, port: int) -> list[str]:
    """The gateway's comment and command line for a deployment behind it ([] for one that has none): over the
    servers at the ports printed above (free ports at start), beside the load actors."""
    from cluster.engines.gateway import PrefillWorker
    from cluster.plan.deployment import PLAN_BOOTSTRAP_PORT, gateway_command, planned_processes

    procs = planned_processes(v)
    url = {p.name: f"http://127.0.0.1:{port + i}" for i, (p, _) in enumerate(procs)}
    boot = {p.name: pv.args.get("disaggregation-bootstrap-port") for p, pv in procs}
    prefill = [PrefillWorker(url[p.name], int(b) if isinstance(b, int) else PLAN_BOOTSTRAP_PORT)
               for p, _ in procs if p.role == "prefill" for b in [boot[p.name]]]
    cmd = gateway_command(v, spec.engines.get(v.engine), [url[p.name] for p, _ in procs if p.role == "replica"],
                          prefill, [url[p.name] for p, _ in procs if p.role == "decode"], port + len(procs),
                          port + len(procs) + 1)
    if cmd is None:
        return []
    return [f"# {v.name} gateway: no GPU, beside the load actors; port {port + len(procs)} here (metrics "
            f"{port + len(procs) + 1}), free ports at start; ready when its /readiness answers 200",
            shell_command(cmd.argv, cmd.env).line]


def run(
    experiment: Path = typer.Argument(..., help="experiment YAML"),
    output: Optional[str] = typer.Option(None, help="dataset root (default: the spec's output)"),
    address: Optional[str] = typer.Option(None, help="Ray address (default: RAY_ADDRESS or a local cluster)"),
    progress: bool = typer.Option(True, help="show a progress display: in a terminal a live table of the points "
                                  "being measured over the progress bar"),
    gpus: Optional[int] = typer.Option(None, help="logical GPUs for a local cluster (default: detected, or 8 "
                                       "for an all-simulated experiment)"),
) -> None:
    """Run an experiment end to end and print the comparison table."""
    spec = load_spec(experiment)
    with _naming(experiment):
        _local_checks(spec, output=output or spec.output, write_adaptive=True)
    from cluster.commands.live_view import run_display
    from cluster.distributed.driver import init_ray, logical_gpus_for, run_experiment

    init_ray(address, gpus if gpus is not None else logical_gpus_for(spec))
    from cluster.distributed.doctor_task import run_time_failures

    run_time_failures(spec, output, Path.cwd(),  # `sglbench doctor`'s warnings and failures, before any GPU is held
                      lambda line: err_console.print(line, style="yellow", markup=False, soft_wrap=True))
    # in a terminal a live table of the points being measured over the bar; a pipe or CI: one line per event
    with run_display(console, spec.name, len(make_plan(spec)), progress) as (view, log, on_event):
        # relative paths in a spec (output, prompt files) are taken from the working directory, as they
        # are under `ray job submit --working-dir .`
        result = run_experiment(spec, base_dir=Path.cwd(), output_root=output, log=log, on_run=view.on_run,
                                on_event=on_event)
    counts = result.counts()
    console.print(f"dataset: {result.dataset_root}/{spec.name}  runs: " +
                  ", ".join(f"{k}={v}" for k, v in sorted(counts.items())))
    # piped or in CI the per-category tables are summary lines (the tables: results compare --by category);
    # NothingToShow (exit 2) when no run is recorded
    print_run_summary(result.dataset_root, spec, counts, piped=not console.is_terminal)
    if counts.get("failed"):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command()(validate)
    app.command()(plan)
    app.command()(run)

