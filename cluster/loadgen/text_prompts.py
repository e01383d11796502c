"""Real-text prompts: a local corpus tokenized with the model's own tokenizer, cut to exact input lengths.

Random token ids make speculative acceptance unrealistically low and repeated text makes it high; natural text
tokenized by the served model's tokenizer is what a deployment sees. The corpus is a UTF-8 text file (or a JSONL
file with a "text"/"prompt" field per line). It is tokenized once; prompt i is a window of exactly
`input_tokens` ids starting at a seeded offset, sent as token ids (exact length) with its decoded text alongside
(for the chat API, which re-tokenizes). Tokenizer: `tokenizer.json` (the fast-tokenizer file every HF model
ships) read with the `tokenizers` package; nothing is downloaded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import numpy as np

from cluster.engines.base import Prompt
from cluster.errors import PromptSourceError
from cluster.loadgen.lengths import INPUT_STREAM, draw_lengths, length_rng
from cluster.spec.models import LengthDist, TextPrompts, WorkloadSpec


class TextPromptError(PromptSourceError):
    """The corpus or tokenizer cannot produce the requested prompts."""


def tokenizer_file(tokenizer: Optional[str], model_path: str, base_dir: Path) -> Path:
    """The tokenizer.json a text workload tokenizes with (prompts.tokenizer, else the model's directory)."""
    cand = Path(tokenizer or model_path)
    if not cand.is_absolute():
        cand = base_dir / cand
    f = cand / "tokenizer.json" if cand.is_dir() else cand
    if not f.is_file():
        where = "prompts.tokenizer" if tokenizer else "model.path"
        raise TextPromptError(f"{f}: no tokenizer.json (from {where}); the text prompt source tokenizes with the "
                              "model's own fast tokenizer — set prompts.tokenizer to a directory that has one",
                              file=str(f), field=where, expected="a tokenizer.json file or a directory holding one")
    return f


def _corpus_text(path: Path) -> str:
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as e:
        raise TextPromptError(f"{path}: cannot read the corpus: {e.strerror or e}", file=str(path)) from None
    except UnicodeDecodeError:
        raise TextPromptError(f"{path}: the corpus is not UTF-8 text", file=str(path)) from None
    if path.suffix == ".jsonl":
        parts = []
        for i, line in enumerate(raw.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj: Any = json.loads(line)
            except ValueError:
                raise TextPromptError(f"{path}:{i}: not a JSON object") from None
            text = obj.get("text") or obj.get("prompt") if isinstance(obj, dict) else None
            if not isinstance(text, str):
                raise TextPromptError(f"{path}:{i}: expected a string field 'text' or 'prompt'")
            parts.append(text)
        raw = "\n\n".join(parts)
    return raw


def build_text_prompts(workload: WorkloadSpec, n: int, seed: int, base_dir: Path, model_path: str) -> list[Prompt]:
    from tokenizers import Tokenizer

    src = workload.prompts
    assert isinstance(src, TextPrompts) and src.path is not None
    corpus_path = Path(src.path) if Path(src.path).is_absolute() else base_dir / src.path
    tok = Tokenizer.from_file(str(tokenizer_file(src.tokenizer, model_path, base_dir)))
    ids = tok.encode(_corpus_text(corpus_path), add_special_tokens=False).ids
    need = workload.input_tokens_max()
    assert need is not None  # the spec refuses input_tokens 'dataset' for a corpus
    if len(ids) < need:
        raise TextPromptError(f"{corpus_path}: the corpus has {len(ids)} tokens, fewer than input_tokens={need}")
    corpus = np.asarray(ids, dtype=np.int64)
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, len(corpus) - need + 1, size=n)
    if isinstance(workload.input_tokens, LengthDist):
        sizes = draw_lengths(workload.input_tokens, n, length_rng(seed, INPUT_STREAM)).tolist()
    else:
        sizes = [need] * n
    out = []
    for i, (s, size) in enumerate(zip(starts, sizes)):
        window = corpus[s: s + size].tolist()
        out.append(Prompt(input_ids=tuple(window), text=tok.decode(window), source_row=i))
    return out
