"""The live view's table from driver events, without Ray: a running point's figures are summarize_run's over the
requests so far, a finished point shows its stored row's figures and verdict, and a server with no point yet has
its own row. (tests/integration/test_live_view_tmux.py checks the same table in a real terminal.)"""

from __future__ import annotations

import io
import re

import numpy as np
import pyarrow as pa
from rich.console import Console

from cluster.analysis.metrics import summarize_run
from cluster.commands.live_view import COLUMNS, LiveView, run_display
from cluster.distributed.progress import PointFinished, PointRecords, PointStarted, ServerState
from cluster.loadgen.sink import request_batches
from cluster.plan.runs import make_plan
from cluster.config.loader import parse_spec_text
from cluster.kernel.run_row import RunRow
from tests.unit.analysis.test_comparison import SPEC, synth_records


def _render(view: LiveView, width: int = 200) -> str:
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None).print(view)
    return buf.getvalue()


def _row(out: str, needle: str) -> list[str]:
    """The cells of the first line holding `needle` (columns are two or more spaces apart; a cell has one at most)."""
    line = next(ln for ln in out.splitlines() if needle in ln)
    return re.split(r"\s{2,}", line.strip())


def test_running_point_figures_follow_the_metrics_definitions_then_the_stored_row() -> None:
    spec = parse_spec_text(SPEC.format(name="live", other="nextn", steps=[2], out=16, n=32, conc=[4], repeats=1))
    plans = make_plan(spec)
    p = next(x for x in plans if x.variant.speculative is not None)
    reqs, _ = request_batches(synth_records(np.random.default_rng(0), 32, 4, 13.9, 60.0, 16, 2, None))
    now = [0.0]
    logged: list[str] = []
    view = LiveView("live", len(plans), clock=lambda: now[0], log=logged.append)
    view(ServerState(p.variant.name, "healthy"))
    view(ServerState("baseline", "starting"))
    view(PointStarted(p))
    half = reqs.slice(0, 16)
    now[0] = 1.0
    view(PointRecords(p, half))
    out = _render(view)
    assert all(c in out for c in COLUMNS), out
    row = _row(out, p.workload.name)
    assert row[:4] == [p.variant.name, "healthy", f"{p.workload.name} {p.load.label} r0", "16/32"], row
    t = pa.Table.from_batches([half])
    m = summarize_run(t, pa.table({}), float(np.max(t.column("last_chunk_ns").to_numpy())) / 1e9)
    assert row[4:8] == [f"{m['output_tok_s']:.1f}", f"{m['ttft_ms_p50']:.1f} ms", f"{m['accept_length']:.2f}",
                        "running"], row
    assert _row(out, "starting") == ["baseline", "starting", "-", "-", "-", "-", "-", "-"]  # no point yet

    view(PointFinished.from_row(p, "invalid", RunRow(status="invalid", invalid_reasons="cache flush failed",
                                                     n_requests=32, metrics={"output_tok_s": 123.4,
                                                                             "ttft_ms_p50": 56.7,
                                                                             "accept_length": 2.5})))
    view.on_run(p, "invalid")
    row = _row(_render(view), p.workload.name)
    assert row[3:8] == ["32/32", "123.4", "56.7 ms", "2.50", "invalid"], row
    assert logged == [f"[{p.variant.name}] {p.workload.name} {p.load.label} r0: invalid: cache flush failed"]


def test_a_point_that_failed_before_its_window_gets_a_row_and_no_figures() -> None:
    spec = parse_spec_text(SPEC.format(name="live", other="nextn", steps=[1], out=16, n=8, conc=[1], repeats=1))
    p = make_plan(spec)[0]
    logged: list[str] = []
    view = LiveView("live", 1, log=logged.append)
    view(ServerState(p.variant.name, "failed", "exit 1"))
    view(PointFinished.from_row(p, "failed", RunRow(status="failed", failure_reason="server start failed: exit 1")))
    view(ServerState(p.variant.name, "stopped"))
    row = _row(_render(view, 240), p.workload.name)
    assert row[1] == "failed" and row[3:8] == ["0/8", "-", "-", "-", "failed"], row
    assert logged == [f"[{p.variant.name}] {p.workload.name} {p.load.label} r0: failed: server start failed: exit 1"]


def test_only_the_latest_points_are_shown() -> None:
    spec = parse_spec_text(SPEC.format(name="live", other="nextn", steps=[1], out=16, n=8, conc=[1, 2, 4],
                                       repeats=3))
    plans = make_plan(spec)
    view = LiveView("live", len(plans), max_rows=4)
    for p in plans:
        view(PointStarted(p))
    out = _render(view, 240)
    assert sum(1 for ln in out.splitlines() if " r0 " in ln or " r1 " in ln or " r2 " in ln) == 4


def test_a_pipe_gets_log_lines_and_no_table_nor_watcher() -> None:
    buf = io.StringIO()
    con = Console(file=buf, width=120, color_system=None)  # not a terminal: what a pipe or CI gets
    assert not con.is_terminal
    with run_display(con, "piped", 2, progress=True) as (view, log, on_event):
        log("[baseline] server healthy")
    assert on_event is None  # the driver keeps its usual batches
    out = buf.getvalue()
    assert "[baseline] server healthy" in out and "verdict" not in out


def test_a_terminal_gets_the_live_table_and_the_watcher() -> None:
    buf = io.StringIO()
    con = Console(file=buf, width=120, color_system=None, force_terminal=True)
    with run_display(con, "tty", 2, progress=True) as (view, log, on_event):
        assert on_event is view
    assert all(c in buf.getvalue() for c in COLUMNS)
    buf2 = io.StringIO()
    con2 = Console(file=buf2, width=120, color_system=None, force_terminal=True)
    with run_display(con2, "tty", 2, progress=False) as (view, log, on_event):  # --no-progress
        assert on_event is None
    assert "verdict" not in buf2.getvalue()
