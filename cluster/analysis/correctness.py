"""The correctness gate: a fixed greedy prompt set every variant answers before its speed counts (pure logic).

A variant fails on wrong task answers (unless the spec turns that one check off), NaN/empty/degenerate output, a common prefix with the baseline shorter
than a threshold on most prompts, or an acceptance length ≈ 1.0 on a NEXTN variant (MTP weights not loaded).
Token equality with the baseline is NOT required: speculative and re-tuned kernels change floating-point results,
so greedy outputs may drift late in a sequence.
"""

from __future__ import annotations

import math
import re
from types import MappingProxyType
from typing import Any, Mapping, Optional, Sequence

import pyarrow as pa

from cluster.kernel.gate import (GATE_PROMPTS, PHASE_ALONE, PHASE_UNDER_LOAD, GateOutput, GatePrompt, GateResult,
                                 PromptVerdict, degeneracy, output_units)
from cluster.kernel.runs import RECORD_SCHEMA_VERSION

ACCEPT_LENGTH_FLOOR = 1.05
"""A NEXTN variant at or below this acceptance length is drafting nothing useful (MTP weights dropped)."""

GATE_FAILED = "correctness gate failed: "
"""How a run's invalid_reasons begin when its variant failed the gate (the gate's reasons follow, '; '-joined)."""

def floor_reason(accept_length: float) -> str:
    """The gate's reason for an acceptance length at or below ACCEPT_LENGTH_FLOOR (_FLOOR_REASON reads it back)."""
    return (f"acceptance length {accept_length:.3f} <= {ACCEPT_LENGTH_FLOOR}: the MTP draft accepts nothing "
            "(weights not loaded? SGLang #35797)")


_FLOOR_REASON = re.compile(r"acceptance length -?[0-9.]+ <= " + re.escape(str(ACCEPT_LENGTH_FLOOR))
                           + r": the MTP draft accepts nothing \(.*\)")


def gate_failed_reason(reasons: Sequence[str]) -> str:
    """A run's invalid reason when its variant failed the gate with `reasons`."""
    return GATE_FAILED + "; ".join(reasons)


def only_acceptance_floor(invalid_reasons: Optional[str]) -> bool:
    """THE predicate: the run's (or the gate's, through gate_failed_reason) only invalid reason is the gate's
    acceptance floor. Such a variant is measured and its acceptance health judged, while its runs stay invalid."""
    if not isinstance(invalid_reasons, str) or not invalid_reasons.startswith(GATE_FAILED):
        return False
    # the gate's notes ("note: ...", gate_stage.py) are no reasons; anything else beside the floor is one
    parts = [r for r in invalid_reasons[len(GATE_FAILED):].split("; ") if not r.startswith("note: ")]
    return len(parts) == 1 and _FLOOR_REASON.fullmatch(parts[0]) is not None


PREFIX_FAIL_SHARE = 0.5
"""The prefix rule fails a variant when more than this share of prompts diverge from the baseline too early."""


def _strip_think(text: str) -> str:
    if "</think>" in text:
        return text.rsplit("</think>", 1)[1]
    return text


def common_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def evaluate_gate(
    variant_outputs: Mapping[str, GateOutput],
    baseline_outputs: Optional[Mapping[str, GateOutput]],
    accept_length: Optional[float],
    is_nextn: bool,
    min_prefix_tokens: int = 8,
    prompts: Sequence[GatePrompt] = GATE_PROMPTS,
    check_answers: bool = True,
) -> GateResult:
    """Judge one variant's answers to the gate prompts (keyed by prompt_id) against the baseline's.

    check_answers=False (spec `correctness: {check_answers: false}`, for random-weight models) skips only the
    task-answer regex: answer_ok is None and the degeneracy, prefix and acceptance rules still decide."""
    reasons: list[str] = []
    verdicts: list[PromptVerdict] = []
    short_prefix = 0
    compared = 0
    for p in prompts:
        out = variant_outputs.get(p.prompt_id)
        if out is None:
            verdicts.append(PromptVerdict(p.prompt_id, False, None, None, ("no output",)))
            reasons.append(f"{p.prompt_id}: no output")
            continue
        evidence: list[str] = []
        ok = True
        bad = degeneracy(out)
        if bad:
            evidence.append(bad)
            reasons.append(f"{p.prompt_id}: {bad}")
            ok = False
        answer_ok: Optional[bool] = None
        if check_answers:
            answer_ok = re.search(p.answer_pattern, _strip_think(out.text), re.IGNORECASE) is not None
        else:
            evidence.append("answer not checked (correctness.check_answers: false)")
        if answer_ok is False:
            ok = False
            msg = f"wrong answer (expected /{p.answer_pattern}/): {out.text[:80]!r}"
            evidence.append(msg)
            reasons.append(f"{p.prompt_id}: {msg}")
        prefix: Optional[int] = None
        base = baseline_outputs.get(p.prompt_id) if baseline_outputs else None
        if base is not None:
            # token ids when both sides have them, else whitespace words (never mix the two)
            both_ids = out.token_ids is not None and base.token_ids is not None
            a = output_units(out) if both_ids else out.text.split()
            b = output_units(base) if both_ids else base.text.split()
            prefix = common_prefix(a, b)
            compared += 1
            need = min(min_prefix_tokens, len(a), len(b))
            if prefix < need:
                short_prefix += 1
                evidence.append(f"common prefix with baseline {prefix} < {need}")
            else:
                evidence.append(f"common prefix with baseline {prefix}")
        verdicts.append(PromptVerdict(p.prompt_id, ok, answer_ok, prefix, tuple(evidence)))
    if compared and short_prefix / compared > PREFIX_FAIL_SHARE:
        reasons.append(
            f"diverges from the baseline within {min_prefix_tokens} tokens on {short_prefix}/{compared} prompts"
        )
    if is_nextn:
        if accept_length is None or (isinstance(accept_length, float) and math.isnan(accept_length)):
            reasons.append("NEXTN variant without a measured acceptance length")
        elif accept_length <= ACCEPT_LENGTH_FLOOR:
            reasons.append(floor_reason(accept_length))
    return GateResult(not reasons, tuple(reasons), tuple(verdicts), accept_length)


CORRECTNESS_SCHEMA = pa.schema(
    [
        pa.field("experiment", pa.string(), nullable=False),
        pa.field("variant", pa.string(), nullable=False),
        pa.field("engine", pa.string(), nullable=False),
        pa.field("prompt_id", pa.string(), nullable=False),
        pa.field("phase", pa.string()),
        pa.field("filler_requests", pa.int32()),
        pa.field("prompt_passed", pa.bool_(), nullable=False),
        pa.field("answer_ok", pa.bool_()),
        pa.field("common_prefix_tokens", pa.int32()),
        pa.field("output_tokens", pa.int32()),
        pa.field("output_text", pa.string()),
        pa.field("evidence", pa.string(), nullable=False),
        pa.field("variant_passed", pa.bool_(), nullable=False),
        pa.field("variant_reasons", pa.string(), nullable=False),
        pa.field("accept_length", pa.float64()),
        pa.field("schema_version", pa.int32(), nullable=False),
        # the eval task's rows (analysis/accuracy.py eval_table); null on the gate's rows
        pa.field("task", pa.string()),
        pa.field("run_key", pa.string()),
        pa.field("expected", pa.string()),
        pa.field("got", pa.string()),
        pa.field("correct", pa.bool_()),
        pa.field("counted", pa.bool_()),
    ]
)
"""The `correctness` table: one row per (variant, gate prompt, phase); the variant verdict repeats on each row.

phase "alone": the prompt asked by itself, judged by evaluate_gate. phase "under_load": the same prompt asked again,
all prompts at once inside `filler_requests` concurrent filler requests (issue 15 item 4: garbage only a mixed batch
produces), judged for degeneracy only; its evidence is why it degenerated. A null phase (tables written before the
column existed) is "alone".

task "eval" (docs/accuracy.md): one row per eval item and phase, `expected` its exact answer, `got` the answer read
from output_text, `correct` the two equal, `counted` whether it enters the accuracy (under load: answered while the
load ran), `run_key` the measured run whose window it was sent in (under load). Its variant_passed/variant_reasons
repeat the gate's verdict; the accuracy verdict is derived when read (analysis/accuracy.py)."""


MAX_STORED_TEXT = 2000


def correctness_rows(
    experiment: str,
    variant: str,
    engine: str,
    result: GateResult,
    outputs: Mapping[str, GateOutput],
    verdict: Optional[tuple[bool, Sequence[str]]] = None,
    loaded: Mapping[str, GateOutput] = MappingProxyType({}),
    filler_requests: int = 0,
) -> pa.Table:
    """The gate's answers for one variant as rows of CORRECTNESS_SCHEMA: each prompt alone, then (when the gate ran
    its loaded pass) each prompt under load. `verdict` (passed, reasons) is the variant's final one, where more than
    evaluate_gate judged it (the loaded pass); by default the result's own."""
    passed, reasons = verdict if verdict is not None else (result.passed, result.reasons)
    common = {"experiment": experiment, "variant": variant, "engine": engine, "variant_passed": passed,
              "variant_reasons": "; ".join(reasons), "accept_length": result.accept_length,
              "schema_version": RECORD_SCHEMA_VERSION}
    rows: list[dict[str, Any]] = []
    for v in result.prompts:
        out = outputs.get(v.prompt_id)
        rows.append({**common, "prompt_id": v.prompt_id, "phase": PHASE_ALONE, "filler_requests": None,
                     "prompt_passed": v.passed, "answer_ok": v.answer_ok, "common_prefix_tokens": v.common_prefix_tokens,
                     "output_tokens": _output_tokens(out), "output_text": out.text[:MAX_STORED_TEXT] if out else None,
                     "evidence": "; ".join(v.evidence)})
    for prompt_id, out in loaded.items():
        why = degeneracy(out)
        rows.append({**common, "prompt_id": prompt_id, "phase": PHASE_UNDER_LOAD, "filler_requests": filler_requests,
                     "prompt_passed": why is None, "answer_ok": None, "common_prefix_tokens": None,
                     "output_tokens": _output_tokens(out), "output_text": out.text[:MAX_STORED_TEXT],
                     "evidence": why or ""})
    return pa.Table.from_pylist(rows, schema=CORRECTNESS_SCHEMA)


def _output_tokens(out: Optional[GateOutput]) -> Optional[int]:
    if out is None:
        return None
    return out.completion_tokens if out.completion_tokens is not None else (
        len(out.token_ids) if out.token_ids is not None else None)
