"""The accuracy task's records: an item (a prompt with its exact answer, read by cluster/loadgen/eval.py) and one
answer to it, alone or under load (carried in the measured window, scored by cluster/analysis/accuracy.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class EvalItem:
    """One row of the task: the prompt and the exact answer expected."""

    item_id: str
    """'row<N>' (N the 0-based row): the prompt_id of its correctness rows."""
    line: int
    prompt: str
    expected: str


@dataclass(frozen=True)
class EvalAnswer:
    """One greedy answer to one item in one phase."""

    item_id: str
    phase: str
    """PHASE_ALONE or PHASE_UNDER_LOAD."""
    text: Optional[str]
    """The answer's text; None when none came (error says why)."""
    error: Optional[str] = None
    output_tokens: Optional[int] = None
    during_load: Optional[bool] = None
    """Under load: sent and answered while the window's load requests were still running (only these count as
    answered under load); None alone."""
    sent_ns: Optional[int] = None
    answered_ns: Optional[int] = None
    """Under load: monotonic ns from the window's start."""
