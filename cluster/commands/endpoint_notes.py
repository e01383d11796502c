"""The line `results show` and `compare` print under their tables for each variant that is an endpoint already
running: its URL, and that sglbench did not launch it (so its GPUs and argv are not sglbench's to state)."""

from __future__ import annotations

from cluster.analysis.results import Results


def endpoint_lines(results: Results) -> list[str]:
    """One line per endpoint variant of the experiment's runs (none for a dataset written before endpoints)."""
    runs = results.runs_table()
    if "launched_by_sglbench" not in runs.column_names:
        return []
    seen: dict[str, str] = {}
    for r in runs.select(["variant", "launched_by_sglbench", "endpoint_url"]).to_pylist():
        if r["launched_by_sglbench"] is False:
            seen.setdefault(str(r["variant"]), str(r["endpoint_url"]))
    return [f"{v}: endpoint {url}, already running, not launched by sglbench (its argv and GPUs are not known "
            "here; its /server_info and /v1/models answers are in each run's provenance)" for v, url in sorted(seen.items())]


def print_endpoints(results: Results) -> None:
    """Under `show` and `compare` (tables): each variant that is an endpoint sglbench did not launch, with its URL."""
    from cluster.commands.result_tables import console

    for line in endpoint_lines(results):
        console.print(line, highlight=False, soft_wrap=True, markup=False)
