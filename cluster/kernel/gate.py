"""The correctness gate's vocabulary: its fixed prompts, a greedy answer, the per-prompt and per-variant verdicts,
the phases a prompt is asked in, and the degeneracy rule (with its thresholds) that the gate, the run's output
sample and the loaded pass all judge by.

Kept at the bottom so the load generator (which asks the prompts and samples outputs) and the analysis (which
judges them against the baseline) share one definition without the load generator importing the analysis."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass(frozen=True)
class GatePrompt:
    prompt_id: str
    text: str
    answer_pattern: str
    """Regex that a correct answer matches (searched case-insensitively after any <think> block)."""
    max_tokens: int


GATE_PROMPTS: tuple[GatePrompt, ...] = (
    GatePrompt("reply_ok", "Reply with exactly one word: OK", r"\bOK\b", 32),
    GatePrompt("multiply", "What is 17 multiplied by 19? Answer with the number only.", r"\b323\b", 64),
    GatePrompt(
        "reasoning",
        "Tom has 3 boxes with 4 apples in each box. He eats 2 apples. How many apples are left? "
        "Think briefly, then give the final answer as a number.",
        r"\b10\b",
        256,
    ),
)
"""Short, checkable, greedy-decodable prompts (the seed's smoke tests)."""

PHASE_ALONE, PHASE_UNDER_LOAD = "alone", "under_load"
"""A gate prompt asked by itself (judged by analysis.correctness.evaluate_gate), or again inside concurrent filler
requests (judged for degeneracy only)."""


DEGENERATE_SHARE = 0.6
"""One token (or word) making up at least this share of an output of MIN_DEGENERATE_UNITS or more is degenerate."""

MIN_DEGENERATE_UNITS = 8


@dataclass(frozen=True)
class GateOutput:
    """One greedy answer: the text and, when the server returned them, the output token ids."""

    text: str
    token_ids: Optional[tuple[int, ...]] = None
    completion_tokens: Optional[int] = None
    finish_reason: Optional[str] = None
    error: Optional[str] = None
    """Why no answer came (a refused call, a timeout, a malformed body): the answer is then empty."""
    spec_verify_ct: Optional[int] = None
    """Verify steps the server reported for the answer (SGLang's meta_info): the gate's acceptance length."""


@dataclass(frozen=True)
class PromptVerdict:
    prompt_id: str
    passed: bool
    answer_ok: Optional[bool]
    common_prefix_tokens: Optional[int]
    """Leading tokens (words when ids are absent) shared with the baseline; None without a baseline."""
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class GateResult:
    passed: bool
    reasons: tuple[str, ...]
    prompts: tuple[PromptVerdict, ...] = field(default_factory=tuple)
    accept_length: Optional[float] = None


def output_units(out: GateOutput) -> list[Any]:
    """What an answer is compared in: its token ids when the server returned them, else its whitespace words."""
    return list(out.token_ids) if out.token_ids is not None else out.text.split()


def degeneracy(out: GateOutput) -> Optional[str]:
    """Why an output is unusable (empty, NaN, undecodable, one token repeated), or None when it looks sane."""
    if out.error:
        return f"request failed: {out.error}"
    text = out.text
    if not text.strip() and not out.token_ids:
        return "empty output"
    if "\ufffd" in text:
        return f"undecodable text ({text.count(chr(0xFFFD))} replacement characters)"
    if re.search(r"(?<![A-Za-z])nan(?![A-Za-z])", text, re.IGNORECASE) and not re.search(r"[A-Za-z]{4,}", text):
        return "output is 'nan'"
    if sum(1 for c in text if ord(c) < 32 and c not in "\n\r\t") > max(2, len(text) // 10):
        return "control characters in output"
    units = output_units(out)
    if len(units) >= MIN_DEGENERATE_UNITS:
        unit, count = Counter(units).most_common(1)[0]
        if count / len(units) >= DEGENERATE_SHARE:
            return f"one token ({unit!r}) is {count}/{len(units)} of the output"
    return None
