"""A load actor's built window inputs (prompts, session plan, the source's selection), kept per (workload, seed) so
every load point of a workload reuses one build instead of re-reading and re-tokenising its prompt source."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Optional

from cluster.config.workload import WorkloadSpec
from cluster.kernel.planned_workload import PlannedWorkload

MAX_KEPT_REQUESTS = 1_000_000
"""Built inputs are kept while the kept windows hold at most this many requests in all (the newest always stays):
a million fixed-length prompts are about 0.5 GB as one array (loadgen/datasets.build_prompt_sequence)."""


@dataclass(frozen=True)
class WindowInputs:
    """What a load actor builds from a workload and a seed before its window."""

    prompts: Any
    """Sequence[Prompt] (a PromptArray for fixed-length random ids)."""
    sessions: Any
    """Optional[SessionPlan]: how the window runs as multi-turn sessions."""
    selection: Optional[PlannedWorkload]
    """What the source offered, read apart from `prompts` (built only for the audited shard)."""


class BuiltPrompts:
    """Least-recently-used WindowInputs by (workload, seed, audited), bounded by MAX_KEPT_REQUESTS."""

    def __init__(self, max_requests: int = MAX_KEPT_REQUESTS) -> None:
        self.max_requests = max_requests
        self._kept: OrderedDict[tuple[str, int, bool], tuple[int, WindowInputs]] = OrderedDict()
        self.builds = 0

    def get(self, workload: WorkloadSpec, seed: int, audited: bool, build: Callable[[], WindowInputs]) -> WindowInputs:
        # the workload's whole declaration is the key: two workloads differing in any field never share prompts
        key = (workload.model_dump_json(), seed, audited)
        got = self._kept.get(key)
        if got is not None:
            self._kept.move_to_end(key)
            return got[1]
        inputs = build()
        self.builds += 1
        self._kept[key] = (workload.num_requests, inputs)
        while len(self._kept) > 1 and sum(n for n, _ in self._kept.values()) > self.max_requests:
            self._kept.popitem(last=False)
        return inputs
