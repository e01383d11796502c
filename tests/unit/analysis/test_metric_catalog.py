"""A metric is one declaration: the catalog holds the runs schema's m_ columns in order and every list that used to be
typed by hand (intervals in their draw order, speedups, compare columns, the report's definitions); and a throwaway
metric declared here, and nowhere else, reaches the run row, the definitions, the interval list, compare's
table, CSV and JSON, and the report."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Iterator

import numpy as np
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from cluster.analysis.comparison import ci_metrics, compare_columns, compare_view, compare_with_ci, speedups
from cluster.analysis.metric_catalog import (Column, Interval, Mean, Metric, declare, declared, definitions, mean_of,
                                             terminal_means, withdraw)
from cluster.analysis.metrics import summarize_run
from cluster.analysis.query import compare_metrics
from cluster.analysis.results import Results
from cluster.analysis.run_row import build_run_row
from cluster.cli import app
from cluster.config.loader import parse_spec_text
from cluster.dataset.store import DatasetStore
from cluster.kernel.records import RequestRecord
from cluster.kernel.run_row import GPU_METRIC_NAMES, METRIC_NAMES
from cluster.kernel.window import MeasuredWindow
from cluster.loadgen.sink import request_batches
from cluster.plan.runs import make_plan
from tests.unit.analysis.test_run_row import SEGMENT, SERVER

MS = 1_000_000
REPO = Path(__file__).resolve().parents[3]


def test_the_catalog_declares_the_runs_schema_columns_in_order() -> None:
    assert tuple(m.name for m in declared("requests")) == METRIC_NAMES
    assert tuple(m.name for m in declared("gpu")) == GPU_METRIC_NAMES
    assert [m.name for m in declared("steady")] == ["steady_output_tps", "steady_share"]
    assert all(m.formula is not None for m in declared("requests"))
    assert all(m.formula is None for m in declared() if m.producer != "requests")


def test_intervals_speedups_columns_and_report_keep_their_order() -> None:
    # the draw order is the order a cell's seeded stream is consumed in: it must stay, or every interval moves
    assert [(m.name, m.interval.stat if m.interval else "", m.interval.request_field if m.interval else "")
            for m in ci_metrics()] == [
        ("output_tok_s", "mean", None), ("steady_output_tps", "mean", None), ("ttft_ms_p50", "p50", "ttft_ms"),
        ("ttft_ms_p99", "p99", "ttft_ms"), ("tpot_ms_mean", "mean", "tpot_ms"), ("e2e_ms_p99", "p99", "e2e_ms"),
        ("accept_length", "mean", None), ("itl_chunk_ms_p50", "mean", None), ("itl_token_ms_p50", "mean", None),
        ("tokens_per_chunk_mean", "mean", None), ("per_user_tok_s_mean", "mean", None), ("goodput_rps", "mean", None),
        ("slo_attainment", "mean", None), ("prefix_hit_rate", "mean", None),
        ("energy_j_per_output_token", "mean", None), ("output_tok_s_per_w", "mean", None),
        ("gpu_power_w_mean", "mean", None), ("sm_clock_mhz_mean", "mean", None), ("sm_clock_mhz_p10", "mean", None)]
    assert [m.stored for m in ci_metrics()][:2] == ["m_output_tok_s", "steady_output_tps"]
    assert [c for c, _ in compare_metrics()] == [
        "request_throughput_rps", "request_throughput_rps_per_gpu", "output_tok_s", "output_tok_s_per_gpu",
        "ttft_ms_p50", "ttft_ms_p99", "tpot_ms_mean", "tpot_ms_p50", "itl_chunk_ms_p50", "itl_token_ms_p50",
        "accept_length", "steady_output_tps", "steady_output_tps_per_gpu", "steady_share"]
    assert [(name, c.short, c.digits) for name, c in terminal_means()] == [
        ("steady_output_tps", "steady", 1), ("output_tok_s", "tok/s", 1), ("output_tok_s_per_gpu", "tok/s/GPU", 2),
        ("ttft_ms_p99", "TTFT99", 1),
        ("tpot_ms_mean", "TPOT", 2), ("itl_token_ms_p50", "ITL/tok", 2), ("accept_length", "accept", 2)]
    assert speedups() == (("speedup_tok_s", "output_tok_s", True), ("speedup_tpot", "tpot_ms_mean", False),
                          ("speedup_steady_tps", "steady_output_tps", True))
    draws = [m.interval.draw for m in declared() if m.interval]
    places = [m.column.at for m in declared() if m.column] + [m.speedup.at for m in declared() if m.speedup and
                                                              m.speedup.label]
    assert len(set(draws)) == len(draws) and len(set(places)) == len(places)


def _ttft_share_mean(r: object) -> float | None:
    from cluster.analysis.metric_catalog import RunInputs

    assert isinstance(r, RunInputs)
    return mean_of(r.ttft_ms / r.e2e_ms)


@pytest.fixture
def throwaway() -> Iterator[Metric]:
    """The whole change a new metric needs: this one declaration."""
    m = declare(Metric("ttft_share_mean", "share", "mean over ok requests of TTFT / E2E: the share of a request's "
                       "latency spent before its first token", ("first_chunk_ns", "last_chunk_ns", "actual_send_ns"),
                       _ttft_share_mean, better="lower", interval=Interval(),
                       column=Column("TTFT share", 3, shown="always"), mean=Mean(short="TTFT/E2E", digits=3),
                       report_at=100))
    try:
        yield m
    finally:
        withdraw(m.name)


def _rec(i: int, send_ms: float, chunks_ms: list[float], error: str | None = None) -> RequestRecord:
    return RequestRecord(request_index=i, intended_send_ns=int(send_ms * MS), actual_send_ns=int(send_ms * MS),
                         prompt_tokens_sent=8, max_tokens=4, chunk_arrival_ns=[int(t * MS) for t in chunks_ms],
                         chunk_tokens=[1] * len(chunks_ms), completion_tokens=len(chunks_ms) or None, error=error,
                         finish_reason=None if error else "length")


def test_the_throwaway_metric_on_hand_built_records(throwaway: Metric) -> None:
    recs = [_rec(0, 0, [10, 20, 40]),     # TTFT 10, E2E 40: 0.25
            _rec(1, 0, [30, 45, 60]),     # TTFT 30, E2E 60: 0.5
            _rec(2, 5, [], "HTTP 500")]   # not ok: left out
    m = summarize_run(*request_batches(recs), duration_s=1.0)
    assert m["ttft_share_mean"] == pytest.approx((0.25 + 0.5) / 2)   # 0.375
    assert list(m)[-1] == "ttft_share_mean" and tuple(m)[:len(METRIC_NAMES)] == METRIC_NAMES
    assert definitions("requests")["ttft_share_mean"].startswith("mean over ok requests of TTFT / E2E")
    assert ci_metrics()[-1] is throwaway  # drawn after every existing interval: their figures stay


SPEC = """
version: 1
name: share
model: {path: sim://share, engine: sim}
variants:
  - {name: base, baseline: true}
  - {name: fast}
workloads:
  - {name: w, input_tokens: 8, output_tokens: 3, num_requests: 4}
load: {concurrency: [2]}
repeats: 2
max_client_lag_ms: 1000
"""


def _window(first_ms: float, repeat: int) -> MeasuredWindow:
    # four requests, each TTFT first_ms (+ repeat ms), two more chunks 10 ms apart: E2E = TTFT + 20
    recs = [_rec(i, 100 * i, [100 * i + first_ms + repeat + 10 * k for k in range(3)]) for i in range(4)]
    reqs, chunks = request_batches(recs)
    return MeasuredWindow(requests=pa.Table.from_batches([reqs]), chunks=pa.Table.from_batches([chunks]),
                          window_start_unix_s=1_700_000_000.0, duration_s=0.5, lag_p50_ns=0, lag_p99_ns=0,
                          counters_before={}, counters_after={}, warmup_ok=0, flushed=True, peak_buffered_rows=0)


def _dataset(root: Path) -> Results:
    spec = parse_spec_text(SPEC)
    store = DatasetStore(str(root), spec.name)
    for p in make_plan(spec):
        w = _window(20.0 if p.variant.name == "base" else 5.0, p.repeat)
        store.write_run(p, build_run_row(p, w, SERVER, replace(SEGMENT, correctness=None), spec, [], None),
                        w.requests, w.chunks)
    return Results.open(str(root), spec.name)


def test_the_throwaway_metric_reaches_the_run_row_compare_and_its_exports(throwaway: Metric, tmp_path: Path) -> None:
    results = _dataset(tmp_path)
    runs = results.runs().set_index(["variant", "repeat"])
    # base, repeat 0: TTFT 20, E2E 40 -> 0.5; fast, repeat 1: TTFT 6, E2E 26 -> 6/26
    assert runs.loc[("base", 0), "m_ttft_share_mean"] == pytest.approx(0.5)
    assert runs.loc[("fast", 1), "m_ttft_share_mean"] == pytest.approx(6 / 26)

    ci = compare_with_ci(results, n_boot=200).set_index("variant")
    assert ci.loc["base", "ttft_share_mean"] == pytest.approx(np.mean([20 / 40, 21 / 41]))
    assert ci.loc["fast", "ttft_share_mean_lo"] <= ci.loc["fast", "ttft_share_mean"] <= ci.loc[
        "fast", "ttft_share_mean_hi"]
    view = compare_view(ci.reset_index())
    assert list(view.columns)[-1] == "TTFT share" and view["TTFT share"].iloc[0].startswith("0.")
    assert ("TTFT share", True) in [(label, shown) for label, _, shown in compare_columns(ci.reset_index())]

    cli = CliRunner()
    base = ["results", "compare", "share", "--root", str(tmp_path), "--ci", "--n-boot", "200"]
    table = cli.invoke(app, base, env={"COLUMNS": "300"})
    assert table.exit_code == 0, table.output
    assert "TTFT share" in table.output
    got_csv = cli.invoke(app, base + ["--format", "csv"])
    header = next(csv.reader(io.StringIO(got_csv.output)))
    assert {"ttft_share_mean", "ttft_share_mean_lo", "ttft_share_mean_hi"} <= set(header)
    got_json = cli.invoke(app, base + ["--format", "json"])
    rows = json.loads(got_json.output)
    assert all("ttft_share_mean" in r and "ttft_share_mean_hi" in r for r in rows)

    # the plain compare (means over ok repeats): its exports and the terminal's table
    plain = ["results", "compare", "share", "--root", str(tmp_path)]
    assert "ttft_share_mean" in next(csv.reader(io.StringIO(cli.invoke(app, plain + ["--format", "csv"]).output)))
    got = cli.invoke(app, plain, env={"COLUMNS": "300"})
    # base: (0.5 + 21/41) / 2 = 0.506
    assert got.exit_code == 0 and "TTFT/E2E" in got.output and "0.506" in got.output, got.output


def test_the_throwaway_metric_is_in_the_report_definitions(throwaway: Metric, tmp_path: Path) -> None:
    from cluster.analysis.report import build_report

    results = _dataset(tmp_path)
    out = tmp_path / "report"
    build_report(results, str(out), n_boot=200)
    page = (out / "index.html").read_text()
    assert "ttft_share_mean" in page and "the share of a request&#x27;s latency spent before its first token" in page


def _reference() -> ModuleType:
    spec = importlib.util.spec_from_file_location("metric_reference", REPO / "scripts" / "metric_reference.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_definitions_page_is_the_generated_one() -> None:
    assert (REPO / "docs" / "metrics.md").read_text(encoding="utf-8") == _reference().render(), \
        "docs/metrics.md is stale: run python scripts/metric_reference.py"


def test_the_throwaway_metric_is_on_the_definitions_page(throwaway: Metric) -> None:
    page = _reference().render()
    assert ("| `m_ttft_share_mean` | share | mean over ok requests of TTFT / E2E: the share of a request's latency "
            "spent before its first token | `first_chunk_ns`, `last_chunk_ns`, `actual_send_ns` | lower | "
            "mean over repeats | TTFT share |") in page


def test_a_name_declared_twice_or_a_request_metric_without_formula_is_refused() -> None:
    with pytest.raises(ValueError, match="'output_tok_s' is declared twice"):
        declare(Metric("output_tok_s", "tok/s", "again", ()))
    with pytest.raises(ValueError, match="'no_formula': a request metric needs its formula"):
        declare(Metric("no_formula", "tokens", "nothing computes it", ()))
    assert "no_formula" not in definitions()
