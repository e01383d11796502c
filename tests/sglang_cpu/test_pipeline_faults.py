"""Faults on real SGLang 0.5.23 servers run by the sglbench driver: each gives a failed run with the decisive log
line, the next variant goes on, and no process of that server's process group survives (checked by group id).

The scheduler and main-pid SIGKILLs ride on the echo experiment's servers (test_pipeline.py); here: SGLang's own
speculative cap on an unset-cap server, then a ray.kill of its EngineActor mid-window; a bad model path; a server
that never becomes healthy."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Optional

import pandas as pd
import pytest

from cpu_faults import MidWindow, kill_engine_actor
from cpu_pipeline import assert_group_gone, load, run, spec_text, table

pytestmark = pytest.mark.ray

WINDOW_REQUESTS = 64


@pytest.fixture(scope="module")
def fault_experiment(ray_local: None, sglang_cpu_python: Path, mimo_models: Path,
                     tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The rand model, no gate, SGLang's own speculative cap (max_running_requests unset), one NEXTN-1 server: c64
    (measured: the cap and acceptance ~1.0), then its EngineActor is ray.killed mid-window of c4 (64 requests at
    c4: a window of several seconds)."""
    tmp = tmp_path_factory.mktemp("faults")
    variants = "  - {name: engineactor, speculative: {algorithm: NEXTN, num_steps: 1}}"
    spec = load(spec_text("cpu-faults", mimo_models / "rand", sglang_cpu_python, tmp / "out", variants,
                          concurrency="[64, 4]", num_requests=WINDOW_REQUESTS, max_running_requests=None,
                          warmup_requests=0, gate="{enabled: false}"))
    watcher = MidWindow("engineactor", kill_engine_actor)

    def on_run(drv: Any, p: Any, status: str) -> None:
        if p.load.label == "c64":
            watcher.arm(drv)

    # preflight=False: the node preflight refuses a speculative variant without --max-running-requests (SGLang
    # silently caps it at 48; issue 15's fairness rules); this experiment exercises the runtime cap check behind it
    result = run(spec, tmp, on_run, preflight=False)
    watcher.join()
    return {"spec": spec, "result": result, "runs": table(result, spec, "runs"), "watcher": watcher}


def test_engine_actor_killed_mid_window(fault_experiment: dict[str, Any]) -> None:
    runs = fault_experiment["runs"]
    w = fault_experiment["watcher"]
    assert w.done.get("what", "").startswith("ray.kill sglbench-engine-cpu-faults-engineactor-"), w.done
    rows = runs.sort_values("order_index")
    assert list(rows["status"]) == ["invalid", "failed"], rows[["status", "failure_reason"]].to_dict("records")
    killed = rows.iloc[1]
    assert "server died during the measured window" in killed["failure_reason"], killed["failure_reason"]
    # ActorDiedError, a RayActorError
    assert "EngineActor is unreachable (" in killed["failure_reason"], killed["failure_reason"]
    assert_group_gone(w.done["pgid"], "engineactor")


def test_cap_flags_nextn_offered_64(fault_experiment: dict[str, Any]) -> None:
    """SGLang resets max_running_requests to 48 under speculative decoding when the flag is unset: a run offered 64
    concurrent requests is not the offered load, and is flagged with the cap and where it was read."""
    runs = fault_experiment["runs"]
    row = runs.sort_values("order_index").iloc[0]
    assert row["load_value"] == 64 and row["status"] == "invalid", row.to_dict()
    reasons = str(row["invalid_reasons"])
    print(f"[sglang_cpu] cap: {reasons}")
    assert "offered concurrency 64 > server cap 48" in reasons, reasons
    assert "server_info" in reasons or "internal_states" in reasons, reasons
    conc = json.loads(row["provenance_json"])["concurrency"]
    assert conc["offered"] == 64 and conc["cap"] == 48 and conc["cap_declared"] == 48
    assert conc["cap_source"] == "server_info.internal_states[0].effective_max_running_requests_per_dp", conc
    # the scraped gauges back it up: never more than 48 running, while requests queued for a slot
    print(f"[sglang_cpu] cap evidence: {conc}")
    assert conc["scraped_max_running"] is not None and conc["scraped_max_running"] <= 48, conc
    assert conc["scraped_max_queued"] is not None and conc["scraped_max_queued"] > 0, conc
    acc = float(row["m_accept_length"])
    print(f"[sglang_cpu] rand NEXTN-1 (runs table): accept length {acc:.3f}")
    assert 0.99 <= acc <= 1.05, f"a random MTP layer accepts nothing: {acc:.3f}"


def test_fault_experiment_leaves_no_process(fault_experiment: dict[str, Any]) -> None:
    from cpu_pipeline import assert_none_marked

    assert_none_marked(fault_experiment["spec"].name)


def _start_failure(name: str, model: Path, python: Path, tmp: Path, timeout_s: Optional[float]) -> tuple[Any, pd.DataFrame]:
    variants = """  - {name: first, baseline: true}
  - {name: second, args: {random-seed: 1}}"""
    extra = f"health_timeout_s: {timeout_s}" if timeout_s else ""
    text = spec_text(name, model, python, tmp / "out", variants, warmup_requests=0, gate="{enabled: false}")
    if extra:
        text = text.replace("health_timeout_s: 240", extra)
    spec = load(text)
    result = run(spec, tmp, preflight=False)
    return spec, table(result, spec, "runs")


def test_bad_model_path(ray_local: None, sglang_cpu_python: Path, tmp_path: Path) -> None:
    from cpu_pipeline import assert_none_marked
    from cluster.errors import UserError

    missing = tmp_path / "no-such-model"
    spec = load(spec_text("cpu-badpath", missing, sglang_cpu_python, tmp_path / "pre",
                          "  - {name: nextn, speculative: {algorithm: NEXTN, num_steps: 1}}", gate="{enabled: false}"))
    with pytest.raises(UserError):  # preflight probes the checkpoint before any server or GPU is touched
        run(spec, tmp_path)
    spec, runs = _start_failure("cpu-badpath", missing, sglang_cpu_python, tmp_path, None)
    assert list(runs.sort_values("order_index")["variant"]) == ["first", "second"], "the next variant went on"
    for _, row in runs.iterrows():
        assert row["status"] == "failed" and "server start failed" in row["failure_reason"], row.to_dict()
        print(f"[sglang_cpu] bad model path: {row['failure_reason']}")
        assert str(missing) in row["failure_reason"] or "no-such-model" in row["failure_reason"], row["failure_reason"]
    assert_none_marked("cpu-badpath")


def test_never_healthy(ray_local: None, sglang_cpu_python: Path, mimo_models: Path, tmp_path: Path) -> None:
    from cpu_pipeline import assert_none_marked

    t0 = time.monotonic()
    spec, runs = _start_failure("cpu-unhealthy", mimo_models / "echo", sglang_cpu_python, tmp_path, 4)
    assert time.monotonic() - t0 < 120
    assert list(runs.sort_values("order_index")["variant"]) == ["first", "second"], "the next variant went on"
    for _, row in runs.iterrows():
        assert row["status"] == "failed" and "not healthy after 4 s" in row["failure_reason"], row.to_dict()
    assert_none_marked("cpu-unhealthy")
