"""What a workload's prompt source offers (its selection, for the workload audit) and the fingerprint of a prompt sent.

The selection is read from the source itself, apart from the prompt list the load generator sends: a file
source's rows (their distinct contents, lengths and categories), a generated source's space (how many distinct
prompts its draws can give) and length distribution. cluster/analysis/workload_audit.py judges the run's sent
requests against it; this module only says what was offered, so a bug in building the prompt list (every row
given the first row's prompt) shows as a difference instead of being copied into both sides.
"""

from __future__ import annotations

import hashlib
import math
import pathlib
from collections import Counter
from typing import Optional, Sequence, Union

import numpy as np

from cluster.kernel.planned_workload import category_shares, length_quantiles
from cluster.kernel.planned_workload import PlannedWorkload
from cluster.engines.base import Prompt
from cluster.loadgen.datasets import PromptArray, load_jsonl_prompts, random_id_low, resolve_path
from cluster.loadgen.lengths import draw_lengths
from cluster.config.workload import LengthDist, WorkloadSpec
from cluster.config.prompts import ConversationPrompts, JsonlPrompts, RandomIdsPrompts, TextPrompts, TracePrompts

POPULATION_DRAWS = 20_000
"""Draws that stand for a length distribution's population (its quantiles to about ±0.5 %)."""
AUDIT_STREAM = 0xA0D1
"""Seed stream of those draws: apart from every stream the prompts themselves are drawn from."""


def fingerprint_bytes(data: Union[bytes, memoryview], person: bytes) -> int:
    """blake2b-64 of `data` (personalised by what it is: IDS or TEXT) as a signed int64, the `requests.
    prompt_fingerprint` column's type."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8, person=person).digest(), "little", signed=True)


IDS = b"sglbench-ids"
TEXT = b"sglbench-text"


def prompt_fingerprint(p: Prompt) -> int:
    """The fingerprint of what a prompt sends: its token ids (little-endian int64) when it has them, else its text
    (UTF-8). About 3 us for 128 ids; 90 us for a session turn of 8192 (the tuple's conversion dominates)."""
    if p.input_ids is not None:
        return fingerprint_bytes(np.fromiter(p.input_ids, dtype="<i8", count=len(p.input_ids)).data, IDS)
    return fingerprint_bytes((p.text or "").encode("utf-8", "surrogatepass"), TEXT)


def prompt_fingerprints(prompts: Sequence[Prompt], indices: Sequence[int]) -> np.ndarray:
    """int64 fingerprints of prompts[i] for each i of `indices` (0 elsewhere), computed before a window: a
    PromptArray's rows are hashed straight from its id array, never built as Prompts."""
    out = np.zeros(len(prompts), dtype=np.int64)
    if isinstance(prompts, PromptArray):
        ids = np.ascontiguousarray(prompts.ids, dtype="<i8")
        for i in indices:
            out[i] = fingerprint_bytes(ids[i].data, IDS)
        return out
    for i in indices:
        out[i] = prompt_fingerprint(prompts[i])
    return out


def _space(values_per_token: int, tokens: int, times: int = 1) -> float:
    """values_per_token ** tokens × times as a float (inf past 1e300)."""
    if tokens * math.log10(max(values_per_token, 1)) + math.log10(times) > 300:
        return math.inf
    return float(values_per_token) ** tokens * times


def _population(length: object, fixed: Optional[int], seed: int) -> np.ndarray:
    if isinstance(length, LengthDist):
        return draw_lengths(length, POPULATION_DRAWS, np.random.default_rng([seed, AUDIT_STREAM]))
    assert fixed is not None
    return np.asarray([fixed], dtype=np.int64)


def random_ids_selection(workload: WorkloadSpec, seed: int) -> PlannedWorkload:
    """Seeded ids: the space of distinct prompts the draws can give, the input length distribution."""
    src = workload.prompts
    assert isinstance(src, RandomIdsPrompts)
    span = src.vocab_size - random_id_low(src.vocab_size)
    prefix = src.shared_prefix
    low = workload.input_tokens.min if isinstance(workload.input_tokens, LengthDist) else workload.input_tokens
    assert isinstance(low, int)
    own = low - (prefix.tokens if prefix else 0)
    name = "shared_prefix" if prefix else "random_ids"
    fixed = workload.input_tokens if isinstance(workload.input_tokens, int) else None
    return PlannedWorkload(name, _space(span, own, prefix.groups if prefix else 1), True,
                           length_quantiles(_population(workload.input_tokens, fixed, seed)), category_shares([None]))


def trace_selection(workload: WorkloadSpec, n: int, base_dir: pathlib.Path) -> PlannedWorkload:
    """The replayed rows: seeded ids of each row's length."""
    from cluster.loadgen.traces import load_trace, replayed_rows

    src = workload.prompts
    assert isinstance(src, TracePrompts)
    path = resolve_path(src.path, base_dir)
    rows = replayed_rows(load_trace(path), n, path)
    row_tokens = np.asarray([r.input_tokens for r in rows], dtype=np.int64)
    span = src.vocab_size - random_id_low(src.vocab_size)
    return PlannedWorkload("trace", _space(span, int(row_tokens.min())) if len(row_tokens) else 0.0, True,
                           length_quantiles(row_tokens) if len(row_tokens) else None, category_shares([None]))


def jsonl_selection(workload: WorkloadSpec, base_dir: pathlib.Path) -> PlannedWorkload:
    """A prompt file's rows: their distinct prompts, their lengths when every row is ids."""
    src = workload.prompts
    assert isinstance(src, JsonlPrompts)
    prompts = load_jsonl_prompts(resolve_path(src.path, base_dir))
    ids = [p.input_ids for p in prompts]
    lengths = (length_quantiles(np.asarray([len(x) for x in ids if x is not None]))
               if all(x is not None for x in ids) else None)
    offered, repeats = _rows_offered([prompt_fingerprint(p) for p in prompts])
    return PlannedWorkload("jsonl", offered, False, lengths, category_shares([None]), repeats)


def conversation_selection(workload: WorkloadSpec, base_dir: pathlib.Path, model_path: str) -> PlannedWorkload:
    """The selected rows: their distinct prompts as sent (rendered and tokenized when the workload tokenizes), their
    lengths (known only then) and their categories."""
    from cluster.loadgen.conversations import load_selection, session_renderer

    src = workload.prompts
    assert isinstance(src, ConversationPrompts)
    sel, _ = load_selection(workload, base_dir, model_path)
    render = session_renderer(workload, base_dir, model_path)
    prints: list[int] = []
    lengths: list[int] = []
    for r in sel.rows:
        if render is None:
            prints.append(prompt_fingerprint(Prompt(text=r.text)))
            continue
        text, ids = render(r.turns)
        prints.append(prompt_fingerprint(Prompt(input_ids=ids, text=text)))
        lengths.append(len(ids or ()))
    quantiles = length_quantiles(np.asarray(lengths)) if render is not None and lengths else None
    offered, repeats = _rows_offered(prints)
    return PlannedWorkload(src.source, offered, False, quantiles,
                           category_shares([r.category for r in sel.rows]) if sel.rows else category_shares([None]),
                           repeats)


def _rows_offered(prints: list[int]) -> tuple[float, tuple[tuple[int, int], ...]]:
    """A file's rows' fingerprints → (distinct prompts, their multiplicities when a prompt is on several rows)."""
    per = Counter(prints)
    repeats = tuple(sorted(Counter(per.values()).items())) if len(per) < len(prints) else ()
    return float(len(per)), repeats


def text_selection(workload: WorkloadSpec, seed: int, base_dir: pathlib.Path, model_path: str) -> PlannedWorkload:
    """A corpus: every window start is one prompt of the space (windows drawn with replacement)."""
    from tokenizers import Tokenizer

    from cluster.loadgen.text_prompts import corpus_text, tokenizer_file  # the corpus as build_text_prompts reads it

    src = workload.prompts
    assert isinstance(src, TextPrompts) and src.path is not None
    tok = Tokenizer.from_file(str(tokenizer_file(src.tokenizer, model_path, base_dir)))
    corpus = np.asarray(tok.encode(corpus_text(resolve_path(src.path, base_dir)), add_special_tokens=False).ids,
                        dtype=np.uint64)
    need = workload.input_tokens_max() or 0
    shortest = workload.input_tokens.min if isinstance(workload.input_tokens, LengthDist) else need
    fixed = workload.input_tokens if isinstance(workload.input_tokens, int) else None
    counts = _window_counts(corpus, max(1, len(corpus) - need + 1), max(1, int(shortest)))
    return PlannedWorkload("text", float(len(counts)), True,
                           length_quantiles(_population(workload.input_tokens, fixed, seed)), category_shares([None]),
                           tuple(sorted(Counter(counts.tolist()).items())))


def _window_counts(tokens: np.ndarray, starts: int, width: int) -> np.ndarray:
    """How many of the window starts [0, starts) give each distinct window of `width` tokens (a repeating corpus
    gives fewer distinct windows than starts; a window of the shortest length stands for every longer one, whose
    distinct count can only be higher). A polynomial hash mod 2^64 over the whole corpus at once: window i's hash is
    Σ_t tokens[i+t]·B^-t, from prefix sums of tokens[j]·B^-j scaled back by B^i."""
    b = np.uint64(0x9E3779B97F4A7C15)  # odd, so invertible mod 2^64
    b_inv = np.uint64(pow(int(b), -1, 1 << 64))
    n = len(tokens)
    with np.errstate(over="ignore"):
        inv_pow = np.cumprod(np.full(n, b_inv, dtype=np.uint64)) * b  # b_inv^j for j = 0..n-1
        fwd_pow = np.cumprod(np.full(starts, b, dtype=np.uint64)) * b_inv  # b^i
        prefix = np.concatenate([np.zeros(1, np.uint64), np.cumsum((tokens + np.uint64(1)) * inv_pow)])
        hashes = (prefix[width: width + starts] - prefix[:starts]) * fwd_pow
    _, counts = np.unique(hashes, return_counts=True)
    return counts
