"""Faults fired mid-window on real SGLang servers the sglbench driver runs: the watcher, the kills, the checks.

A fault rides on a server another test needs anyway (each real start costs ~35-60 s of the tier): the watcher is
armed from the driver's on_run callback once the run before the faulted one is recorded, and fires at the faulted
run's window.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from cpu_pipeline import facts, scheduler_of
from cluster.server.process import decisive_line

KILL_WAIT_S = 120.0
FLUSH_LINE = "Cache flushed successfully!"
"""SGLang's log line for a /flush_cache that worked: the load actor's prepare ends with it, right before a window."""
PREFILL_LINE = "Prefill batch"


def _log_text(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


class MidWindow:
    """Fires `action(driver, server facts, variant)` once, at the first prefill that follows the first cache flush
    logged after `arm`: warmup requests come before that flush, so that prefill is the next window's.

    arm() runs inside the driver's on_run callback, before the driver starts the next run, so the count of flushes
    it takes cannot include the next run's; the watcher finds the window by position in the log, so a window whose
    requests are all prefilled in one batch is not missed."""

    def __init__(self, variant: str, action: Callable[[Any, Any, str], str], process: str | None = None) -> None:
        self.variant, self.action, self.process = variant, action, process
        """`process`: one process of a deployment (`replica-1`), watched by its own log and passed to `action`."""
        self.done: dict[str, Any] = {}
        self.thread: threading.Thread | None = None

    def arm(self, drv: Any) -> None:
        if self.thread is not None:
            return
        f = facts(drv.result, self.variant)
        if self.process is not None:
            f = next(p.facts for p in f.processes if p.name == self.process)
        flushes = _log_text(f.log_path).count(FLUSH_LINE)
        self.thread = threading.Thread(target=self._watch, args=(drv, f, flushes), daemon=True,
                                       name=f"fault-{self.variant}")
        self.thread.start()

    def _watch(self, drv: Any, f: Any, flushes: int) -> None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < KILL_WAIT_S:
            text = _log_text(f.log_path)
            pos = -1
            for _ in range(flushes + 1):
                pos = text.find(FLUSH_LINE, pos + 1)
                if pos < 0:
                    break
            if pos >= 0 and text.find(PREFILL_LINE, pos) >= 0:
                self.done["what"] = self.action(drv, f, self.variant)
                self.done["pgid"] = f.pgid
                return
            time.sleep(0.02)
        self.done["what"] = "never saw the window start"

    def join(self, timeout_s: float = 5.0) -> None:
        if self.thread is not None:
            self.thread.join(timeout=timeout_s)


def kill_scheduler(drv: Any, f: Any, variant: str) -> str:
    pid = scheduler_of(f.pgid)
    assert pid is not None, f"no sglang::scheduler in server group {f.pgid}"
    os.kill(pid, signal.SIGKILL)
    return f"SIGKILL sglang::scheduler pid {pid}"


def kill_main(drv: Any, f: Any, variant: str) -> str:
    os.kill(f.server_pid, signal.SIGKILL)
    return f"SIGKILL main pid {f.server_pid}"


def kill_engine_actor(drv: Any, f: Any, variant: str) -> str:
    import ray

    prefix = f"sglbench-engine-{drv.spec.name}-{variant}-"
    name = next(n["name"] for n in ray.util.list_named_actors(all_namespaces=True) if n["name"].startswith(prefix))
    ray.kill(ray.get_actor(name), no_restart=True)
    return f"ray.kill {name}"


def assert_decisive(row: pd.Series) -> None:
    """The failed run's reason quotes the decisive line of the server log tail it kept."""
    tail = str(row["log_tail"] or "")
    line = decisive_line(tail)
    assert line, f"no decisive line in the log tail:\n{tail[-2000:]}"
    assert line in str(row["failure_reason"]), (line, row["failure_reason"])
