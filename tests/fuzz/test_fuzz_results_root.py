"""Fuzz the results root on disk: a valid dataset written by the store's own writer, mutated on disk, then read by
every read path (the store, the DuckDB views `results show/query` use, compare's runs table and the readers of the
stored spec and resolved args behind its notes, capacity's stored search, listing).

Invariants: only sglbench's own errors escape, each read ends within its deadline, and a read either returns
exactly what the valid dataset holds or is refused: no row of a mutated file is ever returned as valid
(experiment.json is plain JSON without a checksum: an edit that leaves it a JSON object is read as written, and a
reader of the stored spec then returns its own type or refuses; the "spec" mutation sets one value in the spec,
at any depth, to another JSON value or adds a key, which is what another sglbench version or a hand edit writes).
CI runs budget(40) examples; `bash scripts/fuzz.sh -k results_root` runs it longer.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st

from cluster.analysis.capacity import search_of
from cluster.analysis.comparison import resolved_cap_problems, served_devices, unintended_differences
from cluster.analysis.query import compare_table, query
from cluster.dataset.store import DatasetStore, list_experiments
from cluster.errors import SglbenchError
from cluster.analysis.results import Results
from tests.fuzz.fuzzing import FUZZ, budget
from tests.fuzz.results_root import write_dataset

SHOW_SQL = "SELECT * EXCLUDE (variant), variant FROM runs ORDER BY run_key"
DEADLINE_S = 10.0


def _reads(root: Path) -> dict[str, Callable[[], Any]]:
    r = str(root)
    return {
        "runs": lambda: DatasetStore(r, "fz").read_table("runs"),
        "requests": lambda: DatasetStore(r, "fz").read_table("requests"),
        "chunks": lambda: DatasetStore(r, "fz").read_table("chunks", columns=["run_key", "arrival_ns"]),
        "finished": lambda: DatasetStore(r, "fz").finished_run_keys(),
        "meta": lambda: DatasetStore(r, "fz").read_experiment_meta(),
        "show": lambda: query(Results.open(r, "fz"), SHOW_SQL),
        "requests_view": lambda: query(Results.open(r, "fz"), "SELECT * FROM request_metrics ORDER BY run_key, request_index"),
        "compare": lambda: compare_table(Results.open(r, "fz")),
        "differences": lambda: unintended_differences(Results.open(r, "fz")),
        "caps": lambda: resolved_cap_problems(Results.open(r, "fz")),
        "devices": lambda: served_devices(Results.open(r, "fz")),
        "search": lambda: search_of(Results.open(r, "fz")),
        "list": lambda: list_experiments(r),
    }


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, pa.Table):
        return isinstance(b, pa.Table) and a.sort_by("run_key").equals(b.sort_by("run_key"))
    if isinstance(a, pd.DataFrame):
        return isinstance(b, pd.DataFrame) and a.equals(b)
    return bool(a == b)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("pristine")
    write_dataset(root, "fz", 40)
    return root, {name: read() for name, read in _reads(root).items()}


@dataclass(frozen=True)
class Mutation:
    kind: str
    target: int
    a: float
    b: int
    name: str


NAMES = st.text(st.characters(blacklist_characters="/\x00", blacklist_categories=["Cs"]), min_size=1, max_size=12)
KINDS = ["truncate", "flip", "other_table", "retype", "retag", "empty", "stray_file", "stray_dir", "symlink", "loop",
         "fifo", "file_to_dir", "meta", "spec"]
SPEC_READS = {"meta": dict, "differences": dict, "caps": list, "search": type(None)}
"""The reads an edited experiment.json may change, and the type each then returns when it does not refuse (the
spec's load has no search, so an edit may add one: SearchSpec is checked separately)."""
JSON_VALUES = [None, 0, -1, 3.5, "", "x", [], [1], {}, {"k": 1}, True]
MUTATIONS = st.builds(Mutation, st.sampled_from(KINDS),
                      st.integers(0, 63), st.floats(0.0, 0.999), st.integers(0, 255), NAMES)


def _files(root: Path) -> list[Path]:
    return sorted(p for p in (root / "fz").rglob("*.parquet") if p.is_file() and "_staging" not in p.parts)


def _apply(root: Path, m: Mutation) -> None:
    files = _files(root)
    if not files:
        return
    f = files[m.target % len(files)]
    dirs = sorted({p.parent for p in files} | {p.parent.parent for p in files} | {root / "fz"})
    where = dirs[m.target % len(dirs)]
    if m.kind == "truncate":
        f.write_bytes(f.read_bytes()[: int(f.stat().st_size * m.a)])
    elif m.kind == "flip":
        data = bytearray(f.read_bytes())
        if not data:
            return
        data[int(len(data) * m.a)] ^= 1 << (m.b % 8)
        f.write_bytes(bytes(data))
    elif m.kind == "other_table":
        other = files[(m.target + 1 + m.b) % len(files)]
        if other != f:
            shutil.copyfile(other, f)
    elif m.kind == "retype":
        try:
            t = pq.read_table(f)
        except (pa.ArrowException, OSError):
            return  # already mutated past reading
        if (t.schema.metadata or {}).get(b"fuzz") == b"retyped":
            return  # retyping back would be an edit of values in the right types, which no reader can tell
        i = m.b % t.num_columns
        col = t.column(i)
        new = col.cast(pa.string()) if not pa.types.is_string(col.type) else pa.array([7] * len(col), pa.int64())
        pq.write_table(t.set_column(i, t.field(i).name, new).replace_schema_metadata({"fuzz": "retyped"}), f)
    elif m.kind == "retag":  # a key column of a run's table file given another value of the right type
        try:
            t = pq.read_table(f)
        except (pa.ArrowException, OSError):
            return
        if "/runs/" in str(f) or (t.schema.metadata or {}).get(b"fuzz") == b"retyped":
            return  # a runs file is the run's own word: an edit of it in the right types is not detectable
        name = ("engine", "workload", "load_kind")[m.b % 3]
        i = t.schema.get_field_index(name)
        pq.write_table(t.set_column(i, t.field(i), pa.array([m.name] * t.num_rows, pa.string())), f)
    elif m.kind == "empty":
        f.write_bytes(b"")
    elif m.kind == "meta":
        meta = root / "fz" / "experiment.json"
        data = bytearray(meta.read_bytes())
        data[int(len(data) * m.a)] = m.b
        meta.write_bytes(bytes(data))
    elif m.kind == "spec":
        _edit_spec(root / "fz" / "experiment.json", m)
    elif m.kind == "file_to_dir":
        f.unlink()
        f.mkdir()
    else:
        stray = where / m.name
        if os.path.lexists(stray) or len(os.fsencode(m.name)) > 200:
            return
        if m.kind == "stray_file":
            stray.write_bytes(bytes([m.b]) * int(m.a * 64))
        elif m.kind == "stray_dir":
            stray.mkdir()
        elif m.kind == "symlink":
            stray.symlink_to(f)
        elif m.kind == "loop":
            stray.symlink_to(stray)
        else:
            os.mkfifo(stray)


def _edit_spec(meta: Path, m: Mutation) -> None:
    """Set one value in experiment.json's spec (picked by m.target among every object and list in it, key by m.b)
    to another JSON value, or add key m.name to an object."""
    try:
        doc = json.loads(meta.read_bytes())
    except ValueError:
        return  # a "meta" mutation already made it unreadable
    if not isinstance(doc, dict):
        return
    spots: list[Any] = [doc]
    k = 0
    while k < len(spots):
        node = spots[k]
        spots.extend(v for v in (node.values() if isinstance(node, dict) else node) if isinstance(v, (dict, list)))
        k += 1
    node = spots[m.target % len(spots)]
    value = JSON_VALUES[m.b % len(JSON_VALUES)]
    if isinstance(node, dict) and (not node or m.a < 0.25):
        node[m.name] = value
    elif isinstance(node, dict):
        node[sorted(node)[m.b % len(node)]] = value
    elif node:
        node[m.b % len(node)] = value
    meta.write_text(json.dumps(doc))


@settings(FUZZ, max_examples=budget(40))
@given(st.lists(MUTATIONS, min_size=1, max_size=3))
def test_fuzz_results_root(tmp_path: Path, pristine: tuple[Path, dict[str, Any]], mutations: list[Mutation]) -> None:
    src, want = pristine
    root = tmp_path / f"r{time.monotonic_ns()}"
    shutil.copytree(src, root)
    try:
        for m in mutations:
            _apply(root, m)
        for name, read in _reads(root).items():
            t0 = time.monotonic()
            try:
                got = read()
            except SglbenchError:
                got = None
            assert time.monotonic() - t0 < DEADLINE_S, (name, mutations)
            if got is not None and name in SPEC_READS and any(m.kind in ("meta", "spec") for m in mutations):
                from cluster.config.load import SearchSpec

                assert isinstance(got, (SPEC_READS[name], SearchSpec) if name == "search" else SPEC_READS[name]), (
                    name, mutations)
            elif got is not None:
                assert _same(want[name], got), (name, mutations)
    finally:
        shutil.rmtree(root, ignore_errors=True)
