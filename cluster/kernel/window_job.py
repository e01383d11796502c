"""The window's job: what one measured window (or one shard of it) must do, as one record built once from the run
plan by the driver and carried unchanged to the load actor and the load generator."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from cluster.config.workload import WorkloadSpec
from cluster.kernel.eval_task import EvalItem
from cluster.kernel.load_shapes import ClosedLoop, LoadPoint
from cluster.kernel.runs import RunPlan

DEFAULT_BATCH_ROWS = 4096
"""Finished requests per Arrow batch pair out of a load generator's record sink."""
DEFAULT_EVAL_MAX_TOKENS = 16
DEFAULT_SCRAPE_INTERVAL_S = 1.0


@dataclass(frozen=True)
class WindowJob:
    """One window's (or shard's) job: where to send, what each request asks for, at what load, how records leave."""

    base_url: str
    api: str
    """The engine API the requests use (WorkloadSpec.api)."""
    max_tokens: int
    """Output tokens a request asks for unless its prompt carries its own budget."""
    load: LoadPoint
    seed: int
    ignore_eos: bool
    temperature: float
    model_name: str
    request_timeout_s: float
    workload: Optional[WorkloadSpec] = None
    """The workload a load actor builds the window's prompts from; None when the caller hands prompts in."""
    shard_index: int = 0
    num_shards: int = 1
    start_unix_s: Optional[float] = None
    """Several shards start their windows together at this wall-clock instant; None: now."""
    batch_rows: int = DEFAULT_BATCH_ROWS
    scrape_metrics: bool = True
    """Scrape the engine's counters around the window (and, on a load actor, its gauges during it)."""
    scrape_interval_s: float = DEFAULT_SCRAPE_INTERVAL_S
    eval_items: tuple[EvalItem, ...] = ()
    """The accuracy task's items sent beside the load (loadgen/eval.py during_window)."""
    eval_max_tokens: int = DEFAULT_EVAL_MAX_TOKENS
    workers: tuple[tuple[str, str], ...] = ()
    """A deployment's servers behind its front door, as (process name, base URL): their caches are flushed, their
    /metrics scraped (labelled process=<name>) and summed for the speculative counters; () for one server, whose
    base_url is all of it."""

    def __post_init__(self) -> None:
        if self.num_shards < 1 or not 0 <= self.shard_index < self.num_shards:
            raise ValueError(f"shard_index must be in [0, num_shards) and num_shards >= 1, got "
                             f"{self.shard_index}/{self.num_shards}")

    @classmethod
    def of_run(cls, p: RunPlan, base_url: str, model_name: str, request_timeout_s: float,
               workers: tuple[tuple[str, str], ...] = ()) -> WindowJob:
        """The job of run `p`'s window, before it is split into shards."""
        w = p.workload
        return cls(base_url=base_url, api=w.api, max_tokens=w.output_tokens_nominal() or 1, load=p.load, seed=p.seed,
                   ignore_eos=w.ignore_eos, temperature=w.temperature, model_name=model_name,
                   request_timeout_s=request_timeout_s, workload=w, workers=workers)

    def metrics_targets(self) -> tuple[tuple[str, str], ...]:
        """(process name, base URL) of every server whose /metrics and cache count: the workers, or the one server
        at base_url (named "")."""
        return self.workers or (("", self.base_url),)

    def shard(self, index: int, num_shards: int, start_unix_s: Optional[float]) -> WindowJob:
        """This job's shard `index` of `num_shards` (the load actor's part of the window)."""
        return replace(self, shard_index=index, num_shards=num_shards, start_unix_s=start_unix_s)

    def warmup(self, concurrency: int) -> WindowJob:
        """The warmup's job: the same requests closed-loop at `concurrency`, seed 0, no scrape, one shard, no task."""
        return replace(self, load=LoadPoint(ClosedLoop.kind, float(max(1, concurrency))), seed=0, workload=None,
                       shard_index=0, num_shards=1, start_unix_s=None, batch_rows=DEFAULT_BATCH_ROWS,
                       scrape_metrics=False, eval_items=())
