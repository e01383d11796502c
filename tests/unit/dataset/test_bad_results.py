"""The bad results-root corpus (tests/data/bad_results/): each case mutates a valid dataset written by the store's
own writer and runs one `sglbench results` command on it, which must exit 2 with one `error:` line naming the file
and the cause (or, where the command degrades, exit 0 with one `note` line naming them), no traceback, and leave
the dataset as it was (the readers stay read-only).

A case is `case.txt`: `# expect: command=<results subcommand> exit=<code> file=<path under the root> message=<text>`,
then `mutate: <op> <path> [<path or column>]` (ops below) or `root: <the --root given>`. `{base}`/`{base2}` stand
for the run key of the first run of exp1/exp2 (run keys are derived from the plan, so the corpus does not hold them).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.fuzz.results_root import write_dataset


CORPUS = Path(__file__).resolve().parents[2] / "data" / "bad_results"
CASES = sorted(p.name for p in CORPUS.iterdir()) if CORPUS.is_dir() else []
ARGS = {"show": ["exp1"], "query": ["exp1", "SELECT count(*) FROM request_metrics"], "list": [],
        "compare": ["exp1"], "report": ["exp1"]}


def _dataset(root: Path) -> dict[str, str]:
    return {"base": write_dataset(root, "exp1")[1][0].run_key, "base2": write_dataset(root, "exp2")[1][0].run_key}


def _mutate(root: Path, op: str, args: list[Path]) -> None:
    p = args[0]
    if op == "truncate":
        p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    elif op == "empty":
        p.write_bytes(b"")
    elif op == "flip_page":
        meta = pq.ParquetFile(p).metadata.row_group(0).column(0)
        data = bytearray(p.read_bytes())
        data[(meta.dictionary_page_offset or meta.data_page_offset) + meta.total_compressed_size - 2] ^= 0x04
        p.write_bytes(bytes(data))
    elif op == "status_int":
        t = pq.read_table(p)
        pq.write_table(t.set_column(t.schema.get_field_index("status"), "status", pa.array([7], pa.int64())), p)
    elif op == "copy":
        shutil.copyfile(args[0], args[1])
    elif op == "retag":  # the right type, another value: args[1] is the column's name
        t = pq.read_table(p)
        i = t.schema.get_field_index(args[1].name)
        pq.write_table(t.set_column(i, t.field(i), pa.array(["7"] * t.num_rows, t.field(i).type)), p)
    elif op == "claim_again":  # a second run of the same repeat, run under another declaration (another run key)
        t = pq.read_table(p)
        i = t.schema.get_field_index("run_key")
        key = "f" * 20
        pq.write_table(t.set_column(i, t.field(i), pa.array([key] * t.num_rows, t.field(i).type)),
                       p.with_name(f"{key}.parquet"))
    elif op == "write":
        p.write_text("a note\n")
    elif op == "mkdir":
        p.mkdir()
    elif op == "mkfifo":
        os.mkfifo(p)
    elif op == "loop":
        p.symlink_to(p)
    elif op == "replace_with_file":
        shutil.rmtree(p)
        p.write_text("not a table\n")
    elif op == "version99":  # a runs row another (newer) sglbench wrote
        t = pq.read_table(p)
        i = t.schema.get_field_index("schema_version")
        pq.write_table(t.set_column(i, t.field(i), pa.array([99], pa.int32())), p)
    elif op == "spec_extra":  # a field another sglbench version wrote into the stored spec
        doc = json.loads(p.read_text())
        p.write_text(json.dumps({**doc, "spec": {**doc["spec"], "new_field_from_v2": 1}}))
    elif op == "bytes":
        p.write_bytes(b'{"spec": "\xff\xfe"}')
    else:
        raise AssertionError(f"unknown op {op!r}")


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in root.rglob("*")}


def test_corpus_has_a_case_per_class() -> None:
    assert len(CASES) >= 16


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", CASES)
def test_bad_results_root_is_refused(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from cluster.cli import app

    root = tmp_path / "results"
    keys = _dataset(root)
    head, action = (CORPUS / case / "case.txt").read_text().format(**keys).splitlines()[:2]
    want = dict(part.split("=", 1) for part in head.removeprefix("# expect: ").split(" ", 4)[:4])
    want["message"] = head.split(" message=", 1)[1]
    given_root = str(root)
    if action.startswith("root: "):
        given_root = action.removeprefix("root: ")
    else:
        op, *paths = action.removeprefix("mutate: ").split(" ")
        _mutate(root, op, [root / p for p in paths])
    before = _snapshot(tmp_path)
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["results", want["command"], *ARGS[want["command"]], "--root", given_root])
    assert res.exit_code == int(want["exit"]), res.output
    assert "Traceback" not in res.output and "bug in sglbench" not in res.output, res.output
    if want["exit"] == "0":  # a degraded reading: the command's output stands, one note says what is missing
        notes = [ln for ln in res.output.splitlines() if ln.startswith("note ") and want["message"] in ln]
        assert len(notes) == 1 and str(root / want["file"]) in notes[0], res.output
        assert _snapshot(tmp_path) == before, "a degraded read changed the results root"
        return
    errors = [ln for ln in res.output.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1, res.output
    assert want["message"] in errors[0] and (not want["file"] or str(root / want["file"]) in errors[0]), errors[0]
    assert _snapshot(tmp_path) == before, "a refused read changed the results root"
