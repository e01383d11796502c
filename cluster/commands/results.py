"""`sglbench results compare | list | show | query | report`: read an experiment's dataset and render it."""

from __future__ import annotations

import enum
import math
from contextlib import contextmanager
from typing import Any, Iterator, Optional

import pandas as pd
import typer
from rich.console import Console

from cluster.errors import EnvironmentFault, SglbenchError
from rich.table import Table

console = Console()
err_console = Console(stderr=True)

results_app = typer.Typer(no_args_is_help=True, help="Compare, list, inspect and query result datasets.")


class Format(str, enum.Enum):
    table = "table"
    csv = "csv"
    markdown = "markdown"
    json = "json"


ROOT_OPT = typer.Option("results", "--root", help="Dataset root: a local path or a pyarrow filesystem URI.")


@contextmanager
def _clear_errors() -> Iterator[None]:
    """A dataset root that cannot be read (missing, permissions, an unreachable bucket) is an EnvironmentFault;
    sglbench's own errors (missing experiment, bad SQL, bad baseline) pass through to the CLI's handler."""
    try:
        yield
    except OSError as e:
        raise EnvironmentFault(f"cannot read the dataset: {e}") from e


def _cell(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"
    return str(v)


def _markdown(df: pd.DataFrame) -> str:
    lines = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


def _emit(df: pd.DataFrame, fmt: Format, title: str = "") -> None:
    if fmt is Format.csv:
        typer.echo(df.to_csv(index=False), nl=False)
    elif fmt is Format.json:
        typer.echo(df.to_json(orient="records", indent=2))
    elif fmt is Format.markdown:
        typer.echo(_markdown(df))
    else:
        t = Table(title=title or None, show_lines=False)
        for c in df.columns:
            t.add_column(str(c), justify="right" if pd.api.types.is_numeric_dtype(df[c]) else "left")
        for row in df.itertuples(index=False):
            t.add_row(*(_cell(v) for v in row))
        console.print(t)


@results_app.command("compare")
def compare_cmd(
    experiment: str = typer.Argument(..., help="Experiment name (a directory under --root)."),
    root: str = ROOT_OPT,
    baseline: str = typer.Option(None, "--baseline", help="Variant to compute speedups against."),
    fmt: Format = typer.Option(Format.table, "--format", help="Output format."),
    ci: bool = typer.Option(False, "--ci", help="95% confidence intervals, speedup verdicts and quality warnings."),
    n_boot: int = typer.Option(2000, "--n-boot", min=100, help="Bootstrap resamples (with --ci)."),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed (with --ci)."),
) -> None:
    """Per load point and variant: means over ok repeats and output tok/s speedup over the baseline."""
    if ci:
        print_compare_ci(root, experiment, baseline, fmt.value, n_boot, seed)
    else:
        print_compare(root, experiment, baseline, fmt.value)


def print_compare_ci(root: str, experiment: str, baseline: Optional[str], fmt_name: str, n_boot: int = 2000,
                     seed: int = 0) -> None:
    """Render compare_with_ci: 'estimate [lo, hi]' cells, speedup verdicts, then the warnings."""
    from cluster.analysis.comparison import compare_view, compare_with_ci

    fmt = Format(fmt_name)
    with _clear_errors():
        df = compare_with_ci(root, experiment, baseline, n_boot=n_boot, seed=seed)
    if df.empty:
        err_console.print(f"no runs recorded for experiment {experiment!r} under {root!r}")
        raise typer.Exit(2)
    if fmt is not Format.table:
        out = df.copy()
        out["warnings"] = ["; ".join(w) for w in out["warnings"]]
        _emit(out, fmt)
        return
    view = compare_view(df)
    view["variant"] = [f"{v}{'*' if b else ''}{' (sim)' if e == 'sim' else ''}"
                       for v, b, e in zip(df["variant"], df["is_baseline"], df["engine"])]
    keep = ["load", "variant", "ok/failed/invalid", "output tok/s", "TTFT p99 ms", "TPOT mean ms",
            "accept length", "speedup tok/s", "speedup TPOT"]
    if df["workload"].nunique() > 1:
        keep.insert(0, "workload")
    if df["goodput_rps"].notna().any():
        keep.append("goodput req/s")
    _emit(view[keep].rename(columns={"ok/failed/invalid": "ok/f/inv"}), fmt,
          title=f"{experiment}: estimate [95% CI]; latencies in ms; * = baseline; (sim) = simulated engine")
    console.print(df.attrs.get("ci_method", ""), highlight=False, soft_wrap=True)
    for r in df.itertuples(index=False):
        for w in r.warnings:
            console.print(f"[yellow]warning[/] {r.workload} {r.load_kind}={r.load_value:g} {r.variant}: {w}",
                          highlight=False, soft_wrap=True)


def print_compare(root: str, experiment: str, baseline: Optional[str], fmt_name: str) -> None:
    """Render the compare table (also used by `sglbench run` after an experiment)."""
    from cluster.analysis.query import compare_table

    fmt = Format(fmt_name)
    with _clear_errors():
        df = compare_table(root, experiment, baseline)
    if df.empty:
        err_console.print(f"no runs recorded for experiment {experiment!r} under {root!r}")
        raise typer.Exit(2)
    if fmt is Format.table:
        from rich import box

        engines = sorted(set(df["engine"]))
        one_engine = len(engines) == 1
        from cluster.analysis.comparison import served_devices

        label = {"sim": "sim (simulated engine, not GPU numbers)"}
        on_cpu = "cpu" in served_devices(root, experiment)
        for wl, part in df.groupby("workload", sort=False):
            eng = f"; engine {label.get(engines[0], engines[0])}" if one_engine else ""
            if on_cpu and engines != ["sim"]:
                eng += "; served on CPU (CPU numbers, not GPU numbers)"
            t = Table(title=f"{experiment} / {wl}: means over ok repeats; ms; * = baseline{eng}", box=box.SIMPLE_HEAD,
                      pad_edge=False,
                      title_justify="left")
            width = max(len(str(v)) + 1 for v in part["variant"])
            for col in ("load", "variant", "ok/f/i", "tok/s", "TTFT50", "TPOT", "ITL/tok", "accept", "×base"):
                t.add_column(col, justify="left" if col in ("load", "variant") else "right", no_wrap=True,
                             min_width=width if col == "variant" else None)
            for r in part.itertuples(index=False):
                load = f"c{r.load_value:g}" if r.load_kind == "concurrency" else f"r{r.load_value:g}"
                name = f"{r.variant}{'*' if r.is_baseline else ''}" + ("" if one_engine else f" ({r.engine})")
                t.add_row(load, name, f"{r.n_runs}/{r.n_failed}/{r.n_invalid}", _cell(r.output_tok_s),
                          _cell(r.ttft_ms_p50), _cell(r.tpot_ms_mean), _cell(r.itl_token_ms_p50),
                          _cell(r.accept_length), _cell(r.speedup_output_tok_s))
            console.print(t)
        console.print("×base = output tok/s over the baseline at the same load; TTFT50 = median TTFT; TPOT = mean (E2E − TTFT)/(tokens − 1); "
                      "ITL/tok = chunk gaps split over the tokens each chunk carried; accept = tokens per verify "
                      "step. --ci gives confidence intervals (needs repeats), --format csv|markdown|json every "
                      "column.", highlight=False, soft_wrap=True)
        print_resolved_differences(root, experiment)
    else:
        _emit(df, fmt)


def print_resolved_differences(root: str, experiment: str) -> None:
    """Name every resolved server arg that differs from the baseline's besides what the variant declared."""
    from cluster.analysis.comparison import unintended_differences

    try:
        diffs = unintended_differences(root, experiment)
    except (SglbenchError, ValueError, KeyError) as e:  # an older dataset: a spec that no longer validates, a column
        # it lacks (pydantic and pyarrow raise ValueErrors); the table above stays, the note says why this is missing
        err_console.print(f"[yellow]note[/] resolved-args comparison unavailable: {e}", soft_wrap=True)
        return
    for variant, d in diffs.items():
        items = "; ".join(f"{k}: {a!r} (baseline) vs {b!r}" for k, (a, b) in d.items())
        console.print(f"[yellow]warning[/] {variant}: resolved server args differ from the baseline's beyond "
                      f"what the spec declares: {items}", highlight=False, soft_wrap=True)


@results_app.command("list")
def list_cmd(root: str = ROOT_OPT, fmt: Format = typer.Option(Format.table, "--format")) -> None:
    """Experiments under the root, with run counts by status."""
    from cluster.dataset.store import DatasetStore, list_experiments

    with _clear_errors():
        rows = []
        for name in list_experiments(root):
            st = DatasetStore(root, name).read_table("runs", columns=["status"]).column("status").to_pylist()
            rows.append({"experiment": name, "runs": len(st), "ok": st.count("ok"),
                         "invalid": st.count("invalid"), "failed": st.count("failed")})
    if not rows:
        err_console.print(f"no experiments under {root!r}")
        raise typer.Exit(2)
    _emit(pd.DataFrame(rows), fmt, title=f"experiments under {root}")


@results_app.command("show")
def show_cmd(
    experiment: str = typer.Argument(...),
    root: str = ROOT_OPT,
    fmt: Format = typer.Option(Format.table, "--format"),
) -> None:
    """Every run of an experiment: status, and why a run failed or is invalid."""
    from cluster.analysis.query import query

    sql = ("SELECT order_index, variant, engine, workload, load_kind, load_value, repeat, status, "
           "coalesce(failure_reason, invalid_reasons) AS reason, m_output_tok_s AS output_tok_s, run_key "
           "FROM runs ORDER BY order_index")
    with _clear_errors():
        df = query(root, experiment, sql)
    _emit(df, fmt, title=f"{experiment}: runs")


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

    with _clear_errors():
        df = query(root, experiment, sql)
    _emit(df, fmt)


@results_app.command("report")
def report_cmd(
    experiment: str = typer.Argument(...),
    root: str = ROOT_OPT,
    out: Optional[str] = typer.Option(None, "--out", help="Output directory (default <root>/reports/<experiment>)."),
    n_boot: int = typer.Option(1000, "--n-boot", min=100, help="Bootstrap resamples for the intervals."),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed."),
    bytes_per_token: Optional[float] = typer.Option(
        None, "--bytes-per-token", min=1.0,
        help="Decode bytes per token for the bandwidth bound (default: experiment.json's probe report)."),
) -> None:
    """An HTML page with PNG plots: throughput, TTFT/TPOT CDFs, acceptance, speedups, bandwidth bound."""
    from cluster.analysis.report import build_report

    with _clear_errors():
        path = build_report(root, experiment, out, n_boot=n_boot, seed=seed, bytes_per_token=bytes_per_token)
    console.print(f"report written to {path}", highlight=False)


def register(app: typer.Typer) -> None:
    app.add_typer(results_app, name="results")
