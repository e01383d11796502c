"""Checkpoint identity for provenance: a fingerprint over config, index and shard headers, and the hub revision."""

from __future__ import annotations

import hashlib
import os
import re
from typing import Optional, Sequence

_REV = re.compile(r"^[0-9a-f]{40}$")

FINGERPRINT_FILES = ("config.json", "hf_quant_config.json", "generation_config.json")
"""Small JSON files hashed whole (when present) beside the index and every shard header. NVIDIA re-published its
Qwen3.5-397B-A17B-NVFP4 with a BF16 shared expert (KLD 0.109 → ~0.035): same name, different weights, and the
shard headers (dtypes, shapes) change with it."""


def checkpoint_fingerprint(model_dir: str, index_file: Optional[str], shard_header_sha256: Sequence[tuple[str, str]]
                           ) -> str:
    """SHA-256 over the JSON files above, the index and (shard name, header SHA-256) in shard order; no data read."""
    h = hashlib.sha256()
    for name in FINGERPRINT_FILES + ((index_file,) if index_file else ()):
        path = os.path.join(model_dir, name)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            continue
        h.update(f"{name}\0{hashlib.sha256(data).hexdigest()}\n".encode())
    for shard, digest in shard_header_sha256:
        h.update(f"{shard}\0{digest}\n".encode())
    return h.hexdigest()


def hub_revision(model_dir: str) -> Optional[str]:
    """The Hugging Face commit the files came from, when the directory says so: a hub cache snapshot
    (`…/snapshots/<sha>/`), or `huggingface-cli download --local-dir`'s `.cache/huggingface/download/
    config.json.metadata` (its first line is the commit). None otherwise: never guessed."""
    parts = os.path.normpath(os.path.abspath(model_dir)).split(os.sep)
    if len(parts) >= 2 and parts[-2] == "snapshots" and _REV.match(parts[-1]):
        return parts[-1]
    meta = os.path.join(model_dir, ".cache", "huggingface", "download", "config.json.metadata")
    try:
        with open(meta, encoding="utf-8") as f:
            first = f.readline().strip()
    except OSError:
        return None
    return first if _REV.match(first) else None
