"""Real-text prompts: a local corpus tokenized with the model's own tokenizer, cut to exact input lengths.

Random token ids make speculative acceptance unrealistically low and repeated text makes it high; natural text
tokenized by the served model's tokenizer is what a deployment sees. The corpus is a UTF-8 text file (or a JSONL
file with a "text"/"prompt" field per line). It is tokenized once; prompt i is a window of exactly
`input_tokens` ids starting at a seeded offset, sent as token ids (exact length) with its decoded text alongside
(for the chat API, which re-tokenizes); its source_row is i, the i-th seeded window. Tokenizer: `tokenizer.json`
(the fast-tokenizer file every HF model ships) read through cluster/input_files.py (a regular file, bounded) and
parsed with the `tokenizers` package; nothing is downloaded. Every failure is a TextPromptError naming the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

import numpy as np

from cluster.engines.base import Prompt
from cluster.errors import PromptSourceError
from cluster.input_files import check_path_text, read_input_text, resolve_input
from cluster.loadgen.lengths import INPUT_STREAM, draw_lengths, length_rng
from cluster.loadgen.source_files import json_records, read_source_text
from cluster.config.workload import LengthDist, WorkloadSpec
from cluster.config.prompts import TextPrompts

if TYPE_CHECKING:
    from tokenizers import Tokenizer

TOKENIZER_LIMIT_BYTES = 64 * 1024 * 1024
"""A tokenizer.json past this is refused (the largest public ones, with 256k-token vocabularies, are ~35 MB)."""


class TextPromptError(PromptSourceError):
    """The corpus or tokenizer cannot produce the requested prompts."""


def tokenizer_file(tokenizer: Optional[str], model_path: str, base_dir: Path) -> Path:
    """The tokenizer.json a text workload tokenizes with (prompts.tokenizer, else the model's directory): a regular
    file (symlinks followed, a loop named); the path is returned as given, so its directory is the tokenizer's."""
    where = "prompts.tokenizer" if tokenizer else "model.path"
    check_path_text(tokenizer or model_path, TextPromptError, "the tokenizer path", where)
    cand = Path(tokenizer or model_path)
    if not cand.is_absolute():
        cand = base_dir / cand
    f = cand / "tokenizer.json" if cand.is_dir() else cand
    if not f.exists() and not f.is_symlink():
        raise TextPromptError(f"{f}: no tokenizer.json (from {where}); the text prompt source tokenizes with the "
                              "model's own fast tokenizer — set prompts.tokenizer to a directory that has one",
                              file=str(f), field=where, expected="a tokenizer.json file or a directory holding one")
    resolve_input(f, TextPromptError, "tokenizer file", where)
    return f


def load_tokenizer(path: Path) -> "Tokenizer":
    """The tokenizer of a tokenizer.json, read bounded; TextPromptError naming the file when it cannot be parsed."""
    from tokenizers import Tokenizer

    text = read_input_text(path, TextPromptError, "tokenizer file", limit_bytes=TOKENIZER_LIMIT_BYTES)
    try:
        return Tokenizer.from_str(text)
    except BaseException as e:  # a bare Exception, or pyo3's PanicException (a BaseException), for a bad file
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        why = (str(e).splitlines() or [type(e).__name__])[0][:200]
        raise TextPromptError(f"{path}: not a tokenizer.json the tokenizers package can read ({why})",
                              file=str(path), expected="a Hugging Face fast-tokenizer tokenizer.json") from None


CORPUS_EXPECTED = "one JSON object per line (or a JSON array of objects) with a string field 'text' or 'prompt'"


def corpus_text(path: Path) -> str:
    """The corpus: the file's UTF-8 text, or for a .jsonl file each row's 'text' (else 'prompt') joined by a blank
    line."""
    raw = read_source_text(path, TextPromptError, "corpus")
    if path.suffix != ".jsonl":
        nul = raw.find("\x00")
        if nul != -1:  # JSON can only escape a NUL (refused where it is decoded); plain text holds it raw
            where = f"{path}:{raw.count(chr(10), 0, nul) + 1}"
            raise TextPromptError(f"{where}: the corpus holds a NUL character (byte {len(raw[:nul].encode())}), "
                                  "not text", file=where, expected="UTF-8 text without NUL")
        return _some_text(path, raw)
    parts = []
    for rec in json_records(path, raw, TextPromptError, CORPUS_EXPECTED):
        obj = rec.value
        key = "text" if isinstance(obj, dict) and "text" in obj else "prompt"
        text = obj.get(key) if isinstance(obj, dict) else None
        if not isinstance(text, str):
            where = f"{path}:{rec.line}"
            got = type(obj).__name__ if not isinstance(obj, dict) else f"{key}: {type(text).__name__}"
            raise TextPromptError(f"{where}: expected a string field 'text' or 'prompt' (got {got})", file=where,
                                  field=key, expected=CORPUS_EXPECTED)
        parts.append(text)
    return _some_text(path, "\n\n".join(parts))


def _some_text(path: Path, text: str) -> str:
    """The corpus text, refused when it has nothing but whitespace (no window could be drawn from it, and an empty
    file says its writer failed, not that it wants empty prompts)."""
    if not text.strip():
        raise TextPromptError(f"{path}: no text to draw prompts from (the corpus is "
                              f"{'empty' if not text else 'whitespace only'})", file=str(path),
                              expected="a corpus of UTF-8 text")
    return text


def build_text_prompts(workload: WorkloadSpec, n: int, seed: int, base_dir: Path, model_path: str) -> list[Prompt]:
    """`n` prompts of the workload's input lengths, each a seeded window of the tokenized corpus."""
    src = workload.prompts
    assert isinstance(src, TextPrompts) and src.path is not None
    corpus_path = Path(src.path) if Path(src.path).is_absolute() else base_dir / src.path
    tok = load_tokenizer(tokenizer_file(src.tokenizer, model_path, base_dir))
    ids = tok.encode(corpus_text(corpus_path), add_special_tokens=False).ids
    need = workload.input_tokens_max()
    assert need is not None  # the spec refuses input_tokens 'dataset' for a corpus
    if len(ids) < need:
        raise TextPromptError(f"{corpus_path}: the corpus has {len(ids)} tokens, fewer than input_tokens={need}",
                              file=str(corpus_path), field="input_tokens",
                              expected=f"a corpus of at least {need} tokens")
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
