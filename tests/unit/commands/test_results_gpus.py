"""`results compare` (table, CSV, JSON, --ci) and `results recommend` state each deployment's GPUs, the per-GPU
figure beside the total, the endpoint fact, and the note when the compared deployments hold different GPU counts."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from typer.testing import CliRunner

from cluster.cli import app
from tests.unit.analysis.test_per_gpu import SPEC, _write

NOTE = "deployments hold different GPU counts: tp8 8, tp4 4, ext unknown (endpoint): compare per-GPU figures"


def _cli(root: Path, *args: str) -> str:
    res = CliRunner().invoke(app, ["results", args[0], "gpus", *args[1:], "--root", str(root)],
                             env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    return res.output


def test_the_compare_table_shows_gpus_and_tok_s_per_gpu_and_the_note(tmp_path: Path) -> None:
    _write(tmp_path)
    out = _cli(tmp_path, "compare")
    header = next((line for line in out.splitlines() if "variant" in line and "ok/f/i" in line), None)
    if header is None:
        # the rows as blocks (print_table's layout when the console is narrower than the table): in the full suite
        # the CLI's console was once narrower than the COLUMNS asked for; the same cells, one per line
        blocks = " ".join(out.split())
        tp4 = blocks[blocks.index("── c1 · tp4"):]
        assert tp4.index("GPUs 4") < tp4.index("tok/s 510.0") < tp4.index("tok/s/GPU 127.50")
        ext = blocks[blocks.index("── c1 · ext"):]
        assert ext.index("GPUs -") < ext.index("tok/s/GPU -")
    else:
        assert header.split()[:6] == ["load", "variant", "GPUs", "ok/f/i", "steady", "tok/s"]
        assert header.split()[6] == "tok/s/GPU"  # beside the total
        tp4 = next(line for line in out.splitlines() if line.split()[1:2] == ["tp4"]).split()
        assert tp4[2] == "4" and tp4[5] == "510.0" and tp4[6] == "127.50"  # (500 + 520) / 2 = 510, / 4 GPUs
        ext = next(line for line in out.splitlines() if line.split()[1:2] == ["ext"]).split()
        assert ext[2] == "-" and ext[6] == "-"  # an endpoint: GPUs not known, no division
    assert f"note {NOTE}" in " ".join(out.split())
    assert "not launched by sglbench" in out


def test_compare_csv_and_json_carry_gpus_the_endpoint_fact_and_the_note(tmp_path: Path) -> None:
    _write(tmp_path)
    rows = list(csv.DictReader(io.StringIO(_cli(tmp_path, "compare", "--format", "csv"))))
    by = {r["variant"]: r for r in rows}
    assert (by["tp8"]["gpus"], by["tp4"]["gpus"], by["ext"]["gpus"]) == ("8", "4", "")
    assert (by["tp8"]["launched_by_sglbench"], by["ext"]["launched_by_sglbench"]) == ("True", "False")
    assert float(by["tp8"]["output_tok_s_per_gpu"]) == 105.0  # (800 + 880) / 2 = 840, / 8 GPUs
    assert by["ext"]["output_tok_s_per_gpu"] == "" and by["ext"]["gpus_note"] == NOTE
    doc = {r["variant"]: r for r in json.loads(_cli(tmp_path, "compare", "--format", "json"))}
    assert (doc["tp4"]["gpus"], doc["ext"]["gpus"], doc["ext"]["launched_by_sglbench"]) == (4, None, False)
    assert doc["tp4"]["output_tok_s_per_gpu"] == 127.5 and doc["ext"]["output_tok_s_per_gpu"] is None
    assert doc["tp8"]["gpus_note"] == NOTE
    ci = {r["variant"]: r for r in json.loads(_cli(tmp_path, "compare", "--ci", "--n-boot", "200", "--format", "json"))}
    assert ci["tp8"]["gpus"] == 8 and ci["tp8"]["gpus_note"] == NOTE
    assert abs(ci["tp8"]["output_tok_s_per_gpu_hi"] - ci["tp8"]["output_tok_s_hi"] / 8) < 1e-9


def test_compare_ci_table_and_recommend_state_the_gpus(tmp_path: Path) -> None:
    _write(tmp_path)
    out = " ".join(_cli(tmp_path, "compare", "--ci", "--n-boot", "200").split())
    assert "GPUs" in out and "output tok/s per GPU" in out and f"note {NOTE}" in out
    doc = json.loads(_cli(tmp_path, "recommend", "--format", "json"))
    point = doc["points"][0]
    assert point["gpus_note"] == NOTE and NOTE in point["notes"]
    text = " ".join(_cli(tmp_path, "recommend").split())
    assert NOTE in text and "GPUs" in text


def test_deployments_of_one_gpu_count_keep_the_80_column_table_and_say_it_in_the_title(tmp_path: Path) -> None:
    # tp8 and a second tp8 (the spec's tp4 at tp 8): one count, so the title states it and the table stays narrow
    _write(tmp_path, SPEC.replace("  - {name: tp4, tp: 4}", "  - {name: tp4, tp: 8}").replace(
        '  - name: ext\n    deployment: {kind: endpoint, url: "http://127.0.0.1:9/"}\n', ""))
    res = CliRunner().invoke(app, ["results", "compare", "gpus", "--root", str(tmp_path)], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    assert "8 GPUs each" in " ".join(res.output.split()) and "note deployments" not in res.output
    header = next(line for line in res.output.splitlines() if "variant" in line and "ok/f/i" in line)
    assert "GPUs" not in header and "tok/s/GPU" not in header
    rows = list(csv.DictReader(io.StringIO(_cli(tmp_path, "compare", "--format", "csv"))))
    assert [float(r["output_tok_s_per_gpu"]) for r in rows] == [105.0, 63.75]  # 840 / 8; (500 + 520) / 2 / 8
