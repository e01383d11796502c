"""`sglbench results compare | list | show | query | report`: read an experiment's dataset and render it."""

from __future__ import annotations

import enum
from typing import Mapping, Optional

import pandas as pd
import typer
from rich.markup import escape

from cluster.errors import SglbenchError, UserError
from rich.table import Table

from cluster.commands.acceptance_health_output import print_acceptance_health, with_health_column
from cluster.commands.cross_output import cross_table, print_cross
from cluster.commands.endpoint_notes import print_endpoints, print_gpus_notes
from cluster.commands.repeats_output import emit_show, print_repeats, recorded_repeats
from cluster.commands.result_tables import (Format, NothingToShow, cell_text, clear_errors, console, emit,
                                            err_console, no_runs, nonempty_table, simulated_note)
from cluster.commands.terminal import print_table
from cluster.analysis.recommend import RECOMMEND_N_BOOT, RECOMMEND_SEED
from cluster.analysis.results import Results
from cluster.config.experiment import ExperimentSpec
from cluster.engines.registry import is_simulated

results_app = typer.Typer(no_args_is_help=True, help="Compare, list, inspect and query result datasets.")


class By(str, enum.Enum):
    category = "category"
    turn = "turn"
    position = "position"


def seed_value(seed: int) -> int:
    """A --seed the bootstrap's generator takes (numpy seeds are non-negative): before, -1 was a traceback."""
    if seed < 0:
        raise UserError(f"--seed {seed}: expected a non-negative integer (the bootstrap's random generator takes "
                        "seeds from 0 up)", field="--seed", expected="an integer >= 0")
    return seed


ROOT_OPT = typer.Option("results", "--root", help="Dataset root: a local path or a pyarrow filesystem URI.")


NEW_ROOT_OPT = typer.Option(None, "--new-root", help="Dataset root of the second experiment (default: --root), "
                            "e.g. the same experiment run from another commit into another output: root.")


@results_app.command("compare")
def compare_cmd(
    experiment: str = typer.Argument(..., help="Experiment name (a directory under --root)."),
    experiment_b: Optional[str] = typer.Argument(
        None, metavar="[EXP_B]", help="A second experiment: compare it point for point against the first "
        "(matched by workload, load point and variant), with intervals and verdicts."),
    root: str = ROOT_OPT,
    new_root: Optional[str] = NEW_ROOT_OPT,
    baseline: str = typer.Option(None, "--baseline", help="Variant to compute speedups against."),
    fmt: Format = typer.Option(Format.table, "--format", help="Output format."),
    ci: bool = typer.Option(False, "--ci", help="95% confidence intervals, speedup verdicts and quality warnings."),
    n_boot: int = typer.Option(2000, "--n-boot", min=100, help="Bootstrap resamples (with --ci)."),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed (with --ci).", callback=seed_value),
    by: Optional[By] = typer.Option(None, "--by", help="Break the table down: 'category' (prompt categories), "
                                    "'turn' (turns of multi-turn sessions), or 'position' (speculative acceptance "
                                    "per draft position), with 95% intervals."),
) -> None:
    """Per load point and variant: means over ok repeats and output tok/s speedup over the baseline. With EXP_B:
    EXP_B against EXP (same workload, load point and variant), each ratio > 1 when EXP_B is better. With --by
    category (or turn): per prompt category (or session turn), with 95% intervals."""
    if by is None and (experiment_b is not None or new_root is not None):
        base, new = _open_pair(root, experiment, new_root or root, experiment_b or experiment)
        print_cross(base, new, fmt.value, n_boot, seed)
        return
    results = open_results(root, experiment)
    if by is By.position:
        print_compare_by_position(results, fmt.value)
    elif by is not None:
        print_compare_by_category(results, baseline, fmt.value, n_boot, seed, by.value)
    elif ci:
        print_compare_ci(results, baseline, fmt.value, n_boot, seed)
    else:
        print_compare(results, baseline, fmt.value)


def open_results(root: str, experiment: str) -> Results:
    """The one Results a command reads (an unreadable root is an EnvironmentFault, a missing experiment the
    store's ExperimentNotFound)."""
    with clear_errors():
        return Results.open(root, experiment)


def _open_pair(root: str, base: str, new_root: str, new: str) -> tuple[Results, Results]:
    return open_results(root, base), open_results(new_root, new)


def print_compare_ci(results: Results, baseline: Optional[str], fmt_name: str, n_boot: int = 2000,
                     seed: int = 0) -> None:
    """Render compare_with_ci: 'estimate [lo, hi]' cells, speedup verdicts, then the warnings."""
    from cluster.analysis.comparison import compare_columns, compare_view, compare_with_ci

    fmt = Format(fmt_name)
    experiment = results.experiment
    df = nonempty_table(lambda: compare_with_ci(results, baseline, n_boot=n_boot, seed=seed),
                        no_runs(experiment, results.root))
    if fmt is not Format.table:
        out = df.copy()
        out["warnings"] = ["; ".join(w) for w in out["warnings"]]
        emit(with_health_column(out, results) if fmt is Format.json else out, fmt)
        return
    view = compare_view(df)
    view["variant"] = [f"{v}{'*' if b else ''}{f' ({e})' if is_simulated(e) else ''}"
                       for v, b, e in zip(df["variant"], df["is_baseline"], df["engine"])]
    # the declared columns the terminal shows (metric_catalog Column.shown: e.g. prefix hit % once the cache served)
    keep = ["load", "variant", "GPUs", "ok/failed/invalid"] + [lbl for lbl, _, shown in compare_columns(df) if shown]
    if df["workload"].nunique() > 1:
        keep.insert(0, "workload")
    emit(view[keep].rename(columns={"ok/failed/invalid": "ok/f/i"}), fmt,
          title=f"{experiment}: estimate [95% CI]; latencies in ms; * = baseline; (sim) = simulated engine; "
                f"ok/f/i = ok / failed / invalid repeats")
    console.print(df.attrs.get("ci_method", ""), highlight=False)
    from cluster.analysis.adaptive_vs_fixed import adaptive_comparison_lines

    for line in adaptive_comparison_lines(results, df):
        console.print(f"adaptive vs fixed {line}", highlight=False, soft_wrap=True, markup=False)
    for text, points in grouped_warnings(df):
        console.print(f"[yellow]warning[/] {text} ({points})", highlight=False)
    print_gpus_notes(df)
    print_acceptance_health(results)


def grouped_warnings(df: pd.DataFrame) -> list[tuple[str, str]]:
    """Each distinct warning once, with the points it concerns ('all 8 points' when every one): a 1-repeat demo
    says 'insufficient repeats' once, not once per row."""
    from cluster.analysis.comparison import short_point_label

    by_text: dict[str, list[str]] = {}
    for r in df.itertuples(index=False):
        load = short_point_label(r.load_kind, r.load_value)
        multi = df["workload"].nunique() > 1
        for w in r.warnings:
            by_text.setdefault(w, []).append(f"{r.workload + ' ' if multi else ''}{load} {r.variant}")
    return [(text, f"all {len(points)} points" if len(points) == len(df) > 1 else ", ".join(points))
            for text, points in by_text.items()]


def print_compare_by_category(results: Results, baseline: Optional[str], fmt_name: str,
                              n_boot: int = 2000, seed: int = 0, by: str = "category") -> None:
    """Render compare_by_category: per prompt category (or session turn) acceptance, TPOT, TTFT and throughput
    with intervals."""
    from cluster.analysis.categories import categorised, category_view, compare_by_category

    fmt = Format(fmt_name)
    experiment = results.experiment
    df = nonempty_table(lambda: compare_by_category(results, baseline, n_boot=n_boot, seed=seed, by=by),
                        no_runs(experiment, results.root, "ok runs"))
    shown = categorised(df, by)
    if not shown.empty:  # without categories anywhere the table shows every workload's '-' rows
        df = shown
    if fmt is not Format.table:
        emit(df, fmt)
        return
    view = category_view(df)
    if df["workload"].nunique() == 1:
        view = view.drop(columns="workload")
    sim = simulated_note(_engines(results))
    emit(view, fmt, title=f"{experiment} by {'session turn' if by == 'turn' else by}{sim}: estimate [95% CI]; "
          "* = baseline")
    console.print(df.attrs.get("ci_method", ""), highlight=False, soft_wrap=True)


def print_compare_by_position(results: Results, fmt_name: str) -> None:
    """Render acceptance per draft position (analysis/acceptance_positions.py) per variant and prompt category."""
    from cluster.analysis.acceptance_positions import (INTERVAL_METHOD, READ_COLUMNS, acceptance_by_position,
                                                       position_table, position_view)

    fmt = Format(fmt_name)
    with clear_errors():
        groups = acceptance_by_position(results.table("requests", READ_COLUMNS), results.runs())
    if not groups:
        raise NothingToShow(f"no acceptance per draft position for {results.experiment!r} under {results.root!r}: "
                            "no ok speculative request of an ok run carries spec_correct_drafts_histogram (SGLang "
                            "and the simulator send it)", file=results.root, field="--by position",
                            expected="ok speculative runs")
    if fmt is not Format.table:
        emit(position_table(groups), fmt)
        return
    view = position_view(groups)
    if view["workload"].nunique() == 1:
        view = view.drop(columns="workload")
    sim = simulated_note(_engines(results))
    emit(view, fmt, title=f"{results.experiment} by draft position{sim}: estimate [95% CI]")
    console.print(INTERVAL_METHOD, highlight=False, soft_wrap=True)


def _engines(results: Results) -> list[str]:
    return [str(e) for e in results.runs_table().column("engine").to_pylist()]


def print_compare(results: Results, baseline: Optional[str], fmt_name: str) -> None:
    """Render the compare table (also used by `sglbench run` after an experiment)."""
    from cluster.analysis.comparison import short_point_label
    from cluster.analysis.query import compare_table

    fmt = Format(fmt_name)
    experiment = results.experiment
    with clear_errors():
        df = compare_table(results, baseline)
    if df.empty:
        raise no_runs(experiment, results.root)
    if fmt is Format.table:
        from rich import box

        engines = sorted(set(df["engine"]))
        one_engine = len(engines) == 1
        from cluster.analysis.comparison import served_devices
        from cluster.analysis.per_gpu import terminal_gpus
        from cluster.analysis.accuracy import invalid_for_speed_claims

        on_cpu = "cpu" in served_devices(results)
        less_accurate = invalid_for_speed_claims(results, next(
            (str(v) for v, b in zip(df["variant"], df["is_baseline"]) if b), None))
        for wl, part in df.groupby("workload", sort=False):
            sim = " (simulated engine, not GPU numbers)" if is_simulated(engines[0]) else ""
            eng = f"; engine {engines[0]}{sim}" if one_engine else ""
            if on_cpu and not all(is_simulated(x) for x in engines):
                eng += "; served on CPU (CPU numbers, not GPU numbers)"
            shown, gpus, each = terminal_gpus(part)
            cols = ("load", "variant", *(["GPUs"] if gpus else []), "ok/f/i", *(str(c.short) for _, c in shown),
                    "×base")
            t = Table(title=f"{experiment} / {wl}: means over ok repeats; ms; * = baseline{each}{eng}",
                      box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True, title_justify="left")
            rows = list(zip(
                [short_point_label(k, v) for k, v in zip(part["load_kind"], part["load_value"])],
                [f"{v}{'*' if b else ''}" + ("" if one_engine else f" ({e})")
                 for v, b, e in zip(part["variant"], part["is_baseline"], part["engine"])],
                *([[cell_text(g) for g in part["gpus"]]] if gpus else []),
                [f"{a}/{b}/{c}" for a, b, c in zip(part["n_runs"], part["n_failed"], part["n_invalid"])],
                *([cell_text(v, c.digits) + (c.mark[1] if c.mark is not None and flag else "")
                   for v, flag in zip(part[name], part[c.mark[0]] if c.mark is not None else [None] * len(part))]
                  for name, c in shown),
                [cell_text(v, 2) + ("✗" if var in less_accurate else "")
                 for v, var in zip(part["speedup_output_tok_s"], part["variant"])]))
            print_table(console, cols, rows, right=[False, False] + [True] * (len(cols) - 2), table=t)
            marks: dict[str, list[str]] = {}  # each distinct mark once, with the points it concerns
            for r in part.itertuples(index=False):
                at = f"{short_point_label(r.load_kind, r.load_value)} {r.variant}"
                for why in filter(None, str(r.steady_short).split("; ")):
                    marks.setdefault(f"[yellow]warning[/] steady tok/s not vouched for: {why}", []).append(at)
                if r.saturated:
                    marks.setdefault(f"[yellow]saturated[/] {at}: {r.saturated}", [])
            for text, points in marks.items():
                console.print(text + (f" ({', '.join(points)})" if points else ""), highlight=False)
            print_gpus_notes(part)
        console.print("ok/f/i = ok / failed / invalid repeats; steady = output tok/s over the steady stretch "
                      "(docs/steady-state.md; ! = a run's stretch too short to count, named above; - = none "
                      "recorded); tok/s = over the whole window; GPUs, tok/s/GPU (where the deployments' GPU counts "
                      "differ) = held by a deployment's servers (- = an endpoint's, not known), tok/s / GPUs; ×base = "
                      "output tok/s over the baseline at the same load; TTFT99 = TTFT p99 (mean over repeats); TPOT = "
                      "mean (E2E − TTFT)/(tokens − 1); ITL/tok = median chunk gap split over the tokens each chunk "
                      "carried; accept = tokens per verify step. --ci gives 95% intervals and verdicts (needs 2+ "
                      "repeats), --format csv|markdown|json every column.", highlight=False)
        for variant, why in less_accurate.items():  # ✗: the speed is shown, never claimed (docs/accuracy.md)
            console.print(f"[red]✗ not a speed claim[/] {variant}: {why}", highlight=False, soft_wrap=True)
        print_resolved_differences(results)
        from cluster.analysis.template_contrast import contrast_lines

        for line in contrast_lines(results):  # per chat template setting (cluster/config/template_settings.py)
            console.print(line, highlight=False, soft_wrap=True, markup=False)
        print_acceptance_health(results)
        print_endpoints(results)
    else:
        emit(with_health_column(df, results) if fmt is Format.json else df, fmt)


def print_resolved_differences(results: Results) -> None:
    """Name every resolved server arg that differs from the baseline's besides what the variant declared."""
    from cluster.analysis.comparison import resolved_cap_problems, unintended_differences

    try:
        diffs = unintended_differences(results)
        caps = resolved_cap_problems(results)
    except (SglbenchError, ValueError, KeyError) as e:  # an older dataset: a stored spec that does not validate
        # (read_stored_spec's StoreError), a column it lacks (pyarrow raises ValueErrors); the table above stays, the
        # note says why this comparison is missing
        err_console.print(f"[yellow]note[/] resolved-args comparison unavailable: {escape(str(e))}", soft_wrap=True,
                          highlight=False)
        return
    for line in caps:  # the caps the servers really ran, not the declared flags
        console.print(line, style="red", highlight=False, soft_wrap=True, markup=False)
    for variant, d in diffs.items():
        items = "; ".join(f"{k}: {a!r} (baseline) vs {b!r}" for k, (a, b) in d.items())
        console.print(f"[yellow]warning[/] {variant}: resolved server args differ from the baseline's beyond "
                      f"what the spec declares: {items}", highlight=False, soft_wrap=True)


@results_app.command("regress")
def regress_cmd(
    base: str = typer.Argument(..., help="Baseline experiment (under --root)."),
    new: str = typer.Argument(..., help="Experiment to check (under --new-root, default --root)."),
    max_slowdown: str = typer.Option("5%", "--max-slowdown", help="Allowed slowdown, e.g. 5% (or 0.05)."),
    root: str = ROOT_OPT,
    new_root: Optional[str] = NEW_ROOT_OPT,
    n_boot: int = typer.Option(2000, "--n-boot", min=100, help="Bootstrap resamples."),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed.", callback=seed_value),
) -> None:
    """CI gate: exit 1 when NEW is significantly slower than BASE by more than --max-slowdown on output tok/s,
    mean TPOT or TTFT p99 at any matched point (workload, load point, variant); 0 when not; 2 when nothing can be
    judged (no common point, or no point with two ok repeats on each side)."""
    from cluster.analysis.cross_experiment import parse_fraction, regressions, undecided

    limit = parse_fraction(max_slowdown)
    df = cross_table(*_open_pair(root, base, new_root or root, new), n_boot, seed)
    found = regressions(df, limit)
    open_cells = undecided(df)
    total = len(df) * 3
    if open_cells == total:
        raise UserError(f"no matched point of {base!r} and {new!r} has two ok repeats on each side, so nothing can "
                        "be judged", field="repeats", expected="at least 2 ok repeats per point on both sides "
                        "(3 or more for a trustworthy gate)")
    for r in found:
        console.print(f"REGRESSION {r.point}: {r.metric} NEW/BASE {r.ratio:.3f} [{r.lo:.3f}, {r.hi:.3f}], "
                      f"beyond the allowed {limit:.1%}", highlight=False, soft_wrap=True)
    if open_cells:
        console.print(f"[yellow]warning[/] {open_cells} of {total} (point, metric) cells have too few repeats "
                      "for a verdict and were not judged", highlight=False, soft_wrap=True)
    for line in df.attrs["unmatched"]:
        console.print(f"[yellow]not compared[/] {line}", highlight=False, soft_wrap=True)
    console.print(f"{len(found)} regression(s) beyond {limit:.1%} in {total - open_cells} judged (point, metric) "
                  f"cells", highlight=False)
    if found:
        raise typer.Exit(1)


@results_app.command("list")
def list_cmd(root: str = ROOT_OPT, fmt: Format = typer.Option(Format.table, "--format")) -> None:
    """Experiments under the root, with run counts by status."""
    from cluster.dataset.store import list_experiments

    with clear_errors():
        rows = []
        for name in list_experiments(root):
            st = Results.open(root, name).table("runs", ["status"]).column("status").to_pylist()
            rows.append({"experiment": name, "runs": len(st), "ok": st.count("ok"),
                         "invalid": st.count("invalid"), "failed": st.count("failed")})
    if not rows:
        raise NothingToShow(f"no experiments under {root!r}", file=root, field="--root",
                            expected="a dataset root holding at least one experiment")
    emit(pd.DataFrame(rows), fmt, title=f"experiments under {root}")


@results_app.command("show")
def show_cmd(experiment: str = typer.Argument(...), root: str = ROOT_OPT,
             fmt: Format = typer.Option(Format.table, "--format")) -> None:
    """Every run of an experiment: status, and why a run failed or is invalid; with `repeats: {until}`, where each
    point's repeats stopped (JSON: {"runs": [...], "repeats_until": [...]} then)."""
    from cluster.analysis.query import query

    sql = ("SELECT order_index, variant, engine, workload, load_kind, load_value, repeat, status, "
           "coalesce(failure_reason, invalid_reasons) AS reason, m_output_tok_s AS output_tok_s, run_key "
           "FROM runs ORDER BY order_index")
    results = open_results(root, experiment)
    with clear_errors():
        df = query(results, sql)
        points = recorded_repeats(results)
    emit_show(with_health_column(df, results) if fmt is Format.json else df, points, fmt, title=f"{experiment}: runs")
    if fmt is Format.table:
        print_acceptance_health(results)
        print_endpoints(results)


@results_app.command("query")
def query_cmd(
    experiment: str = typer.Argument(...),
    sql: str = typer.Argument(..., help="One SELECT (DuckDB dialect) over the views runs, requests, chunks, "
                                         "variants, request_metrics, chunk_gaps, correctness, server_metrics, "
                                         "gpu_metrics, kernel_profile."),
    root: str = ROOT_OPT,
    fmt: Format = typer.Option(Format.table, "--format"),
) -> None:
    """Read-only SQL over the experiment's views: runs, requests, chunks, variants, request_metrics (per-request
    TTFT, TPOT, E2E, acceptance, lag), chunk_gaps (per-chunk and per-token ITL), correctness, server_metrics,
    gpu_metrics (GPU telemetry), kernel_profile (top kernels of profiled variants) (the last four when the experiment
    has them). One SELECT; COPY, ATTACH, INSTALL/LOAD, DDL, PRAGMA and SET are
    refused, and no file outside the dataset can be read."""
    from cluster.analysis.query import query

    results = open_results(root, experiment)
    with clear_errors():
        df = query(results, sql)
    emit(df, fmt)


def print_run_summary(root: str, spec: ExperimentSpec, counts: Mapping[str, int], piped: bool = False) -> None:
    """What `sglbench run` and a Ray job's log end with: the comparison, then, where a run was ok, the tables per
    prompt category, per session turn and capacity at the SLO where the spec has them (`piped`: the category and
    turn tables as summary lines) and the answer `results recommend` gives per load point. NothingToShow when no run
    is recorded: `run` ends with its one line (exit 2), the Ray job reports it and still prints its JSON line."""
    from cluster.commands.run_answer import print_category_summary, print_run_answer

    results = open_results(root, spec.name)
    print_compare(results, None, "table")
    with clear_errors():
        print_repeats(recorded_repeats(results))
    if not counts.get("ok"):
        return
    for by, wanted in (("category", any(w.prompts.source in ("sharegpt", "messages") for w in spec.workloads)),
                       ("turn", any(w.sessions is not None for w in spec.workloads))):
        if wanted and piped:
            print_category_summary(results, by)
        elif wanted:
            print_compare_by_category(results, None, "table", n_boot=1000, by=by)
    if spec.load.search is not None:
        print_capacity(results, None, "table", n_boot=1000)
    print_run_answer(results)


@results_app.command("capacity")
def capacity_cmd(
    experiment: str = typer.Argument(..., help="Experiment name (a directory under --root)."),
    root: str = ROOT_OPT,
    baseline: str = typer.Option(None, "--baseline", help="Variant to compare capacities against."),
    fmt: Format = typer.Option(Format.table, "--format", help="Output format."),
    n_boot: int = typer.Option(2000, "--n-boot", min=100, help="Bootstrap resamples."),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed.", callback=seed_value),
) -> None:
    """Capacity at the SLO (load.search): per variant the highest load meeting the SLO attainment target, with a
    95% interval over repeats and a verdict against the baseline; bounds and incomplete searches say so."""
    print_capacity(open_results(root, experiment), baseline, fmt.value, n_boot, seed)


def print_capacity(results: Results, baseline: Optional[str], fmt_name: str, n_boot: int = 2000,
                   seed: int = 0) -> None:
    from cluster.analysis.capacity import capacity_table, capacity_view

    fmt = Format(fmt_name)
    experiment = results.experiment
    df = nonempty_table(lambda: capacity_table(results, baseline, n_boot=n_boot, seed=seed),
                        NothingToShow(f"experiment {experiment!r} under {results.root!r} has no capacity search "
                                      "runs", file=results.root, field="load.search",
                                      expected="an experiment run with load.search"))
    if fmt is not Format.table:
        emit(df, fmt)
        return
    r = df.iloc[0]
    sim = simulated_note(_engines(results))
    emit(capacity_view(df), fmt, title=f"{experiment}{sim}: capacity at SLO attainment >= {r['target']:g}, "
          f"resolution {r['resolution']:g}; * = baseline")
    console.print(df.attrs.get("ci_method", ""), highlight=False, soft_wrap=True)


@results_app.command("report")
def report_cmd(
    experiment: str = typer.Argument(...),
    root: str = ROOT_OPT,
    out: Optional[str] = typer.Option(None, "--out", help="Output directory (default <root>/reports/<experiment>)."),
    n_boot: int = typer.Option(1000, "--n-boot", min=100, help="Bootstrap resamples for the intervals."),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed.", callback=seed_value),
    bytes_per_token: Optional[float] = typer.Option(
        None, "--bytes-per-token", min=1.0,
        help="Decode bytes per token for the bandwidth bound (default: experiment.json's probe report)."),
) -> None:
    """An HTML page with PNG plots: throughput, TTFT/TPOT CDFs, acceptance, speedups, bandwidth bound."""
    from cluster.analysis.report import build_report

    results = open_results(root, experiment)
    with clear_errors():
        path = build_report(results, out, n_boot=n_boot, seed=seed, bytes_per_token=bytes_per_token)
    console.print(f"report written to {path}", highlight=False)


class RecommendFormat(str, enum.Enum):
    table = "table"
    json = "json"


@results_app.command("recommend")
def recommend_cmd(
    experiment: str = typer.Argument(..., help="Experiment name (a directory under --root)."),
    root: str = ROOT_OPT,
    fmt: RecommendFormat = typer.Option(RecommendFormat.table, "--format", help="Output format."),
    n_boot: int = typer.Option(RECOMMEND_N_BOOT, "--n-boot", min=100, help="Bootstrap resamples for the intervals."),
    seed: int = typer.Option(RECOMMEND_SEED, "--seed", help="Bootstrap seed.", callback=seed_value),
    write_adaptive: Optional[str] = typer.Option(
        None, "--write-adaptive", metavar="FILE", help="Also write the depth schedule (concurrency points) as an "
        "SGLang adaptive config (--speculative-adaptive-config) to FILE (docs/recommend.md)."),
    workload: Optional[str] = typer.Option(None, "--workload", help="Whose schedule --write-adaptive writes, when "
                                           "the experiment has several workloads."),
) -> None:
    """Per workload and load point, the variant to serve with its evidence (speedup over the baseline with a 95%
    interval, the gate, whether the runs are vouched for), the NEXTN depth schedule over the load points, and why
    nothing is chosen where the data cannot tell (docs/recommend.md)."""
    from cluster.commands.recommend_output import print_recommendations

    print_recommendations(open_results(root, experiment), fmt is RecommendFormat.json, n_boot=n_boot, seed=seed,
                          write_adaptive=write_adaptive, workload=workload)


def register(app: typer.Typer) -> None:
    app.add_typer(results_app, name="results")
