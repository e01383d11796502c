"""Prompts of the file and generated sources (seeded random token ids, JSONL files, traces); the same (workload, n,
seed) gives the same prompts. cluster/loadgen/prompt_sources.py picks the source of a workload.

Every prompt says which row of its source it is (`Prompt.source_row`): for a file source (jsonl, trace, sharegpt,
messages) the row's 0-based ordinal in the file; for a generated source the seeded draw it is. random_ids (with or
without shared_prefix): request i's own ids are the i-th draw of the window's seeded stream, so source_row = i (a
shared prefix's group is a separate draw and not part of it); text: prompt i is the i-th seeded window of the
corpus, source_row = i. Two prompts with the same source_row in one window are the same draw (or row).
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Optional, Sequence, Union, overload

import numpy as np

from cluster.engines.base import Prompt
from cluster.errors import PromptSourceError
from cluster.loadgen.source_files import SourceRecord, json_records, read_source_text, row_error, shown
from cluster.loadgen.lengths import INPUT_STREAM, OUTPUT_STREAM, draw_lengths, length_rng
from cluster.loadgen.traces import TraceRow
from cluster.config.workload import LengthDist, WorkloadSpec
from cluster.config.prompts import RandomIdsPrompts, SharedPrefix

RANDOM_ID_LOW = 100
"""Lowest random token id: the first ids of common vocabularies are special tokens (BOS/EOS/pad, control)."""


def random_id_low(vocab_size: int) -> int:
    """The lowest random id drawn: RANDOM_ID_LOW, or vocab_size // 4 for vocabularies too small for that range."""
    return RANDOM_ID_LOW if vocab_size > 2 * RANDOM_ID_LOW else vocab_size // 4


class DatasetError(PromptSourceError):
    """A prompt source that cannot be read; the message names the file, the line and what was expected."""


def workload_random_ids(workload: WorkloadSpec, n: int, seed: int) -> list[Prompt]:
    """A random_ids workload's `n` prompts: each one's own ids the i-th draw of the seeded stream (its length drawn
    when input_tokens is a distribution), after its group's shared prefix when the workload has them."""
    src = workload.prompts
    assert isinstance(src, RandomIdsPrompts)
    rng = np.random.default_rng(seed)
    own = 0 if src.shared_prefix is None else src.shared_prefix.tokens  # each prompt's own ids come after it
    if isinstance(workload.input_tokens, LengthDist):
        lengths = draw_lengths(workload.input_tokens, n, length_rng(seed, INPUT_STREAM))
        out = [dataclasses.replace(random_id_prompts(1, int(k) - own, src.vocab_size, rng)[0], source_row=i)
               for i, k in enumerate(lengths)]
    else:
        assert isinstance(workload.input_tokens, int)  # the spec refuses 'dataset' for random_ids
        out = random_id_prompts(n, workload.input_tokens - own, src.vocab_size, rng)
    turns = workload.sessions.turns if workload.sessions is not None else 0
    if src.shared_prefix is not None:
        prefixes, groups = shared_prefixes(src.shared_prefix, n, src.vocab_size, seed)
        # a later session turn is new ids only: its session's history (first turn included) holds the prefix
        out = [p if turns and i % turns else Prompt(input_ids=tuple(prefixes[g].tolist()) + (p.input_ids or ()),
                                                    source_row=p.source_row)
               for i, (p, g) in enumerate(zip(out, groups))]
    return with_output_budgets(out, workload, seed)


def resolve_path(path: Optional[str], base_dir: pathlib.Path) -> pathlib.Path:
    assert path is not None  # the spec requires a path for file sources
    p = pathlib.Path(path)
    return p if p.is_absolute() else base_dir / p


def with_output_budgets(prompts: list[Prompt], workload: WorkloadSpec, seed: int) -> list[Prompt]:
    """The prompts with one seeded max_tokens each when output_tokens is a distribution (unchanged otherwise)."""
    if not isinstance(workload.output_tokens, LengthDist):
        return prompts
    budgets = draw_lengths(workload.output_tokens, len(prompts), length_rng(seed, OUTPUT_STREAM))
    return [dataclasses.replace(p, max_tokens=int(b)) for p, b in zip(prompts, budgets)]


def workload_random_ids_sequence(workload: WorkloadSpec, n: int, seed: int) -> Sequence[Prompt]:
    """The prompts of `workload_random_ids`, identical, but fixed-length ones kept as one int32 array.

    A million 128-token prompts as tuples of Python ints take ~4.7 GB; as a `PromptArray` 0.5 GB, and each
    Prompt is built when its request is sent.
    """
    src = workload.prompts
    assert isinstance(src, RandomIdsPrompts)
    if not (isinstance(workload.input_tokens, int) and isinstance(workload.output_tokens, int)
            and workload.sessions is None):
        return workload_random_ids(workload, n, seed)
    if src.shared_prefix is None:
        return random_id_prompt_array(n, workload.input_tokens, src.vocab_size, np.random.default_rng(seed))
    own = random_id_prompt_array(n, workload.input_tokens - src.shared_prefix.tokens, src.vocab_size,
                                 np.random.default_rng(seed))
    prefixes, groups = shared_prefixes(src.shared_prefix, n, src.vocab_size, seed)
    return PromptArray(np.concatenate([prefixes[groups].astype(own.ids.dtype), own.ids], axis=1))


PREFIX_STREAM = 0x5AFE
"""Seed stream of the shared prefixes and their group order: apart from the prompts' own ids, so a workload's own
ids are those of the same workload without shared prefixes at `input_tokens - tokens`."""


def shared_prefixes(sp: SharedPrefix, n: int, vocab_size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(groups × tokens prefix ids, each of the `n` requests' group): the groups take equal shares (counts differ by
    at most one), in a seeded order."""
    rng = np.random.default_rng([seed, PREFIX_STREAM])
    low = random_id_low(vocab_size)
    prefixes = rng.integers(low, vocab_size, size=(sp.groups, sp.tokens), dtype=np.int64)
    groups = rng.permutation(np.arange(n) % sp.groups)
    return prefixes, groups


class PromptArray(Sequence[Prompt]):
    """Token-id prompts of one length in one (n, input_tokens) integer array; items are built on access, item i
    with source_row `first_row + i * row_step` (the draw it is; a slice keeps its items' rows)."""

    def __init__(self, ids: np.ndarray, first_row: int = 0, row_step: int = 1) -> None:
        self.ids = ids
        self.first_row, self.row_step = first_row, row_step

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    @overload
    def __getitem__(self, i: int) -> Prompt: ...

    @overload
    def __getitem__(self, i: slice) -> "PromptArray": ...

    def __getitem__(self, i: Union[int, slice]) -> Union[Prompt, "PromptArray"]:
        if isinstance(i, slice):
            rows = range(self.first_row, self.first_row + len(self) * self.row_step, self.row_step)[i]
            return PromptArray(self.ids[i], rows.start, rows.step)
        k = i + len(self) if i < 0 else i
        return Prompt(input_ids=tuple(self.ids[i].tolist()), source_row=self.first_row + k * self.row_step)


def random_id_prompt_array(n: int, input_tokens: int, vocab_size: int, rng: np.random.Generator) -> PromptArray:
    """`random_id_prompts` (same draws, same prompts) stored as one int32 array."""
    low = random_id_low(vocab_size)
    dtype = np.int32 if vocab_size < 2**31 else np.int64
    out = np.empty((n, input_tokens), dtype=dtype)
    for r in range(n):
        out[r] = rng.integers(low, vocab_size, size=input_tokens, dtype=np.int64)
    return PromptArray(out)


def random_id_prompts(n: int, input_tokens: int, vocab_size: int, rng: np.random.Generator) -> list[Prompt]:
    """`n` prompts of exactly `input_tokens` ids drawn uniformly from [RANDOM_ID_LOW, vocab_size), prompt i with
    source_row i (the i-th draw).

    Vocabularies too small for that range (toy models) draw from [vocab_size // 4, vocab_size) instead.
    """
    low = random_id_low(vocab_size)
    out: list[Prompt] = []
    for i in range(n):
        # one row at a time keeps peak memory at one prompt for long inputs × many requests
        row = rng.integers(low, vocab_size, size=input_tokens, dtype=np.int64)
        out.append(Prompt(input_ids=tuple(row.tolist()), source_row=i))
    return out


def load_jsonl_prompts(path: pathlib.Path) -> list[Prompt]:
    """Every prompt of a JSONL file (or a JSON array of the same objects): `prompt` (str) or `input_ids` (list of
    ints) per row, each with its row's ordinal as source_row."""
    return [p for _, p in load_jsonl_rows(path)]


MAX_PROMPT_TOKENS = 1_000_000
"""Most ids one prompt may hold: the spec's bound on a token count (cluster/config/workload.py TokenCount)."""
MAX_TOKEN_ID = 2**31 - 1
"""Largest token id accepted before the model's vocabulary is known: no vocabulary is larger, and ids are int32."""
JSONL_EXPECTED = "one JSON object per line (or a JSON array of objects) with 'prompt' or 'input_ids'"


def load_jsonl_rows(path: pathlib.Path) -> list[tuple[int, Prompt]]:
    """(line number, prompt) for every prompt of a prompt file (preflight names the line of a prompt it refuses)."""
    raw = read_source_text(path, DatasetError, "prompt file")
    prompts = [(rec.line, _parse_row(path, rec))
               for rec in json_records(path, raw, DatasetError, JSONL_EXPECTED)]
    if not prompts:
        raise DatasetError(f"{path}: no prompts (expected {JSONL_EXPECTED})", file=str(path),
                           expected=JSONL_EXPECTED)
    return prompts


def _parse_row(path: pathlib.Path, rec: SourceRecord) -> Prompt:
    obj = rec.value

    def bad(message: str, field: Optional[str] = None, expected: str = JSONL_EXPECTED) -> DatasetError:
        return row_error(DatasetError, path, rec.line, rec.row, message, field, expected)

    if not isinstance(obj, dict):
        raise bad(f"expected a JSON object with 'prompt' or 'input_ids', got {type(obj).__name__}")
    if "input_ids" in obj and "prompt" in obj:  # which one would be sent is a guess: refuse, as traces do
        raise bad("expected exactly one of 'prompt', 'input_ids', got both", "input_ids",
                  "exactly one of 'prompt', 'input_ids'")
    if "input_ids" in obj:
        ids = obj["input_ids"]
        if (
            not isinstance(ids, list)
            or not ids
            or len(ids) > MAX_PROMPT_TOKENS
            or not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t <= MAX_TOKEN_ID for t in ids)
        ):
            raise bad(f"field 'input_ids' must be a non-empty list of at most {MAX_PROMPT_TOKENS} non-negative "
                      f"integers up to {MAX_TOKEN_ID}", "input_ids",
                      f"a list of 1-{MAX_PROMPT_TOKENS} token ids in [0, {MAX_TOKEN_ID}]")
        return Prompt(input_ids=tuple(ids), source_row=rec.row)
    if "prompt" in obj:
        text = obj["prompt"]
        if not isinstance(text, str) or not text:
            raise bad("field 'prompt' must be a non-empty string", "prompt", "a non-empty string")
        return Prompt(text=text, source_row=rec.row)
    raise bad(f"expected field 'prompt' (string) or 'input_ids' (list of ints), got keys {shown(sorted(obj), 200)}")


def sample_jsonl(prompts: list[Prompt], n: int, rng: np.random.Generator) -> list[Prompt]:
    """`n` prompts: a seeded permutation of the file's prompts, cycled (each pass reshuffled) when n exceeds them."""
    out: list[Prompt] = []
    while len(out) < n:
        order = rng.permutation(len(prompts))
        out.extend(prompts[int(i)] for i in order[: n - len(out)])
    return out


def trace_prompts(rows: Sequence[TraceRow], vocab_size: int, rng: np.random.Generator) -> list[Prompt]:
    """One prompt per row: seeded random ids of its input length, its output length as max_tokens, its offset from
    the first row as arrival_s, the row's ordinal in the trace as source_row."""
    t0 = rows[0].timestamp_s if rows else 0.0
    out = []
    for r in rows:
        (p,) = random_id_prompts(1, r.input_tokens, vocab_size, rng)
        out.append(Prompt(input_ids=p.input_ids, max_tokens=r.output_tokens, arrival_s=r.timestamp_s - t0,
                          source_row=r.row))
    return out
