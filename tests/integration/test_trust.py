"""The driver's trust and stall cases on local Ray with the simulator: a resume never waits on baseline gate answers
that cannot come, the executed order is the planned order, a stranger on the port is never measured, a server death
is a retried failure on the run it happened in, and a failed start names the decisive log line."""

from __future__ import annotations

import http.server
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pandas as pd
import pytest

from cluster.plan.runs import make_plan
from cluster.kernel.runs import RunPlan
from cluster.config.loader import parse_spec_text
from cluster.config.experiment import ExperimentSpec

pytestmark = pytest.mark.ray


def spec_text(out: Path, name: str, variants: str, extra: str = "", conc: str = "[1]", n: int = 4) -> str:
    return f"""
version: 1
name: {name}
model: {{path: sim://trust, engine: sim}}
server: {{args: {{max-running-requests: 8, kv-cache-dtype: bf16, attention-backend: flashinfer}}}}
sim: {{time_scale: 0.02}}
variants:
{variants}
workloads:
  - {{name: w, input_tokens: 16, output_tokens: 12, num_requests: {n}}}
load: {{concurrency: {conc}}}
warmup_requests: 0
max_client_lag_ms: 1000
health_timeout_s: 30
output: {out}
{extra}
"""


AB = """  - {name: a, baseline: true}
  - {name: b, speculative: {algorithm: NEXTN, num_steps: 1}}"""


def run(spec: ExperimentSpec, tmp: Path, on_run: Callable[[Any, RunPlan, str], None] | None = None,
        log: list[str] | None = None) -> Any:
    from cluster.distributed.driver import Driver

    holder: dict[str, Any] = {}

    def cb(p: RunPlan, status: str) -> None:
        if on_run is not None:
            on_run(holder["drv"], p, status)

    drv = Driver(spec, tmp, None, (log.append if log is not None else (lambda s: None)), cb)
    holder["drv"] = drv
    return drv.run()


def run_within(timeout_s: float, stalled: str, spec: ExperimentSpec, tmp: Path, log: list[str] | None = None) -> Any:
    """`run` on a thread, failing with `stalled` (and the log) if it is still running after timeout_s: a stall is
    the fault these tests look for, so it must fail the test, not hang it. The driver's exception, if any, is
    raised here."""
    box: dict[str, Any] = {}

    def go() -> None:
        try:
            box["result"] = run(spec, tmp, log=log)
        except Exception as e:  # noqa: BLE001 - re-raised on the test's thread below
            box["error"] = e

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(timeout=timeout_s)
    assert not t.is_alive(), stalled + ":\n" + "\n".join(log or [])
    if "error" in box:
        raise box["error"]
    return box["result"]


def runs_of(result: Any, spec: ExperimentSpec) -> pd.DataFrame:
    return pd.read_parquet(Path(result.dataset_root) / spec.name / "runs")


def test_resume_takes_the_baseline_gate_answers_from_the_dataset(ray_local: None, tmp_path: Path) -> None:
    """Case 1: the baseline's runs are done; a resubmission with one more variant must not wait
    health_timeout_s + 600 s for answers nobody will publish (before: it stalled, then skipped the prefix check)."""
    out = tmp_path / "out"
    first = parse_spec_text(spec_text(out, "resume", AB))
    assert set(runs_of(run(first, tmp_path), first)["status"]) == {"ok"}
    more = parse_spec_text(spec_text(out, "resume", AB + "\n  - {name: c, args: {max-running-requests: 4}}"))
    log: list[str] = []
    result = run_within(240, "the resumed experiment stalled waiting for the baseline's gate answers", more,
                        tmp_path, log)
    assert result.skipped == 2 and result.counts().get("ok") == 1
    assert any("stored gate answers" in line for line in log), log
    gate = pd.read_parquet(Path(result.dataset_root) / more.name / "correctness")
    c = gate[(gate["variant"] == "c") & (gate["phase"] == "alone")]
    assert len(c) == 3 and c["common_prefix_tokens"].notna().all(), "the prefix check ran against stored answers"
    c_run = runs_of(result, more).set_index("variant").loc["c"]
    assert "stored in the dataset" in c_run["provenance_json"]


def test_resume_without_baseline_answers_does_not_wait(ray_local: None, tmp_path: Path) -> None:
    """Case 1, no stored answers (the correctness table is gone): no wait, and the note says so."""
    out = tmp_path / "out"
    first = parse_spec_text(spec_text(out, "resume-none", AB))
    run(first, tmp_path)
    for f in (out / "resume-none" / "correctness").rglob("*.parquet"):
        f.unlink()
    more = parse_spec_text(spec_text(out, "resume-none", AB + "\n  - {name: c, args: {max-running-requests: 4}}"))
    log: list[str] = []
    runs = runs_of(run_within(240, "stalled", more, tmp_path, log), more)
    c = runs[runs["variant"] == "c"].iloc[0]
    assert c["status"] == "ok"
    assert "no prefix comparison" in c["provenance_json"]


def test_interleaved_order_is_executed_as_planned(ray_local: None, tmp_path: Path) -> None:
    """Case 2: `order: interleaved` with repeats 2 runs base·0, b·0, base·1, b·1 (before: base·0, base·1, b·0, b·1)."""
    variants = """  - {name: b, speculative: {algorithm: NEXTN, num_steps: 1}}
  - {name: a, baseline: true}"""
    spec = parse_spec_text(spec_text(tmp_path / "out", "interleave", variants, "order: interleaved\nrepeats: 2",
                                     n=2))
    executed: list[str] = []
    result = run(spec, tmp_path, lambda drv, p, status: executed.append(p.run_key))
    planned = [p.run_key for p in make_plan(spec)]
    assert executed == planned
    assert [(p.variant.name, p.repeat) for p in make_plan(spec)] == [("a", 0), ("b", 0), ("a", 1), ("b", 1)]
    runs = runs_of(result, spec).sort_values("window_start_unix_s")
    assert list(runs["order_index"]) == sorted(runs["order_index"])
    assert list(runs["run_key"]) == planned


class _Impostor(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def impostor() -> Iterator[int]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Impostor)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield int(srv.server_address[1])
    finally:
        srv.shutdown()
        srv.server_close()


def test_stranger_on_the_port_is_never_measured(ray_local: None, tmp_path: Path, impostor: int) -> None:
    """Case 3: a plain HTTP server answering 200 on the variant's fixed port (before: health passed against it and its
    answers were stored as our gate evidence)."""
    variants = f"""  - {{name: a, baseline: true, args: {{port: {impostor}}}}}
  - {{name: b, speculative: {{algorithm: NEXTN, num_steps: 1}}}}"""
    spec = parse_spec_text(spec_text(tmp_path / "out", "impostor", variants))
    result = run(spec, tmp_path)
    runs = runs_of(result, spec)
    a = runs[runs["variant"] == "a"].iloc[0]
    assert a["status"] == "failed"
    assert f"port {impostor}" in a["failure_reason"] and f"pid {os.getpid()}" in a["failure_reason"], \
        a["failure_reason"]
    gate = pd.read_parquet(Path(result.dataset_root) / spec.name / "correctness")
    assert "a" not in set(gate["variant"].astype(str)), "no gate answers are stored for a stranger"
    assert runs[runs["variant"] == "b"].iloc[0]["status"] == "ok"


def test_server_death_mid_window_is_a_retried_failure(ray_local: None, tmp_path: Path) -> None:
    """Case 4: the server crashes in the middle of run 1's window (the gate's 3 prompts asked alone and again
    under load, then 6 + 3 completed requests; the crash lands 50 ms after the 15th, while ~85 ms requests are in
    flight). Before: run 1 was `invalid` ("k of 6 requests failed", never retried) and run 2 blamed its own window."""
    variants = """  - {name: a, baseline: true, sim: {crash_after_requests: 15, time_scale: 0.5}}
  - {name: b, speculative: {algorithm: NEXTN, num_steps: 1}}"""
    spec = parse_spec_text(spec_text(tmp_path / "out", "death", variants, conc="[1, 2, 3]", n=6))
    result = run(spec, tmp_path)
    runs = runs_of(result, spec)
    a = runs[runs["variant"] == "a"].sort_values("order_index")
    assert list(a["status"]) == ["ok", "failed", "failed"], list(a["failure_reason"])
    assert "server died during the measured window" in a.iloc[1]["failure_reason"]
    assert "simulated crash" in a.iloc[1]["log_tail"]
    died_in = int(a.iloc[1]["order_index"])
    assert a.iloc[2]["failure_reason"] == \
        f"server died during an earlier run of this variant (it died in the window of run {died_in})"
    assert a.iloc[2]["log_tail"]
    again = run(spec, tmp_path)
    retried = {k for k, s in again.statuses.items() if s != "skipped"}
    assert retried == set(a.iloc[1:]["run_key"]), "a resubmission retries the failed runs"


def test_failed_start_names_the_decisive_log_line(ray_local: None, tmp_path: Path) -> None:
    """Case 12: before, the reason was only "server exited with code 1 before becoming healthy"."""
    variants = """  - {name: a, baseline: true, sim: {fail_start: "CUDA error: no kernel image for sm_90 (decisive)"}}"""
    spec = parse_spec_text(spec_text(tmp_path / "out", "decisive", variants))
    log: list[str] = []
    result = run(spec, tmp_path, log=log)
    a = runs_of(result, spec).iloc[0]
    assert a["status"] == "failed"
    assert "CUDA error: no kernel image for sm_90 (decisive)" in a["failure_reason"], a["failure_reason"]
    assert any("server logs:" in line for line in log), log


def test_a_baseline_segment_that_raises_does_not_stall_the_others(ray_local: None, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Any error ending the baseline's segment publishes "no answers": before, only the failure paths the driver
    knew did, so an unexpected error left b's gate waiting health_timeout_s + 600 s (the pool joined b before the
    error surfaced)."""
    from cluster.distributed.segment import SegmentRunner

    real = SegmentRunner.new_load_actor

    def broken(self: Any, pg: Any, variant: Any, index: int) -> Any:
        if variant.name == "a":
            raise RuntimeError("injected: load actor creation broke")
        return real(self, pg, variant, index)

    monkeypatch.setattr(SegmentRunner, "new_load_actor", broken)
    spec = parse_spec_text(spec_text(tmp_path / "out", "raises", AB, extra="isolation: gpus"))
    with pytest.raises(RuntimeError, match="injected"):
        run_within(150, "b's gate waited for the answers of a baseline whose segment had raised", spec, tmp_path)
    b = pd.read_parquet(Path(tmp_path / "out") / spec.name / "runs").set_index("variant").loc["b"]
    assert b["status"] == "ok" and "no prefix comparison" in b["provenance_json"]


def test_other_variants_never_take_the_gpus_the_baseline_needs(ray_local: None, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """isolation: gpus, three tp-4 variants on 8 GPUs, the baseline's placement asked for last (a 2-s delay stands
    in for losing the race, which CI's test_tuning_experiment once did): before, b and c took all 8 GPUs and their
    gates waited health_timeout_s + 600 s for the answers of a baseline that could never be placed."""
    import cluster.distributed.segment as segment_mod

    real = segment_mod.placement_group

    def late_for_the_baseline(bundles: Any, strategy: str, name: str) -> Any:
        if name.endswith("-a"):
            time.sleep(2.0)
        return real(bundles, strategy=strategy, name=name)

    monkeypatch.setattr(segment_mod, "placement_group", late_for_the_baseline)
    variants = """  - {name: a, baseline: true}
  - {name: b, speculative: {algorithm: NEXTN, num_steps: 1}}
  - {name: c, speculative: {algorithm: NEXTN, num_steps: 2}}"""
    text = spec_text(tmp_path / "out", "placed", variants, extra="isolation: gpus")
    spec = parse_spec_text(text.replace("model: {path: sim://trust, engine: sim}",
                                        "model: {path: sim://trust, engine: sim, tp: 4}"))
    log: list[str] = []
    result = run_within(180, "variants held every GPU while their gates waited for the baseline", spec, tmp_path, log)
    runs = runs_of(result, spec).set_index("variant")
    assert set(runs["status"]) == {"ok"}, runs["status"].to_dict()
    for v in ("b", "c"):
        assert "no prefix comparison" not in runs.loc[v, "provenance_json"], v
