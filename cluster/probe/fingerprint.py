"""Checkpoint identity for provenance: a fingerprint over config, index and shard headers, and the hub revision."""

from __future__ import annotations

import hashlib
import os
import re
from typing import Optional, Sequence

from cluster.input_files import decode_text
from cluster.probe.files import (INDEX_LIMIT_BYTES, METADATA_LIMIT_BYTES, CheckpointError, CheckpointReadError, clip,
                                 parse_object, present, read_bytes)

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
        if not present(path):
            continue
        data = read_bytes(path, name, limit_bytes=INDEX_LIMIT_BYTES if name == index_file else METADATA_LIMIT_BYTES)
        if name != index_file:  # a JSON file SGLang could not load is not fingerprinted as fine (the index is parsed)
            parse_object(decode_text(data, path, CheckpointReadError, name), path, name)
        h.update(f"{name}\0{hashlib.sha256(data).hexdigest()}\n".encode())
    for shard, digest in shard_header_sha256:
        h.update(f"{shard}\0{digest}\n".encode())
    return h.hexdigest()


def hub_revision(model_dir: str) -> Optional[str]:
    """The Hugging Face commit the files came from, when the directory says so: a hub cache snapshot
    (`…/snapshots/<sha>/`), or `huggingface-cli download --local-dir`'s `.cache/huggingface/download/
    config.json.metadata` (its first line is the commit). None otherwise: never guessed. A metadata file that is not
    what huggingface_hub writes (unreadable, not UTF-8, no commit on line 1) is a CheckpointError: a revision the
    probe cannot read is not reported as "not recorded"."""
    parts = os.path.normpath(os.path.abspath(model_dir)).split(os.sep)
    if len(parts) >= 2 and parts[-2] == "snapshots" and _REV.match(parts[-1]):
        return parts[-1]
    meta = os.path.join(model_dir, ".cache", "huggingface", "download", "config.json.metadata")
    if not present(meta):
        return None
    what = "hub download metadata"
    text = decode_text(read_bytes(meta, what, limit_bytes=METADATA_LIMIT_BYTES), meta, CheckpointReadError, what)
    first = text.split("\n", 1)[0].strip()
    if not _REV.match(first):
        raise CheckpointError(meta, f"line 1: {clip(first)} is not a commit", field="commit",
                              expected="a 40-hex-digit commit on line 1 (as huggingface_hub writes it)")
    return first
