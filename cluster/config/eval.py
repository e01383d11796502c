"""The accuracy task asked of every variant alone and inside its measured load (`correctness.eval`)."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator

from cluster.config.fields import FieldProblem, FrozenModel, LocalPath

MAX_EVAL_PROMPTS = 100_000
"""Prompts of one accuracy task: more than any eval set a serving benchmark asks (GSM8K's test split is 1,319)."""

MAX_EVAL_ANSWER_TOKENS = 256
"""Tokens of one eval answer: an exact answer is short; the gate's longest budget (bounds.MAX_GATE_TOKENS)."""


class EvalSpec(FrozenModel):
    """A task with exact answers (cluster/loadgen/eval.py asks it, cluster/analysis/accuracy.py scores it): every
    variant answers it greedily, each prompt alone, and (under_load) again sent during its measured window."""

    source: Literal["jsonl"] = "jsonl"
    """jsonl: one object per line holding the prompt and its exact answer."""
    path: LocalPath
    """The JSONL file (relative paths: against the directory sglbench runs in); datasets/arithmetic-200.jsonl ships."""
    prompt_field: str = Field(default="prompt", min_length=1, max_length=64)
    """Each row's field holding the prompt text."""
    answer_field: str = Field(default="answer", min_length=1, max_length=64)
    """Each row's field holding the exact answer (a string or an integer); an answer is correct when its last
    number (or, for a non-numeric answer, its whole trimmed text) equals it."""
    num_prompts: Optional[int] = Field(default=None, ge=1, le=MAX_EVAL_PROMPTS)
    """Ask the first this many rows (default: every row; more than the file holds is an error)."""
    under_load: bool = True
    """Ask every prompt again during the variant's heaviest measured window (its highest load point, first
    workload, first repeat), tagged apart from the load's requests."""
    max_new_tokens: int = Field(default=16, ge=1, le=MAX_EVAL_ANSWER_TOKENS)
    """Token budget of each answer."""

    @model_validator(mode="after")
    def _two_fields(self) -> "EvalSpec":
        if self.prompt_field == self.answer_field:
            raise FieldProblem(("answer_field",), f"answer_field is prompt_field ({self.prompt_field!r}): every "
                               "prompt would be its own answer; expected two different row fields")
        return self
