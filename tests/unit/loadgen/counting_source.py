"""A throwaway prompt source, to show that a source is one module: prompt i is the ids start+i, start+i+1, ... of the
workload's input length (`prompts: {source: counting, start: N}`); every prompt is distinct, drawn from nothing."""

from __future__ import annotations

import pathlib
from typing import Literal

import numpy as np
from pydantic import Field

from cluster.config.prompts import SourceOptions
from cluster.config.workload import WorkloadSpec
from cluster.engines.base import Prompt
from cluster.kernel.planned_workload import PlannedWorkload, category_shares, length_quantiles
from cluster.loadgen.prompt_sources import Source, register_source


class CountingPrompts(SourceOptions):
    source: Literal["counting"]
    start: int = Field(ge=100, le=10_000)


@register_source
class Counting(Source):
    config = CountingPrompts
    names = ("counting",)

    def prompts(self, workload: WorkloadSpec, n: int, seed: int, base_dir: pathlib.Path,
                model_path: str) -> list[Prompt]:
        src = workload.prompts
        assert isinstance(src, CountingPrompts) and isinstance(workload.input_tokens, int)
        return [Prompt(input_ids=tuple(range(src.start + i, src.start + i + workload.input_tokens)), source_row=i)
                for i in range(n)]

    def selection(self, workload: WorkloadSpec, n: int, seed: int, base_dir: pathlib.Path,
                  model_path: str) -> PlannedWorkload:
        assert isinstance(workload.input_tokens, int)
        return PlannedWorkload("counting", float(n), False, length_quantiles(np.asarray([workload.input_tokens])),
                               category_shares([None]))
