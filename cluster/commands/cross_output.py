"""How `sglbench results compare EXP EXP_B` and `results regress` read and print two experiments point for point."""

from __future__ import annotations

import pandas as pd
from rich.table import Table

from cluster.analysis.results import Results
from cluster.commands.result_tables import Format, cell_text, clear_errors, console, emit


def cross_table(base: Results, new: Results, n_boot: int, seed: int) -> pd.DataFrame:
    from cluster.analysis.cross_experiment import compare_experiments

    with clear_errors():
        return compare_experiments(base, new, n_boot=n_boot, seed=seed)


def print_cross(base: Results, new: Results, fmt_name: str, n_boot: int, seed: int) -> None:
    """Render compare_experiments: one table per workload and load point, a row per variant and metric."""
    from cluster.kernel import stats
    from cluster.analysis.comparison import format_speedup, point_label
    from cluster.analysis.cross_experiment import CROSS_METRICS

    fmt = Format(fmt_name)
    df = cross_table(base, new, n_boot, seed)
    if fmt is not Format.table:
        emit(df, fmt)
        return
    from rich import box

    labels = {"output_tok_s": "tok/s", "tpot_ms_mean": "TPOT ms", "ttft_ms_p99": "TTFT99 ms"}
    same_root = base.root == new.root
    a = base.experiment if same_root else f"{base.root}:{base.experiment}"
    b = new.experiment if same_root else f"{new.root}:{new.experiment}"
    console.print(f"BASE = {a} (commit {df.attrs['base_sha']}), NEW = {b} (commit {df.attrs['new_sha']}). "
                  "NEW/BASE > 1 means NEW is better (for latencies it is BASE/NEW); 95% intervals; verdicts after "
                  "Holm correction over the whole comparison (n.s. = no significant difference; 1 rep = a side "
                  "has one repeat, so no interval); reps = ok repeats BASE/NEW.", highlight=False)
    for (wl, kind, value), part in df.groupby(["workload", "load_kind", "load_value"], sort=True):
        load = point_label(kind, value)
        t = Table(title=f"{wl} ({part['input_tokens'].iloc[0]}→{part['output_tokens'].iloc[0]} tokens), {load}",
                  box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left")
        for col in ("variant", "metric", "reps", "BASE", "NEW", "NEW/BASE [95% CI]", "verdict"):
            t.add_column(col, justify="left" if col in ("variant", "metric", "verdict") else "right")
        short = {stats.VERDICT_NO_DIFFERENCE: "n.s.", stats.VERDICT_INSUFFICIENT: "1 rep"}
        for r in part.to_dict("records"):
            for name, _ in CROSS_METRICS:
                ratio = format_speedup(r[f"{name}_ratio"], r[f"{name}_ratio_lo"], r[f"{name}_ratio_hi"], "")
                t.add_row(r["variant"], labels[name], r[f"{name}_repeats"], cell_text(r[f"{name}_base"]),
                          cell_text(r[f"{name}_new"]), ratio, short.get(r[f"{name}_verdict"], r[f"{name}_verdict"]))
        console.print(t)
    for line in df.attrs["unmatched"]:
        console.print(f"[yellow]not compared[/] {line}", highlight=False, soft_wrap=True)
