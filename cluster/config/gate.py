"""The correctness gate's settings: what every variant must answer before its speed counts."""

from __future__ import annotations

from typing import Optional

from pydantic import Field, model_validator

from cluster.config import bounds as B
from cluster.config.eval import EvalSpec
from cluster.config.fields import FrozenModel


class CorrectnessSpec(FrozenModel):
    """The correctness gate every variant passes before its speed counts (cluster/analysis/correctness.py)."""

    enabled: bool = True
    """Turn off only for models that cannot answer (random weights in tests); runs then record the gate as skipped."""
    min_prefix_tokens: int = Field(default=8, ge=0, le=B.MAX_GATE_TOKENS)
    """Greedy outputs must share at least this many leading tokens with the baseline's on most prompts."""
    check_answers: bool = True
    """False turns off only the task-answer check (random-weight models cannot answer); the prefix, acceptance and
    degeneracy checks still run."""
    check_output_samples: bool = True
    """False keeps each measured run's output sample (table output_samples, provenance) but does not mark a run
    invalid when the sample degenerates: only for models whose output is garbage by construction (random weights
    in tests)."""
    max_new_tokens: Optional[int] = Field(default=None, ge=8, le=B.MAX_GATE_TOKENS)
    """Caps every gate prompt's token budget (default: each prompt's own, up to 256). Only with `check_answers:
    false`: an answer needs its prompt's whole budget, while the prefix, acceptance and degeneracy checks judge the
    first tokens (min_prefix_tokens ≤ the cap). For slow test engines (real SGLang on a CPU), where the 256-token
    reasoning prompt, asked twice, cost more than the measured window."""
    eval: Optional[EvalSpec] = None
    """An accuracy task with exact answers (docs/accuracy.md) every variant answers alone and inside its measured
    load; a variant below the baseline's accuracy beyond the interval is invalid for speed claims."""

    @model_validator(mode="after")
    def _cap_needs_no_answers(self) -> "CorrectnessSpec":
        if self.max_new_tokens is not None:
            if self.check_answers:
                raise ValueError("max_new_tokens caps the gate prompts' budgets, which the answer check needs: "
                                 "set check_answers: false to use it, or remove max_new_tokens")
            if self.max_new_tokens < self.min_prefix_tokens:
                raise ValueError(f"max_new_tokens {self.max_new_tokens} is below min_prefix_tokens "
                                 f"{self.min_prefix_tokens}: no prefix could be compared")
        return self
