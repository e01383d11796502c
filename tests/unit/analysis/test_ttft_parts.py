"""A prefill/decode run's TTFT split (runs.ttft_parts_json) from hand-built server_metrics batches: each part is
Σ Δ_sum / Σ Δ_count over the role's servers between their last scrape at or before the window's start and their
first at or after its end
(arithmetic in the comments); null for a run that is not prefill/decode and for a runs file written before the
column; `results show` and `compare` print the split with each part's share of the measured TTFT."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from cluster.analysis.run_row import build_run_row
from cluster.analysis.ttft_parts import part_rows, ttft_parts
from cluster.cli import app
from cluster.config.loader import parse_spec_text
from cluster.dataset.store import DatasetStore
from cluster.engines.registry import get_engine
from cluster.kernel.run_row import RUNS_SCHEMA
from cluster.kernel.runs import RunPlan
from cluster.loadgen.server_metrics import SERVER_METRICS_BATCH_SCHEMA
from cluster.plan.runs import make_plan
from cluster.kernel.records import RequestRecord
from cluster.kernel.window import MeasuredWindow
from cluster.loadgen.sink import request_batches
from tests.unit.analysis.test_run_row import SEGMENT, SERVER, SPEC

PD_SPEC = SPEC.replace("  - {name: mtp, speculative: {algorithm: NEXTN, num_steps: 2}}",
                       "  - name: pd\n    deployment: {kind: pd, prefill: {servers: 1, tp: 1}, "
                       "decode: {servers: 2, tp: 1}, transfer_backend: mooncake}")
S = 1_000_000_000
BEFORE, INSIDE, AFTER = -S // 2, 21 * S // 10, 31 * S // 10
"""Scrapes at -0.5 s, 2.1 s and 3.1 s of a 2 s window: the window's parts run from the last scrape at or before its
start (-0.5 s) to the first at or after its end (2.1 s, the scraper's closing one); the third is never read."""
STAGE = "sglang:per_stage_req_latency_seconds"
HISTOGRAMS = get_engine("sim").ttft_part_histograms


def _rows(process: str, t: int, metric: str, total: float, count: float, **labels: str) -> list[dict[str, object]]:
    role = process.split("-")[0]
    lab = ",".join(f"{k}={v}" for k, v in sorted({"engine_type": role, "process": process, **labels}.items()))
    return [{"t_ns": t, "metric": f"{metric}_sum", "labels": lab, "value": total},
            {"t_ns": t, "metric": f"{metric}_count", "labels": lab, "value": count}]


def _gauge(process: str, t: int) -> dict[str, object]:
    return {"t_ns": t, "metric": "sglang:num_running_reqs", "labels": f"process={process}", "value": 1.0}


def _batch(decode_1_from: int = BEFORE) -> pa.RecordBatch:
    rows: list[dict[str, object]] = []
    for t in (BEFORE, INSIDE, AFTER):
        rows.append(_gauge("prefill-0", t))
        rows.append(_gauge("decode-0", t))
        if t >= decode_1_from:
            rows.append(_gauge("decode-1", t))
    # prefill_bootstrap: (1.6 - 1.0) s / (13 - 10) = 0.2 s (the 3.1 s scrape's 9.0/14 would give (9 - 1) / 4 = 2 s)
    rows += _rows("prefill-0", BEFORE, STAGE, 1.0, 10, stage="prefill_bootstrap")
    rows += _rows("prefill-0", INSIDE, STAGE, 1.6, 13, stage="prefill_bootstrap")
    rows += _rows("prefill-0", AFTER, STAGE, 9.0, 14, stage="prefill_bootstrap")
    # prefill_transfer_kv_cache: first observed inside the window, so from 0: 0.09 s / 3 = 0.03 s
    rows += _rows("prefill-0", INSIDE, STAGE, 0.09, 3, stage="prefill_transfer_kv_cache")
    # the prefill queue (queue_time_seconds): (0.8 - 0.5) / (13 - 10) = 0.1 s
    rows += _rows("prefill-0", BEFORE, "sglang:queue_time_seconds", 0.5, 10)
    rows += _rows("prefill-0", INSIDE, "sglang:queue_time_seconds", 0.8, 13)
    # the KV transfer: (190 - 100) ms / 3 = 30 ms
    rows += _rows("prefill-0", BEFORE, "sglang:kv_transfer_latency_ms", 100.0, 10)
    rows += _rows("prefill-0", INSIDE, "sglang:kv_transfer_latency_ms", 190.0, 13)
    # decode_transferred: decode-0 (2.4 - 2.0) / (22 - 20), decode-1 (0.05 - 0) / (1 - 0): pooled over the two
    # servers (0.4 + 0.05) / (2 + 1) = 0.15 s (a mean of their means would be (0.2 + 0.05) / 2 = 0.125)
    rows += _rows("decode-0", BEFORE, STAGE, 2.0, 20, stage="decode_transferred")
    rows += _rows("decode-0", INSIDE, STAGE, 2.4, 22, stage="decode_transferred")
    if decode_1_from <= BEFORE:
        rows += _rows("decode-1", BEFORE, STAGE, 0.0, 0, stage="decode_transferred")
    rows += _rows("decode-1", INSIDE, STAGE, 0.05, 1, stage="decode_transferred")
    # decode's kv_transfer_bootstrap_ms: decode-0 (12 - 0) / 2 from its first scrape, decode-1 3 / 1: 15 / 3 = 5 ms
    rows += _rows("decode-0", INSIDE, "sglang:kv_transfer_bootstrap_ms", 12.0, 2)
    rows += _rows("decode-1", INSIDE, "sglang:kv_transfer_bootstrap_ms", 3.0, 1)
    return pa.RecordBatch.from_pylist(rows, schema=SERVER_METRICS_BATCH_SCHEMA)


def test_each_part_is_the_pooled_mean_over_the_roles_servers_between_the_window_aligned_scrapes() -> None:
    parts = ttft_parts(_batch(), 2.0, HISTOGRAMS)
    assert parts is not None and parts.unaligned == ()
    assert parts.means == pytest.approx({
        "prefill_bootstrap_s": 0.2, "prefill_transfer_kv_cache_s": 0.03, "prefill_queue_s": 0.1,
        "prefill_kv_transfer_latency_ms": 30.0, "decode_transferred_s": 0.15, "decode_kv_transfer_bootstrap_ms": 5.0})
    assert parts.counts == {"prefill_bootstrap_s": 3, "prefill_transfer_kv_cache_s": 3, "prefill_queue_s": 3,
                            "prefill_kv_transfer_latency_ms": 3, "decode_transferred_s": 3,
                            "decode_kv_transfer_bootstrap_ms": 3}
    assert parts.requests_counted == 3
    # the run metrics, in ms: 0.2 s, 0.1 s, 0.03 s
    assert parts.catalog_figures() == pytest.approx({"ttft_bootstrap_ms": 200.0, "ttft_queue_ms": 100.0,
                                                     "ttft_transfer_ms": 30.0})


def test_a_server_not_scraped_before_the_window_is_left_out_and_named() -> None:
    parts = ttft_parts(_batch(decode_1_from=INSIDE), 2.0, HISTOGRAMS)
    assert parts is not None and parts.unaligned == ("decode-1",)
    # decode-0 alone: 0.4 / 2 = 0.2 s; 12 / 2 = 6 ms
    assert parts.means["decode_transferred_s"] == pytest.approx(0.2)
    assert parts.means["decode_kv_transfer_bootstrap_ms"] == pytest.approx(6.0)
    assert json.loads(parts.as_json())["unaligned"] == ["decode-1"]


def test_no_histogram_from_a_prefill_or_decode_server_gives_none() -> None:
    assert ttft_parts(None, 2.0, HISTOGRAMS) is None
    one_server = pa.RecordBatch.from_pylist(  # a server of one process: no process label
        [{"t_ns": 0, "metric": f"{STAGE}_count", "labels": "stage=prefill_forward", "value": 3.0}],
        schema=SERVER_METRICS_BATCH_SCHEMA)
    assert ttft_parts(one_server, 2.0, HISTOGRAMS) is None
    assert ttft_parts(_batch(), 2.0, ()) is None


def _window() -> MeasuredWindow:
    """Two ok requests whose first chunk arrives 0.4 s after the send: a measured TTFT mean of 0.4 s."""
    recs = [RequestRecord(request_index=i, intended_send_ns=i * S // 10, actual_send_ns=i * S // 10,
                          prompt_tokens_sent=16, max_tokens=4, chunk_arrival_ns=[i * S // 10 + 4 * S // 10,
                                                                                 i * S // 10 + 5 * S // 10],
                          chunk_tokens=[2, 2], completion_tokens=4, finish_reason="length", error=None,
                          http_status=200) for i in range(2)]
    reqs, chunks = request_batches(recs)
    return MeasuredWindow(requests=reqs, chunks=chunks, window_start_unix_s=1_700_000_010.0, duration_s=2.0,
                          lag_p50_ns=0, lag_p99_ns=0, counters_before={}, counters_after={}, warmup_ok=0,
                          flushed=True, server_metrics=_batch())


def _plan(variant: str) -> RunPlan:
    return next(p for p in make_plan(parse_spec_text(PD_SPEC)) if p.variant.name == variant)


def test_the_runs_row_of_a_pd_run_has_the_split_and_of_any_other_run_null(tmp_path: Path) -> None:
    spec = parse_spec_text(PD_SPEC)
    out = _window()
    pd_row = build_run_row(_plan("pd"), out, SERVER, SEGMENT, spec, [], None)
    doc = json.loads(pd_row.ttft_parts_json or "")
    assert doc["prefill_transfer_kv_cache_s"] == pytest.approx(0.03) and doc["requests_counted"] == 3
    assert doc["counts"]["decode_transferred_s"] == 3
    assert pd_row.metrics["ttft_transfer_ms"] == pytest.approx(30.0)
    plain = build_run_row(_plan("base"), out, SERVER, SEGMENT, spec, [], None)  # the same scrapes, one server
    assert plain.ttft_parts_json is None and "ttft_transfer_ms" not in plain.metrics
    assert "ttft_parts_json" in RUNS_SCHEMA.names


def _pd_dataset(tmp_path: Path) -> tuple[str, DatasetStore]:
    spec = parse_spec_text(PD_SPEC)
    root = str(tmp_path / "results")
    store = DatasetStore(root, spec.name)
    for name in ("base", "pd"):
        p = _plan(name)
        out = _window()
        store.write_run(p, build_run_row(p, out, SERVER, SEGMENT, spec, [], None), out.requests, out.chunks)
    return root, store


def test_show_and_compare_print_the_split_with_each_parts_share_of_the_measured_ttft(tmp_path: Path) -> None:
    root, _ = _pd_dataset(tmp_path)
    # TTFT mean 0.4 s: prefill_bootstrap 0.2 s is 0.2 / 0.4 = 50.0% of it, the KV transfer 30 ms 0.03 / 0.4 = 7.5%
    for cmd in (["results", "show", "rows"], ["results", "compare", "rows"]):
        res = CliRunner().invoke(app, [*cmd, "--root", root], env={"COLUMNS": "200"})
        assert res.exit_code == 0, res.output
        assert "pd / w / c2: TTFT split over 1 ok run(s), 3 requests counted by the servers" in res.output
        assert "base / w" not in res.output
        lines = res.output.splitlines()
        row = next(x for x in lines if x.strip().startswith("prefill_bootstrap "))
        assert row.split() == ["prefill_bootstrap", "0.2000", "50.0%"]
        kv = next(x for x in lines if x.strip().startswith("prefill_kv_transfer_latency "))
        assert kv.split() == ["prefill_kv_transfer_latency", "0.0300", "7.5%"]
        assert "measured TTFT mean 0.4000 s" in res.output
        assert "not per-request figures" in res.output


def test_a_runs_file_written_before_the_column_reads_null_and_prints_no_split(tmp_path: Path) -> None:
    root, store = _pd_dataset(tmp_path)
    for path in store.table_files("runs"):  # the pd run's file as an older sglbench wrote it; base's has the column
        old = pq.read_table(path)
        if "variant=pd" in Path(path).parts[-2]:
            pq.write_table(old.drop_columns(["ttft_parts_json"]), path)
    runs = store.read_table("runs").to_pylist()
    assert sorted((r["variant"], r["ttft_parts_json"]) for r in runs) == [("base", None), ("pd", None)]
    res = CliRunner().invoke(app, ["results", "show", "rows", "--root", root])
    assert res.exit_code == 0, res.output
    assert "TTFT split" not in res.output


def test_part_rows_average_the_runs_in_seconds_in_pipeline_order() -> None:
    a = json.dumps({"decode_transferred_s": 0.1, "prefill_bootstrap_s": 0.2, "prefill_kv_transfer_latency_ms": 30.0,
                    "counts": {"prefill_bootstrap_s": 3}, "requests_counted": 3})
    b = json.dumps({"prefill_bootstrap_s": 0.4, "requests_counted": 2})
    rows = part_rows([a, b], 0.5)
    # prefill_bootstrap (0.2 + 0.4) / 2 = 0.3 s, 0.3 / 0.5 = 60%; 30 ms = 0.03 s; decode's after prefill's
    assert [(r.part, round(r.seconds, 6), round(r.share or 0, 6)) for r in rows] == [
        ("prefill_bootstrap", 0.3, 0.6), ("prefill_kv_transfer_latency", 0.03, 0.06),
        ("decode_transferred", 0.1, 0.2)]
