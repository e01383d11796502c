"""How `sglbench results recommend` prints: the table per load point, the depth schedule, the notes, or JSON."""

from __future__ import annotations

import typer

from cluster.analysis.recommend import recommend_results
from cluster.analysis.recommend_view import note_lines, recommend_json, recommend_view, schedule_lines
from cluster.analysis.results import Results
from cluster.commands.acceptance_health_output import print_acceptance_health
from cluster.commands.result_tables import Format, clear_errors, console, emit, err_console, simulated_note


def print_recommendations(results: Results, as_json: bool, n_boot: int = 2000, seed: int = 0) -> None:
    """Decide over `results` and print; exit 2 (said on stderr) when no run is recorded."""
    experiment = results.experiment
    with clear_errors():
        rec = recommend_results(results, n_boot=n_boot, seed=seed)
    if not rec.points:
        err_console.print(f"no runs recorded for experiment {experiment!r} under {results.root!r}")
        raise typer.Exit(2)
    if as_json:
        typer.echo(recommend_json(rec))
        return
    view = recommend_view(rec)
    if view["workload"].nunique() == 1:
        view = view.drop(columns="workload")
    sim = simulated_note(results.runs_table().column("engine").to_pylist())
    emit(view, Format.table, title=f"{experiment}{sim}: what to serve per load point; baseline "
         f"{rec.baseline}; speedup = variant / baseline output tok/s [95% CI]")
    for line in schedule_lines(rec.schedule):
        console.print(f"depth schedule {line}", highlight=False, soft_wrap=True, markup=False)
    for line in note_lines(rec):
        console.print(f"note {line}", highlight=False, soft_wrap=True, markup=False)
    console.print(rec.ci_method, highlight=False, soft_wrap=True, markup=False)
    print_acceptance_health(results)
