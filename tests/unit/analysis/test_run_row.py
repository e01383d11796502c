"""The runs row from typed facts: every provenance fact lands in its column, and the store accepts the row."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from cluster.kernel.records import CHUNK_BATCH_SCHEMA, REQUEST_BATCH_SCHEMA
from cluster.kernel.run_facts import GateVerdict, SegmentFacts, ServerFacts, ServerRecord
from cluster.kernel.window import MeasuredWindow
from cluster.analysis.run_row import build_run_row, failed_run_row
from cluster.dataset.store import DatasetStore
from cluster.plan.runs import make_plan
from cluster.kernel.runs import RunPlan
from cluster.config.loader import parse_spec_text

SPEC = """
version: 1
name: rows
model: {path: sim://rows, engine: sim}
variants:
  - {name: base, baseline: true}
  - {name: mtp, speculative: {algorithm: NEXTN, num_steps: 2}}
workloads:
  - {name: w, input_tokens: 16, output_tokens: 4, num_requests: 2}
load: {concurrency: [2]}
max_client_lag_ms: 5
"""


def _plan(variant: str) -> RunPlan:
    spec = parse_spec_text(SPEC)
    return next(p for p in make_plan(spec) if p.variant.name == variant)


SERVER = ServerFacts(
    pid=4101, pgid=4101, port=30123, port_attempts=2, base_url="http://127.0.0.1:30123",
    argv=["python", "-m", "cluster.sim.server", "--api-key", "<redacted>"], env={"SIM_X": "1"},
    cuda_visible_devices="2,3", gpu_ids=["2", "3"], node_id="node-abc", hostname="host-7", startup_s=1.25,
    started_unix_s=1_700_000_000.0, infos={"server_info": {"version": "0.5.23"}},
    resolved_args={"tp_size": 2}, log_path="/tmp/x.log", server_pid=4102, server_saw_cuda_visible_devices="2,3",
    environment={"python": "3.11"})
SEGMENT = SegmentFacts(tuning_artifact="art-123", checkpoint_fingerprint="fp-9f2", hub_revision="rev-77",
                       load_actor_cuda_visible_devices="", load_actor_node_id="node-abc", load_actors=1,
                       correctness=GateVerdict(True, ("note: x",), 2.5))


def _window(n_ok: int, n_err: int, lag_p99_ns: int = 0, reported_lag_p99_ns: int | None = None) -> MeasuredWindow:
    """Every request is sent `lag_p99_ns` (10 ns when 0) after its intended time; `reported_lag_p99_ns` is what a
    load actor's own summary claims (by default the same figure)."""
    rows = []
    for i in range(n_ok + n_err):
        ok = i < n_ok
        rows.append({"request_index": i, "intended_send_ns": i * 1000, "actual_send_ns": i * 1000 + (lag_p99_ns or 10),
                     "first_chunk_ns": i * 1000 + 500 if ok else None, "last_chunk_ns": i * 1000 + 900 if ok else None,
                     "num_chunks": 2 if ok else 0, "client_tokens": 4 if ok else 0, "prompt_tokens_sent": 16,
                     "max_tokens": 4, "prompt_tokens": 16, "completion_tokens": 4 if ok else None,
                     "cached_tokens": 0, "spec_verify_ct": 2 if ok else None, "finish_reason": "length" if ok else None,
                     "error": None if ok else "boom", "http_status": 200 if ok else 500})
    chunks = [{"request_index": i, "chunk_index": c, "arrival_ns": i * 1000 + 500 + 400 * c, "tokens": 2}
              for i in range(n_ok) for c in range(2)]
    return MeasuredWindow(
        requests=pa.Table.from_pylist(rows, schema=REQUEST_BATCH_SCHEMA),
        chunks=pa.Table.from_pylist(chunks, schema=CHUNK_BATCH_SCHEMA),
        window_start_unix_s=1_700_000_010.0, duration_s=2.0, lag_p50_ns=0,
        lag_p99_ns=lag_p99_ns if reported_lag_p99_ns is None else reported_lag_p99_ns,
        counters_before={"c": 1.0}, counters_after={"c": 4.0}, warmup_ok=0, flushed=True,
        peak_buffered_rows=7)


def test_provenance_fields_land_in_their_columns() -> None:
    p = _plan("mtp")
    spec = parse_spec_text(SPEC)
    row = build_run_row(p, _window(2, 0), SERVER, SEGMENT, spec, ["base"], "abc123")
    assert row.status == "ok", row.invalid_reasons
    prov = json.loads(row.provenance_json)
    assert prov["host"] == "host-7" and row.node == "host-7"
    assert prov["node_id"] == "node-abc"
    assert prov["gpu_ids"] == ["2", "3"] and row.gpu_ids == "2,3"
    assert prov["cuda_visible_devices"] == "2,3" and prov["server_saw_cuda_visible_devices"] == "2,3"
    assert prov["load_actor_cuda_visible_devices"] == ""
    assert (prov["server_pid"], prov["server_pgid"]) == (4102, 4101)
    assert (prov["port"], prov["port_attempts"]) == (30123, 2)
    assert prov["server_startup_s"] == 1.25
    assert prov["env"] == {"SIM_X": "1"} and prov["environment"] == {"python": "3.11"}
    assert prov["tuning_artifact"] == "art-123" and row.tuning_artifact == "art-123"
    assert prov["checkpoint_fingerprint"] == "fp-9f2" and prov["hub_revision"] == "rev-77"
    assert prov["correctness"] == {"passed": True, "reasons": ["note: x"], "accept_length": 2.5}
    assert prov["load_actors"] == 1 and prov["load_actor_peak_buffered_rows"] == 7
    assert prov["engine_version"] == "0.5.23" and row.engine_version == "0.5.23"
    assert prov["git_sha"] == "abc123" and row.git_sha == "abc123"
    assert json.loads(row.launch_argv_json) == SERVER.argv
    assert json.loads(row.resolved_args_json) == {"tp_size": 2}
    assert row.shared_node_with == "base"
    assert row.window_start_unix_s == 1_700_000_010.0 and row.duration_s == 2.0
    counters = json.loads(row.server_counters_json)
    assert counters["delta"] == {"c": 3.0}
    assert (row.n_requests, row.n_ok, row.n_errors) == (2, 2, 0)


def test_validity_from_the_window() -> None:
    spec = parse_spec_text(SPEC)
    p = _plan("base")
    row = build_run_row(p, _window(1, 1, lag_p99_ns=9_000_000), SERVER, SEGMENT, spec, [], None)
    assert row.status == "invalid"
    assert "1 of 2 requests failed" in row.invalid_reasons
    assert "send lag p99 9.00 ms > 5 ms" in row.invalid_reasons


def test_the_stored_lag_is_the_judged_lag() -> None:
    # a window whose load actor reported a lag that differs from its committed rows (one shard of several, or a
    # stale figure): validity is judged on the lag the runs row stores, recomputed from the rows
    spec = parse_spec_text(SPEC)  # max_client_lag_ms: 5
    behind = build_run_row(_plan("base"), _window(2, 0, lag_p99_ns=8_000_000, reported_lag_p99_ns=1_000),
                           SERVER, SEGMENT, spec, [], None)
    assert behind.metrics["lag_ms_p99"] == 8.0
    assert behind.status == "invalid" and "send lag p99 8.00 ms > 5 ms" in behind.invalid_reasons
    on_time = build_run_row(_plan("base"), _window(2, 0, reported_lag_p99_ns=9_000_000), SERVER, SEGMENT, spec,
                            [], None)
    assert on_time.metrics["lag_ms_p99"] == 10 / 1e6 and on_time.status == "ok", on_time.invalid_reasons


def test_failed_row_without_facts_and_the_store_accepts_both(tmp_path: Path) -> None:
    spec = parse_spec_text(SPEC)
    p = _plan("base")
    row = failed_run_row(p, "server start failed: x", "tail", None, None, spec, None)
    prov = json.loads(row.provenance_json)
    assert prov["port"] is None and prov["correctness"] is None and row.gpu_ids == ""
    assert row.status == "failed" and row.log_tail == "tail"
    skipped = SegmentFacts(correctness=GateVerdict(True, ("correctness gate disabled in the spec",), skipped=True))
    row2 = failed_run_row(p, "died", "", SERVER, skipped, spec, None)
    assert json.loads(row2.provenance_json)["correctness"] == {
        "passed": True, "skipped": True, "reasons": ["correctness gate disabled in the spec"]}
    store = DatasetStore(str(tmp_path), spec.name)
    store.runs_row(p, row)  # every key is a known runs column
    store.runs_row(p, build_run_row(p, _window(2, 0), SERVER, SEGMENT, spec, [], None))


def test_server_record_lookup_by_name_is_strict() -> None:
    rec = ServerRecord(SERVER, SEGMENT)
    assert rec["pgid"] == 4101 and rec["load_actor_node_id"] == "node-abc" and rec.get("startup_s") == 1.25
    with pytest.raises(KeyError):
        rec["pgdi"]


def test_a_state_slot_cap_below_the_offered_concurrency_is_invalid_with_its_cause() -> None:
    """Issue 15 item 2: the Mamba state-slot log line caps the server below the offered 2 requests."""
    from dataclasses import replace

    line = ("max_running_requests is capped to 1 by the mamba state cache (max_mamba_cache_size=5, 5 state slots "
            "per request). To raise it: ...")
    server = replace(SERVER, cap_log_lines=(line,))
    row = build_run_row(_plan("mtp"), _window(2, 0), server, SEGMENT, parse_spec_text(SPEC), [], None)
    assert row.status == "invalid"
    assert "server cap 1" in row.invalid_reasons and "5 slots per request" in row.invalid_reasons
    ev = json.loads(row.provenance_json)["concurrency"]
    assert ev["cap"] == 1 and "Mamba state slots" in ev["cap_cause"]
    assert build_run_row(_plan("mtp"), _window(2, 0), SERVER, SEGMENT, parse_spec_text(SPEC), [], None
                         ).status == "ok"


def test_garbage_in_the_output_sample_makes_the_run_invalid_with_evidence() -> None:
    """Issue 15 item 4: ignore_eos throughput over NaN rows is not a measurement."""
    from dataclasses import replace

    from cluster.loadgen.output_sample import samples_table
    from cluster.kernel.output_sample import OutputSample

    good = OutputSample(0, (11, 12, 13, 14), "a sane answer")
    nan = OutputSample(1, None, "nan")  # an OpenAI stream carries no ids: the text is judged
    spec = parse_spec_text(SPEC)
    ok = build_run_row(_plan("mtp"), replace(_window(2, 0), samples=(good,)), SERVER, SEGMENT, spec, [], None)
    assert ok.status == "ok"
    assert json.loads(ok.provenance_json)["output_sample"]["degenerate"] == []
    bad = build_run_row(_plan("mtp"), replace(_window(2, 0), samples=(good, nan)), SERVER, SEGMENT, spec, [], None)
    assert bad.status == "invalid" and "1 of 2 sampled outputs are garbage (request 1: output is 'nan')" in \
        bad.invalid_reasons
    ev = json.loads(bad.provenance_json)["output_sample"]
    assert ev["indices"] == [0, 1] and ev["degenerate"][0]["text_head"] == "nan"
    t = samples_table((good, nan)).to_pylist()
    assert t[0]["output_ids"] == [11, 12, 13, 14] and t[1]["degenerate"] == "output is 'nan'"


def test_an_unjudged_output_sample_is_kept_but_does_not_invalidate() -> None:
    """correctness.check_output_samples: false (random-weight test models): evidence kept, run not invalid."""
    from dataclasses import replace

    from cluster.kernel.output_sample import OutputSample

    spec = parse_spec_text(SPEC)
    spec = spec.model_copy(update={"correctness": spec.correctness.model_copy(update={"check_output_samples": False})})
    same = OutputSample(0, (471,) * 32, "x")
    row = build_run_row(_plan("mtp"), replace(_window(2, 0), samples=(same,)), SERVER, SEGMENT, spec, [], None)
    assert row.status == "ok", row.invalid_reasons
    ev = json.loads(row.provenance_json)["output_sample"]
    assert ev["judged"] is False and ev["degenerate"][0]["request_index"] == 0


def test_an_adaptive_run_is_invalid_unless_server_info_shows_adaptive_on() -> None:
    """The variant asked for --speculative-adaptive: the run counts only when the resolved /server_info says it ran."""
    from dataclasses import replace

    p = _plan("mtp")
    assert p.variant.speculative is not None
    adaptive = replace(p, variant=replace(p.variant, speculative=replace(p.variant.speculative,
                                                                         adaptive_config="a.json")))
    spec = parse_spec_text(SPEC)
    info = {"version": "0.5.23", "speculative_num_steps": 2}
    off = replace(SERVER, infos={"server_info": {**info, "speculative_adaptive": False}})
    row = build_run_row(adaptive, _window(2, 0), off, SEGMENT, spec, [], None)
    assert row.status == "invalid" and "resolved speculative_adaptive=False" in (row.invalid_reasons or "")
    on = replace(SERVER, infos={"server_info": {**info, "speculative_adaptive": True}})
    assert build_run_row(adaptive, _window(2, 0), on, SEGMENT, spec, [], None).status == "ok"
    # a fixed depth is not asked: the same /server_info answer does not touch it
    assert build_run_row(p, _window(2, 0), off, SEGMENT, spec, [], None).status == "ok"
