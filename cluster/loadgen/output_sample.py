"""The output sample of a measured run: a deterministic 1-in-32 (at least 4) of its requests keep their output ids
and text, judged for NaN/empty/degenerate output (issue 15 item 4).

Why: `ignore_eos` throughput counts whatever tokens come back, and FlashInfer's CUTLASS FP4 GEMM produced NaN rows
only in mixed batches, within 1-4 rounds of 64 concurrent requests (sglang PR #20047), while the same prompt alone
was clean; a run that kept no output could not tell. Which requests are sampled depends on the request index only,
so every variant keeps the same prompts' outputs.
"""

from __future__ import annotations

from typing import Optional, Sequence

import pyarrow as pa

from cluster.input_files import JsonValue
from cluster.kernel.output_sample import OutputSample

SAMPLE_EVERY = 32
SAMPLE_AT_LEAST = 4
MAX_TEXT_CHARS = 2000
"""Stored text is cut here (the ids are kept whole: they are the evidence)."""

OUTPUT_SAMPLES_SCHEMA = pa.schema([
    pa.field("request_index", pa.int32(), nullable=False),
    pa.field("output_ids", pa.list_(pa.int64())),
    pa.field("output_text", pa.string()),
    pa.field("degenerate", pa.string()),
])
"""The `output_samples` table (after the store's KEY_FIELDS): a new table, so older datasets simply lack it and the
record schema version (part of every run key) stays."""


def sample_indices(n_requests: int, every: int = SAMPLE_EVERY, at_least: int = SAMPLE_AT_LEAST) -> frozenset[int]:
    """Request indices 0, s, 2s, … with stride s = min(every, n // at_least) (all of them when n ≤ at_least)."""
    if n_requests <= at_least:
        return frozenset(range(n_requests))
    stride = max(1, min(every, n_requests // at_least))
    return frozenset(range(0, n_requests, stride))


def samples_table(samples: Sequence[OutputSample]) -> pa.Table:
    rows = [{"request_index": s.request_index, "output_ids": list(s.output_ids) if s.output_ids is not None else None,
             "output_text": s.text[:MAX_TEXT_CHARS], "degenerate": s.degenerate()} for s in samples]
    return pa.Table.from_pylist(rows, schema=OUTPUT_SAMPLES_SCHEMA)


def sample_verdict(samples: Sequence[OutputSample]) -> tuple[Optional[str], dict[str, JsonValue]]:
    """The invalid reason when any sampled output degenerates (None otherwise) and the evidence for provenance."""
    bad = [(s, why) for s in samples if (why := s.degenerate()) is not None]
    evidence: dict[str, JsonValue] = {
        "every": SAMPLE_EVERY, "at_least": SAMPLE_AT_LEAST, "indices": sorted(s.request_index for s in samples),
        "degenerate": [{"request_index": s.request_index, "reason": why,
                        "output_ids_head": list(s.output_ids[:32]) if s.output_ids else None,
                        "text_head": s.text[:200]} for s, why in bad],
    }
    if not bad:
        return None, evidence
    first = bad[0]
    return (f"{len(bad)} of {len(samples)} sampled outputs are garbage (request {first[0].request_index}: "
            f"{first[1]}): its throughput counts unusable tokens (table output_samples holds the ids)"), evidence
