"""How a run's end is recorded: its status in the experiment's result, the runs row of a failed or invalid run, the
watcher's event; and how a server death or a Ray error is told."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Optional

from ray.exceptions import RayTaskError

from cluster.config.experiment import ExperimentSpec
from cluster.kernel.run_facts import SegmentFacts, ServerFacts, ServerRecord
from cluster.analysis.run_row import failed_run_row
from cluster.dataset.store import DatasetStore
from cluster.distributed.progress import PointFinished, ProgressEvent
from cluster.errors import EngineFault
from cluster.kernel.run_row import RunRow
from cluster.kernel.runs import RunPlan
from cluster.server.process import with_decisive_line

DEATH_SETTLE_S = 3.0
"""After a window with failed requests, how long a dying server is given to be seen dead."""


@dataclass
class ExperimentResult:
    dataset_root: str
    statuses: dict[str, str] = field(default_factory=dict)
    skipped: int = 0
    servers: dict[str, ServerRecord] = field(default_factory=dict)
    """variant → server and segment facts (pid, node, GPU ids, load actors) of its (last) server start."""
    attainment: dict[str, Optional[float]] = field(default_factory=dict)
    """run key → the SLO attainment its committed row recorded (what a capacity search's next probe depends on)."""

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.statuses.values():
            out[s] = out.get(s, 0) + 1
        return out


@dataclass(frozen=True)
class Death:
    """A server death seen by one run: where it happened (for the later runs' reason) and the log tail."""

    where: str
    tail: str


class DiedBeforeWindow(EngineFault):
    """The server was found dead after warmup and flush, before the measured window opened."""


def error_text(e: BaseException) -> tuple[str, str]:
    """(reason, log tail) from a Ray error wrapping a ServerStartError or anything else."""
    cause = e.cause if isinstance(e, RayTaskError) and getattr(e, "cause", None) is not None else e
    tail = getattr(cause, "log_tail", "") or ""
    msg = str(cause).strip().splitlines()
    return (f"{type(cause).__name__}: {msg[-1] if msg else ''}"[:500], tail)


class RunRecorder:
    """Ends runs: the status into the result, on_run and a PointFinished event; failed and invalid runs' rows."""

    def __init__(self, spec: ExperimentSpec, store: DatasetStore, result: ExperimentResult, git_sha: Optional[str],
                 on_run: Callable[[RunPlan, str], None], on_event: Callable[[ProgressEvent], None]) -> None:
        self.spec = spec
        self.store = store
        self.result = result
        self.git_sha = git_sha
        self.on_run = on_run
        self.on_event = on_event

    def finish(self, p: RunPlan, status: str, row: Optional[RunRow] = None) -> None:
        self.result.statuses[p.run_key] = status
        self.on_run(p, status)
        self.on_event(PointFinished.from_row(p, status, row))

    def failed(self, p: RunPlan, reason: str, tail: str, server: Optional[ServerFacts],
               seg: Optional[SegmentFacts]) -> None:
        """A run that measured nothing: `failed`, retried on resubmission."""
        if reason.startswith("server died"):
            reason = with_decisive_line(reason, tail)
        row = failed_run_row(p, reason, tail, server, seg, self.spec, self.git_sha)
        self.store.write_run(p, row, None, None)
        self.finish(p, "failed", row)

    def invalid(self, p: RunPlan, reason: str, server: ServerFacts, seg: SegmentFacts) -> None:
        """A run that is not measured because its variant cannot be vouched for (its gate failed)."""
        row = failed_run_row(p, reason, "", server, seg, self.spec, self.git_sha)
        row = replace(row, status="invalid", failure_reason=None, invalid_reasons=reason)
        self.store.write_run(p, row, None, None)
        self.finish(p, "invalid", row)
