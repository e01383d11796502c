"""Sends the correctness gate's fixed prompts greedily to a server and collects the answers (no statistics)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Optional, Protocol, runtime_checkable

import aiohttp
import pyarrow as pa

from cluster.kernel.gate import GATE_PROMPTS, PHASE_ALONE, GateOutput, degeneracy
from cluster.kernel.window_figures import acceptance
from cluster.engines.answer_fields import MalformedAnswerError, decode_json
from cluster.engines.base import HttpRequest


@runtime_checkable
class GateTarget(Protocol):
    """An engine as the gate asks it (declared here, by its caller; every adapter satisfies it structurally)."""

    @property
    def headers(self) -> Mapping[str, str]:
        """Headers every call sends (the variant's API key, where it has one)."""
        ...

    def gate_request(self, text: str, max_tokens: int, model_name: str) -> HttpRequest:
        """A non-streaming greedy request for one prompt."""
        ...

    def parse_gate_response(self, doc: Any) -> GateOutput:
        """The typed answer from the decoded JSON body; a field of the wrong type is a MalformedAnswerError."""
        ...


MAX_ANSWER_BYTES = 16 * 1024 * 1024
"""A gate answer's body past this is refused (a 256-token answer with its ids is a few KiB)."""


async def _read_bounded(resp: aiohttp.ClientResponse, where: str) -> bytes:
    chunks: list[bytes] = []
    total = 0
    async for chunk in resp.content.iter_any():
        total += len(chunk)
        if total > MAX_ANSWER_BYTES:
            raise MalformedAnswerError(f"{where}: the answer's body is larger than {MAX_ANSWER_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def ask_greedy(session: aiohttp.ClientSession, engine: GateTarget, base_url: str, text: str, max_tokens: int,
                     model_name: str, timeout_s: float) -> GateOutput:
    """One prompt's greedy answer, or an empty one whose `error` says what happened: the whole call (connect,
    headers, body) within `timeout_s`, the body within MAX_ANSWER_BYTES, its fields typed (a malformed answer is that
    prompt's error, never a raise)."""
    req = engine.gate_request(text, max_tokens, model_name)
    where = f"POST {base_url}{req.path}"
    try:
        async with session.post(base_url + req.path, data=req.body, headers={"Content-Type": "application/json"},
                                timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            raw = await _read_bounded(resp, where)
            if resp.status != 200:
                return _failed(f"HTTP {resp.status}: {raw[:200]!r}")
            return engine.parse_gate_response(decode_json(raw, f"{where}: the answer's body"))
    except asyncio.TimeoutError:
        return _failed(f"{where}: timed out after {timeout_s:g} s (the call's whole deadline)")
    except MalformedAnswerError as e:
        return _failed(f"malformed answer: {e}")
    except (aiohttp.ClientError, OSError, ValueError) as e:  # refused, reset, bad status line, truncated body
        return _failed(f"{where}: {type(e).__name__}: {e}")


def _failed(error: str) -> GateOutput:
    return GateOutput(text="", error=error)


@dataclass(frozen=True)
class GateAnswers:
    """One server's answers to the gate prompts (prompt_id → answer) and the acceptance length they measured."""

    outputs: dict[str, GateOutput]
    accept_length: Optional[float] = None
    stored: bool = False
    """Read back from the dataset's correctness table (text only: prefixes compare as words), not asked now."""
    loaded: dict[str, GateOutput] = field(default_factory=dict)
    """The same prompts asked again all at once inside `filler` concurrent filler requests (a mixed batch)."""
    filler: int = 0

    def loaded_problems(self) -> list[str]:
        """One line per prompt whose answer under load is garbage while the batch was mixed (PR #20047's case)."""
        out = []
        for pid, o in self.loaded.items():
            why = degeneracy(o)
            if why is not None:
                out.append(f"under load ({self.filler} filler requests + {len(self.loaded)} gate prompts at once), "
                           f"prompt {pid!r}: {why} (text {o.text[:80]!r})")
        return out

    @classmethod
    def failed(cls, error: str) -> "GateAnswers":
        """No answers at all (the load actor asking them failed)."""
        return cls({"_": _failed(error)}, None)


def _budget(prompt_max_tokens: int, cap: Optional[int]) -> int:
    """A gate prompt's token budget: its own, or the spec's `correctness.max_new_tokens` cap when lower."""
    return prompt_max_tokens if cap is None else min(prompt_max_tokens, cap)


async def collect_gate_outputs(engine: GateTarget, base_url: str, model_name: str,
                               timeout_s: float = 120.0, cap: Optional[int] = None) -> dict[str, GateOutput]:
    """prompt_id → its answer (or its error), one prompt at a time."""
    out: dict[str, GateOutput] = {}
    async with aiohttp.ClientSession(headers=engine.headers) as session:
        for p in GATE_PROMPTS:
            out[p.prompt_id] = await ask_greedy(session, engine, base_url, p.text, _budget(p.max_tokens, cap),
                                                model_name, timeout_s)
    return out


FILLER_PROMPT = "Write a long, detailed story about a lighthouse keeper, the sea and a storm that lasts a week."
FILLER_TOKENS = 48
"""Each filler request's length; fillers are resubmitted until the gate prompts have all answered."""


async def collect_gate_outputs_under_load(engine: GateTarget, base_url: str, model_name: str, filler: int,
                                          timeout_s: float = 120.0, cap: Optional[int] = None
                                          ) -> dict[str, GateOutput]:
    """Every gate prompt at once while `filler` other requests keep the batch full (the variant's highest offered
    concurrency less the gate prompts): FlashInfer CUTLASS FP4 produced NaN rows only in mixed batches, within a
    few rounds of 64 concurrent requests, while the same prompt alone was clean (sglang PR #20047)."""
    stop = asyncio.Event()
    async with aiohttp.ClientSession(headers=engine.headers) as session:
        async def fill() -> None:
            while not stop.is_set():
                await ask_greedy(session, engine, base_url, FILLER_PROMPT, FILLER_TOKENS, model_name, timeout_s)

        fillers = [asyncio.create_task(fill()) for _ in range(max(0, filler))]
        try:
            await asyncio.sleep(0)  # let the fillers send first, so the gate prompts join a running batch
            answers = await asyncio.gather(*(ask_greedy(session, engine, base_url, p.text,
                                                        _budget(p.max_tokens, cap), model_name, timeout_s)
                                             for p in GATE_PROMPTS))
        finally:
            stop.set()
            for t in fillers:
                t.cancel()
            await asyncio.gather(*fillers, return_exceptions=True)
    return {p.prompt_id: a for p, a in zip(GATE_PROMPTS, answers)}


async def collect_gate_answers(engine: GateTarget, base_url: str, model_name: str,
                               timeout_s: float = 120.0, filler: Optional[int] = None,
                               cap: Optional[int] = None) -> GateAnswers:
    """Ask every gate prompt (one at a time) and keep the engine's typed answers; with `filler` (≥ 0), ask them
    again all at once inside that much filler load (GateAnswers.loaded). `cap` lowers every prompt's budget
    (`correctness.max_new_tokens`)."""
    outputs = await collect_gate_outputs(engine, base_url, model_name, timeout_s, cap)
    answers = GateAnswers(outputs, gate_accept_length(outputs))
    if filler is None:
        return answers
    loaded = await collect_gate_outputs_under_load(engine, base_url, model_name, filler, timeout_s, cap)
    return replace(answers, loaded=loaded, filler=filler)


def gate_accept_length(outputs: Mapping[str, GateOutput]) -> Optional[float]:
    """Σ(completion_tokens − 1)/Σspec_verify_ct over the gate answers: kernel.window_figures.acceptance, the run
    metric's one definition, over the answers that carry both counts; None with fewer than 8 verify steps to judge."""
    pairs = [(o.completion_tokens, o.spec_verify_ct) for o in outputs.values()
             if o.completion_tokens is not None and o.spec_verify_ct is not None]
    acc = acceptance([c for c, _ in pairs], [v for _, v in pairs])
    if acc.verify_steps < 8:
        return None  # too few verify steps to judge
    return acc.accept_length


def answers_from_correctness_rows(table: pa.Table) -> GateAnswers:
    """A variant's gate answers as the `correctness` table stored them (analysis.correctness.correctness_rows): the
    prompts asked alone (a table from before the `phase` column holds only those)."""
    cols = ["prompt_id", "output_text", "output_tokens", "accept_length"]
    has_phase = "phase" in table.column_names
    rows = [r for r in table.select(cols + (["phase"] if has_phase else [])).to_pylist()
            if r.get("phase") in (None, PHASE_ALONE)]
    outputs = {str(r["prompt_id"]): GateOutput(text=str(r["output_text"] or ""), completion_tokens=r["output_tokens"])
               for r in rows}
    accept = next((r["accept_length"] for r in rows if r["accept_length"] is not None), None)
    return GateAnswers(outputs, accept, stored=True)
