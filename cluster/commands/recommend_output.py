"""How `sglbench results recommend` prints: the table per load point, the depth schedule, the notes, or JSON."""

from __future__ import annotations

import json
from typing import Optional

import typer

from cluster.analysis.recommend import RECOMMEND_N_BOOT, RECOMMEND_SEED, recommend_results
from cluster.analysis.recommend_view import note_lines, recommend_json, recommend_view, schedule_lines
from cluster.analysis.results import Results
from cluster.analysis.acceptance_health import health_json
from cluster.commands.acceptance_health_output import HEALTH_KEY, healths_of, print_acceptance_health
from cluster.commands.result_tables import Format, clear_errors, console, emit, err_console, no_runs, simulated_note


def print_recommendations(results: Results, as_json: bool, n_boot: int = RECOMMEND_N_BOOT,
                          seed: int = RECOMMEND_SEED, write_adaptive: Optional[str] = None,
                          workload: Optional[str] = None) -> None:
    """Decide over `results` and print; NothingToShow (exit 2, one line) when no run is recorded. `write_adaptive`:
    also write the depth schedule there as SGLang's adaptive config (of `workload`, needed when there are several)."""
    experiment = results.experiment
    with clear_errors():
        rec = recommend_results(results, n_boot=n_boot, seed=seed)
    if not rec.points:
        raise no_runs(experiment, results.root)
    if write_adaptive is not None:
        from cluster.analysis.adaptive_config import write_schedule_config

        with clear_errors():
            for line in write_schedule_config(rec, workload, write_adaptive):
                err_console.print(line, highlight=False, soft_wrap=True, markup=False)
    from cluster.analysis.speedup_predict import predict_for, prediction_json, prediction_lines

    with clear_errors():
        pred = predict_for(results, rec.baseline)  # printed apart, marked PREDICTED: never part of a verdict
    if as_json:
        doc = json.loads(recommend_json(rec))
        doc["predicted"] = None if pred is None else prediction_json(pred)
        from dataclasses import asdict

        from cluster.analysis.template_contrast import setting_contrasts

        doc["template_settings"] = [asdict(c) for c in setting_contrasts(results)]
        doc[HEALTH_KEY] = [health_json(h) for h in healths_of(results)]
        typer.echo(json.dumps(doc, indent=2))
        return
    view = recommend_view(rec)
    view_multi = view["workload"].nunique() > 1
    if view["workload"].nunique() == 1:
        view = view.drop(columns="workload")
    sim = simulated_note(results.runs_table().column("engine").to_pylist())
    emit(view, Format.table, title=f"{experiment}{sim}: what to serve per load point; baseline "
         f"{rec.baseline}; speedup = variant / baseline output tok/s [95% CI]")
    for line in schedule_lines(rec.schedule):
        console.print(f"depth schedule {line}", highlight=False, soft_wrap=True, markup=False)
    from cluster.analysis.adaptive_vs_fixed import adaptive_line_text, recommendation_lines

    for a in recommendation_lines(rec):
        console.print(f"adaptive vs fixed {adaptive_line_text(a, view_multi)}", highlight=False, soft_wrap=True,
                      markup=False)
    for line in note_lines(rec):
        console.print(f"note {line}", highlight=False, soft_wrap=True, markup=False)
    console.print(rec.ci_method, highlight=False, soft_wrap=True, markup=False)
    from cluster.analysis.template_contrast import contrast_lines

    for line in contrast_lines(results):  # the schedule and PREDICTED block are per setting already (per workload)
        console.print(line, highlight=False, soft_wrap=True, markup=False)
    for line in prediction_lines(pred, view_multi) if pred is not None else []:
        console.print(line, highlight=False, soft_wrap=True, markup=False)
    print_acceptance_health(results)
