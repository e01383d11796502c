"""Faults on real SGLang 0.5.23 servers run by the sglbench driver: each gives a failed run with the decisive log
line, the next variant goes on, and no process of that server's process group survives (checked by group id)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

import pandas as pd
import pytest

from cpu_pipeline import (assert_group_gone, facts, load, run, scheduler_of, spec_text, table)
from cluster.server.process import decisive_line

pytestmark = pytest.mark.ray

WINDOW_REQUESTS = 64
KILL_WAIT_S = 120.0


def _prefill_lines(log_path: str) -> int:
    try:
        return Path(log_path).read_text(errors="replace").count("Prefill batch")
    except OSError:
        return 0


class MidWindow:
    """Fires `action` once the variant's server logs a new prefill after it is armed: the window has started (no
    warmup and no gate in this experiment, so the first prefill after arming is the window's)."""

    def __init__(self, drv_box: dict[str, Any], variant: str, action: Callable[[Any, Any], str]) -> None:
        self.box, self.variant, self.action = drv_box, variant, action
        self.armed = threading.Event()
        self.done: dict[str, Any] = {}
        self.thread = threading.Thread(target=self._watch, daemon=True, name=f"fault-{variant}")

    def _watch(self) -> None:
        deadline = time.monotonic() + 900
        while not self.armed.is_set() and time.monotonic() < deadline:
            rec = self.box.get("drv") and self.box["drv"].result.servers.get(self.variant)
            if rec is not None and self.box.get("arm_on_start", {}).get(self.variant):
                self.armed.set()
            time.sleep(0.1)
        drv = self.box["drv"]
        f = facts(drv.result, self.variant)
        seen = _prefill_lines(f.log_path)
        t0 = time.monotonic()
        while time.monotonic() - t0 < KILL_WAIT_S:
            if _prefill_lines(f.log_path) > seen:
                self.done["what"] = self.action(drv, f)
                self.done["pgid"] = f.pgid
                return
            time.sleep(0.05)
        self.done["what"] = "never saw the window start"


def _kill_scheduler(drv: Any, f: Any) -> str:
    pid = scheduler_of(f.pgid)
    assert pid is not None, f"no sglang::scheduler in server group {f.pgid}"
    os.kill(pid, signal.SIGKILL)
    return f"SIGKILL sglang::scheduler pid {pid}"


def _kill_main(drv: Any, f: Any) -> str:
    os.kill(f.server_pid, signal.SIGKILL)
    return f"SIGKILL main pid {f.server_pid}"


def _kill_engine_actor(drv: Any, f: Any) -> str:
    import ray

    prefix = f"sglbench-engine-{drv.spec.name}-engineactor-"
    name = next(n["name"] for n in ray.util.list_named_actors(all_namespaces=True) if n["name"].startswith(prefix))
    ray.kill(ray.get_actor(name), no_restart=True)
    return f"ray.kill {name}"


@pytest.fixture(scope="module")
def fault_experiment(ray_local: None, sglang_cpu_python: Path, mimo_models: Path,
                     tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The rand model, no gate, SGLang's own speculative cap (max_running_requests unset), three NEXTN-1 servers:
    `scheduler` runs c64 (measured: the cap and acceptance ~1.0), then its scheduler is SIGKILLed mid-window of c4;
    `mainpid` and `engineactor` die mid-window of their first run (main pid SIGKILL, ray.kill of the EngineActor)."""
    tmp = tmp_path_factory.mktemp("faults")
    nextn = "speculative: {algorithm: NEXTN, num_steps: 1}"
    variants = f"""  - {{name: scheduler, {nextn}}}
  - {{name: mainpid, {nextn}, args: {{random-seed: 1}}}}
  - {{name: engineactor, {nextn}, args: {{random-seed: 2}}}}"""
    spec = load(spec_text("cpu-faults", mimo_models / "rand", sglang_cpu_python, tmp / "out", variants,
                          concurrency="[64, 4]", num_requests=WINDOW_REQUESTS, max_running_requests=None,
                          warmup_requests=0, gate="{enabled: false}"))
    box: dict[str, Any] = {"arm_on_start": {"mainpid": True, "engineactor": True}}
    watchers = {"scheduler": MidWindow(box, "scheduler", _kill_scheduler),
                "mainpid": MidWindow(box, "mainpid", _kill_main),
                "engineactor": MidWindow(box, "engineactor", _kill_engine_actor)}

    def on_run(drv: Any, p: Any, status: str) -> None:
        box["drv"] = drv
        if p.variant.name == "scheduler" and p.load.label == "c64":
            box["arm_on_start"]["scheduler"] = True

    def on_driver(drv: Any) -> None:
        box["drv"] = drv
        for w in watchers.values():
            w.thread.start()

    # preflight=False: the node preflight refuses a speculative variant without --max-running-requests (SGLang
    # silently caps it at 48; issue 15's fairness rules); this experiment exercises the runtime cap check behind it
    result = run(spec, tmp, on_run, on_driver=on_driver, preflight=False)
    for w in watchers.values():
        w.thread.join(timeout=5)
    return {"spec": spec, "result": result, "runs": table(result, spec, "runs"), "watchers": watchers}


def test_scheduler_sigkill_mid_window(fault_experiment: dict[str, Any]) -> None:
    runs = fault_experiment["runs"]
    w = fault_experiment["watchers"]["scheduler"]
    assert w.done.get("what", "").startswith("SIGKILL sglang::scheduler"), w.done
    rows = runs[runs["variant"] == "scheduler"].sort_values("order_index")
    first, second = rows.iloc[0], rows.iloc[1]
    assert first["status"] == "invalid"  # c64 over SGLang's speculative cap of 48: see test_cap_*
    assert second["status"] == "failed", second.to_dict()
    assert "server died during the measured window" in second["failure_reason"], second["failure_reason"]
    # SGLang's own line: "Subprocess scheduler_0 (pid=…) crashed with exit code -9. Triggering SIGQUIT for cleanup..."
    assert "scheduler_0" in second["failure_reason"] and "crashed with exit code -9" in second["failure_reason"]
    _assert_decisive(second)
    assert_group_gone(w.done["pgid"], "scheduler")


def test_main_pid_sigkill_mid_window(fault_experiment: dict[str, Any]) -> None:
    runs = fault_experiment["runs"]
    w = fault_experiment["watchers"]["mainpid"]
    assert w.done.get("what", "").startswith("SIGKILL main pid"), w.done
    rows = runs[runs["variant"] == "mainpid"].sort_values("order_index")
    assert list(rows["status"]) == ["failed", "failed"], rows[["status", "failure_reason"]].to_dict("records")
    assert "server died during the measured window" in rows.iloc[0]["failure_reason"]
    # a SIGKILLed SGLang writes nothing: the watchdog's note is the decisive line
    assert "was killed by SIGKILL" in rows.iloc[0]["failure_reason"], rows.iloc[0]["failure_reason"]
    _assert_decisive(rows.iloc[0])
    assert "server died during an earlier run" in rows.iloc[1]["failure_reason"]
    assert rows.iloc[0]["log_tail"], "a failed run keeps the server log tail"
    assert_group_gone(w.done["pgid"], "mainpid")


def test_engine_actor_killed_mid_window(fault_experiment: dict[str, Any]) -> None:
    runs = fault_experiment["runs"]
    w = fault_experiment["watchers"]["engineactor"]
    assert w.done.get("what", "").startswith("ray.kill sglbench-engine-cpu-faults-engineactor-"), w.done
    rows = runs[runs["variant"] == "engineactor"].sort_values("order_index")
    assert list(rows["status"]) == ["failed", "failed"], rows[["status", "failure_reason"]].to_dict("records")
    assert "server died during the measured window" in rows.iloc[0]["failure_reason"]
    # ActorDiedError, a RayActorError
    assert "EngineActor is unreachable (" in rows.iloc[0]["failure_reason"], rows.iloc[0]["failure_reason"]
    assert_group_gone(w.done["pgid"], "engineactor")


def test_cap_flags_nextn_offered_64(fault_experiment: dict[str, Any]) -> None:
    """SGLang resets max_running_requests to 48 under speculative decoding when the flag is unset: a run offered 64
    concurrent requests is not the offered load, and is flagged with the cap and where it was read."""
    runs = fault_experiment["runs"]
    row = runs[(runs["variant"] == "scheduler")].sort_values("order_index").iloc[0]
    assert row["status"] == "invalid", row.to_dict()
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


def _assert_decisive(row: pd.Series) -> None:
    tail = str(row["log_tail"] or "")
    line = decisive_line(tail)
    assert line, f"no decisive line in the log tail:\n{tail[-2000:]}"
    assert line in str(row["failure_reason"]), (line, row["failure_reason"])


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
