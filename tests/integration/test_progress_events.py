"""The driver's progress events on local Ray (what the live view draws): every point is started, its finished
requests arrive in several batches during the window and add up to the planned count, and its PointFinished carries
the stored runs row's own figures; a server that cannot start says so and each of its points finishes failed with
the reason. Without a watcher the driver's batches stay as they were (one 4096-row batch for a short window)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from cluster.dataset.store import DatasetStore
from cluster.distributed.progress import PointFinished, PointRecords, PointStarted, ProgressEvent, ServerState
from cluster.config.loader import parse_spec_text

pytestmark = pytest.mark.ray

SPEC = """
version: 1
name: {name}
model: {{path: sim://events, engine: sim, tp: 1}}
server: {{args: {{max-running-requests: 8, kv-cache-dtype: bf16, attention-backend: flashinfer}}}}
sim: {{time_scale: 0.05}}
variants:
  - {{name: a, baseline: true}}
  - {{name: b, speculative: {{algorithm: NEXTN, num_steps: 1}}{b_extra}}}
workloads:
  - {{name: w, input_tokens: 16, output_tokens: 12, num_requests: 40}}
load: {{concurrency: [2]}}
warmup_requests: 0
max_client_lag_ms: 1000
output: {out}
"""


def _run(tmp: Path, name: str, b_extra: str = "") -> tuple[list[ProgressEvent], pd.DataFrame]:
    from cluster.distributed.driver import run_experiment

    spec = parse_spec_text(SPEC.format(name=name, out=tmp / "out", b_extra=b_extra))
    events: list[ProgressEvent] = []
    run_experiment(spec, base_dir=tmp, on_event=events.append, preflight=False)
    runs = DatasetStore(str(tmp / "out"), name).read_table("runs").to_pandas()
    return events, runs


def test_points_stream_their_requests_and_finish_with_the_stored_figures(ray_local: None, tmp_path: Path) -> None:
    events, runs = _run(tmp_path, "events-ok")
    for variant in ("a", "b"):
        states = [e.state for e in events if isinstance(e, ServerState) and e.variant == variant]
        assert states[:2] == ["placing", "starting"] and "healthy" in states and states[-1] == "stopped", states
        mine = [e for e in events if not isinstance(e, ServerState) and e.plan.variant.name == variant]
        assert isinstance(mine[0], PointStarted) and isinstance(mine[-1], PointFinished)
        batches = [e.requests.num_rows for e in mine if isinstance(e, PointRecords)]
        assert sum(batches) == 40 and len(batches) >= 5, batches  # 40 requests in batches of 8: the view moves
        done = mine[-1]
        assert isinstance(done, PointFinished)
        row = runs[runs["variant"] == variant].iloc[0]
        assert (done.status, done.n_requests) == (row["status"], row["n_requests"]) == ("ok", 40)
        assert done.output_tok_s == pytest.approx(row["m_output_tok_s"], rel=1e-12)
        assert done.ttft_ms_p50 == pytest.approx(row["m_ttft_ms_p50"], rel=1e-12)
    accept = [e.accept_length for e in events if isinstance(e, PointFinished) and e.plan.variant.name == "b"]
    assert accept[0] is not None and accept[0] > 1.0


def test_a_server_that_cannot_start_is_failed_with_its_reason(ray_local: None, tmp_path: Path) -> None:
    events, runs = _run(tmp_path, "events-fail", ", sim: {fail_start: cannot start on purpose}")
    states = [e.state for e in events if isinstance(e, ServerState) and e.variant == "b"]
    assert "failed" in states and "healthy" not in states, states
    done = [e for e in events if isinstance(e, PointFinished) and e.plan.variant.name == "b"]
    assert [d.status for d in done] == ["failed"]
    assert done[0].reason and "server start failed" in done[0].reason
    assert runs[runs["variant"] == "b"].iloc[0]["failure_reason"] == done[0].reason


def test_batches_shrink_only_with_a_watcher(tmp_path: Path) -> None:
    from cluster.distributed.driver import Driver
    from cluster.distributed.point_run import LIVE_MIN_BATCH_ROWS, batch_rows_for
    from cluster.plan.runs import make_plan

    spec = parse_spec_text(SPEC.format(name="events-batch", out=tmp_path / "out", b_extra=""))
    p = make_plan(spec)[0]
    quiet = Driver(spec, tmp_path, None, lambda s: None, lambda p, s: None)
    watched = Driver(spec, tmp_path, None, lambda s: None, lambda p, s: None, on_event=lambda e: None)
    assert (quiet.live, watched.live, quiet.batch_rows) == (False, True, 4096)
    assert batch_rows_for(p, 4096, live=False) == 4096
    assert batch_rows_for(p, 4096, live=True) == LIVE_MIN_BATCH_ROWS  # 40 requests / 20 updates = 2, raised to the minimum
