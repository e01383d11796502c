"""Tuning artifacts on disk: content hashing, `<root>/_artifacts/<kind>/<hash16>/` with a manifest, a reuse index.

Stdlib plus the dataset's one atomic write (cluster/dataset/atomic.py). The artifact root is a local or mounted
path that the GPU nodes see at the same path, because a server reads the artifact directly (SGLANG_CACHE_DIR /
SGLANG_MOE_CONFIG_DIR point into it).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Mapping, Optional

from cluster.dataset.atomic import WriteError, atomic_write, move_into_place, write_error, write_synced
from cluster.errors import EnvironmentFault
from cluster.input_files import JsonObject, JsonValue

ARTIFACTS_DIR = "_artifacts"
INDEX_FILE = "index.json"
MANIFEST_FILE = "manifest.json"
MANIFEST_VERSION = 1

IndexEntries = dict[str, dict[str, str]]
"""index.json: a reuse key's id -> {"kind", "hash", "path"} of the artifact stored under it."""


class ArtifactError(EnvironmentFault):
    """An artifact that is missing, corrupt, or cannot be stored."""


def content_hash(files: Mapping[str, bytes]) -> str:
    """sha256 over sorted (relative path, bytes), each length-prefixed so no two file sets collide by concatenation."""
    h = hashlib.sha256()
    for rel in sorted(files):
        name = rel.replace(os.sep, "/").encode()
        data = files[rel]
        h.update(len(name).to_bytes(8, "little") + name + len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def read_tree(root: Path, relpaths: Optional[list[str]] = None) -> dict[str, bytes]:
    """Files under root (or just `relpaths`), keyed by '/'-separated relative path; the manifest is never included."""
    root = Path(root)
    if relpaths is None:
        relpaths = sorted(str(p.relative_to(root)).replace(os.sep, "/") for p in root.rglob("*") if p.is_file())
    return {rel: (root / rel).read_bytes() for rel in relpaths if rel != MANIFEST_FILE}


def key_id(key: JsonObject) -> str:
    """Stable id of a reuse key (sha256 of its canonical JSON)."""
    blob = json.dumps(dict(key), sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()


@dataclass(frozen=True)
class TuningArtifact:
    """One stored artifact; `hash` goes into every run's provenance (`tuning_artifact`)."""

    kind: str
    hash: str
    path: str
    key: dict[str, JsonValue]
    files: tuple[str, ...]
    created_unix_s: float
    producer_variant: str
    reused: bool = False
    details: dict[str, JsonValue] = field(default_factory=dict)
    """Producer facts: tuning time, GPU ids used, per-batch timings, shapes."""

    @property
    def hash16(self) -> str:
        return self.hash[:16]

    def to_json(self) -> dict[str, JsonValue]:
        d = asdict(self)
        d["files"] = list(self.files)
        return d


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
    tmp.write_bytes(data)
    os.replace(tmp, path)


class ArtifactStore:
    """`<dataset root>/_artifacts/`: one directory per (kind, content hash) and an index from key id to it."""

    def __init__(self, dataset_root: str) -> None:
        if "://" in dataset_root:
            raise ArtifactError(f"dataset root {dataset_root!r}: tuning artifacts need a local or mounted path that "
                                "the GPU nodes see (servers read them directly); use a shared-filesystem path")
        self.root = Path(dataset_root) / ARTIFACTS_DIR

    def artifact_dir(self, kind: str, hash_hex: str) -> Path:
        return self.root / kind / hash_hex[:16]

    def staging_dir(self, label: str) -> Path:
        """A fresh empty directory for a producer to write into (on the same filesystem, so a rename is cheap)."""
        d = self.root / "_staging" / f"{label}-{uuid.uuid4().hex[:8]}"
        d.mkdir(parents=True)
        return d

    # ---------------------------------------------------------------- index
    def _index_path(self) -> Path:
        return self.root / INDEX_FILE

    def read_index(self) -> IndexEntries:
        try:
            doc = json.loads(self._index_path().read_text())
        except (OSError, ValueError):
            return self.rebuild_index()
        return doc if isinstance(doc, dict) else {}

    def rebuild_index(self) -> IndexEntries:
        """Index recovered from the manifests (when index.json is missing or unreadable)."""
        out: IndexEntries = {}
        if not self.root.is_dir():
            return out
        for m in sorted(self.root.glob(f"*/*/{MANIFEST_FILE}")):
            try:
                doc = json.loads(m.read_text())
                out[key_id(doc["key"])] = {"kind": doc["kind"], "hash": doc["hash"], "path": str(m.parent)}
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return out

    def _add_to_index(self, key: JsonObject, art: TuningArtifact) -> None:
        idx = self.read_index()
        idx[key_id(key)] = {"kind": art.kind, "hash": art.hash, "path": art.path}
        atomic_write(self._index_path(), json.dumps(idx, indent=1, sort_keys=True).encode())

    # ---------------------------------------------------------------- put / get
    def put(self, kind: str, key: JsonObject, files: Mapping[str, bytes], producer_variant: str,
            details: Optional[JsonObject] = None) -> TuningArtifact:
        """Archive `files` (relative path → bytes) as a content-addressed artifact and index it under `key`."""
        if not files:
            raise ArtifactError(f"{kind} produced no files to archive (producer variant {producer_variant!r})")
        for rel in files:
            p = Path(rel)
            if p.is_absolute() or ".." in p.parts or rel == MANIFEST_FILE:
                raise ArtifactError(f"artifact file name {rel!r} must be a relative path inside the artifact")
        digest = content_hash(files)
        final = self.artifact_dir(kind, digest)
        art = TuningArtifact(kind=kind, hash=digest, path=str(final), key=dict(key), files=tuple(sorted(files)),
                             created_unix_s=time.time(), producer_variant=producer_variant,
                             details=dict(details or {}))
        if not (final / MANIFEST_FILE).is_file():
            # every file written and synced in a hidden directory beside the final one, then one rename
            tmp = final.parent / f".{final.name}.{uuid.uuid4().hex[:8]}.tmp"
            manifest = {"manifest_version": MANIFEST_VERSION, **art.to_json()}
            blobs = {**files, MANIFEST_FILE: json.dumps(manifest, indent=1, sort_keys=True, default=str).encode()}
            try:
                for rel, data in blobs.items():
                    try:
                        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
                    except OSError as e:
                        raise write_error(tmp / rel, e, "create directory for") from e
                    write_synced(tmp / rel, data)
                move_into_place(tmp, final)
            except WriteError:
                shutil.rmtree(tmp, ignore_errors=True)
                if not (final / MANIFEST_FILE).is_file():
                    raise
                # an identical artifact appeared meanwhile (same content, same name): keep that one
        else:
            art = self.load(final)
        self._add_to_index(key, art)
        return art

    def load(self, path: Path) -> TuningArtifact:
        try:
            doc = json.loads((Path(path) / MANIFEST_FILE).read_text())
            return TuningArtifact(kind=doc["kind"], hash=doc["hash"], path=str(path), key=doc["key"],
                                  files=tuple(doc["files"]), created_unix_s=float(doc["created_unix_s"]),
                                  producer_variant=doc["producer_variant"], details=doc.get("details") or {})
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ArtifactError(f"{path}/{MANIFEST_FILE}: unreadable artifact manifest ({e})") from None

    def verify(self, art: TuningArtifact) -> bool:
        """True when every listed file is present and the content hash still matches the manifest."""
        try:
            files = read_tree(Path(art.path), list(art.files))
        except OSError:
            return False
        return content_hash(files) == art.hash

    def find(self, key: JsonObject) -> Optional[TuningArtifact]:
        """The verified artifact stored under this exact key, or None (a corrupt one is ignored, not reused)."""
        entry = self.read_index().get(key_id(key))
        if not entry:
            return None
        try:
            art = self.load(Path(entry["path"]))
        except ArtifactError:
            return None
        if art.key != dict(json.loads(json.dumps(dict(key), default=str))) or not self.verify(art):
            return None
        return TuningArtifact(**{**art.__dict__, "reused": True})
