"""compare: a variant faster than the baseline but less accurate under load beyond the interval is shown with its
speed and never claimed (verdict, warning, accuracy_invalid); within the noise it keeps its verdict."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from cluster.analysis.accuracy import VERDICT_LESS_ACCURATE, eval_table
from cluster.analysis.comparison import compare_with_ci, compare_view
from cluster.analysis.recommend import recommend_results
from cluster.analysis.results import Results
from cluster.dataset.store import DatasetStore
from cluster.kernel.gate import PHASE_ALONE, PHASE_UNDER_LOAD
from cluster.kernel.eval_task import EvalAnswer, EvalItem
from tests.unit.analysis.test_comparison import build_dataset

ITEMS = [EvalItem(f"row{i}", i + 1, f"What is {i} + 0?", str(i)) for i in range(10)]


def _eval(variant: str, right_under_load: int) -> pa.Table:
    alone = [EvalAnswer(i.item_id, PHASE_ALONE, i.expected) for i in ITEMS]
    loaded = [EvalAnswer(i.item_id, PHASE_UNDER_LOAD, i.expected if n < right_under_load else "x", None, 1, True)
              for n, i in enumerate(ITEMS)]
    return eval_table("acc", variant, "sim", ITEMS, alone + loaded, True, ())


def _compare(tmp_path: Path, tuned_right: int):  # type: ignore[no-untyped-def]
    build_dataset(str(tmp_path), "acc", other="tuned", steps=[], speed={"tuned": 1.5}, repeats=3, conc=(8,))
    store = DatasetStore(str(tmp_path), "acc")
    store.write_variant_table("correctness", "baseline", "eval-a", _eval("baseline", 10))
    store.write_variant_table("correctness", "tuned", "eval-b", _eval("tuned", tuned_right))
    return compare_with_ci(Results.open(str(tmp_path), "acc"), n_boot=300).set_index("variant")


def test_faster_but_wrong_under_load_is_not_a_speed_claim(tmp_path: Path) -> None:
    df = _compare(tmp_path, 4)  # 4/10 under load against 10/10: difference -60 points [-83.2, -20.1]
    tuned = df.loc["tuned"]
    assert tuned["speedup_tok_s_verdict"] == VERDICT_LESS_ACCURATE == tuned["speedup_tpot_verdict"]
    assert tuned["speedup_tok_s"] > 1.3  # the speed is still shown
    assert "under load 4/10 = 40.0%" in tuned["accuracy_invalid"]
    assert any(w.startswith("invalid for speed claims: accuracy under load") for w in tuned["warnings"])
    assert df.loc["baseline", "accuracy_invalid"] == ""
    view = compare_view(df.reset_index())
    assert view.loc[view["variant"] == "tuned", "speedup tok/s"].iloc[0].endswith(f"({VERDICT_LESS_ACCURATE})")
    # recommend leaves it out as a gate failure: 1.5x faster, never the one to serve
    rec = recommend_results(Results.open(str(tmp_path), "acc"), n_boot=300).points[0]
    assert rec.serve != "tuned"
    assert any("tuned" in n and "invalid for speed claims: accuracy under load" in n for n in rec.notes), rec


def test_within_the_noise_the_speed_claim_stands(tmp_path: Path) -> None:
    df = _compare(tmp_path, 8)  # 8/10 against 10/10: [-51.0, +11.2] points, inside the noise
    assert df.loc["tuned", "speedup_tok_s_verdict"] == "faster" and df.loc["tuned", "accuracy_invalid"] == ""
    assert recommend_results(Results.open(str(tmp_path), "acc"), n_boot=300).points[0].serve == "tuned"


def test_no_eval_rows_no_mark(tmp_path: Path) -> None:
    build_dataset(str(tmp_path), "plain", other="tuned", steps=[], speed={"tuned": 1.5}, repeats=3, conc=(8,))
    df = compare_with_ci(Results.open(str(tmp_path), "plain"), n_boot=300).set_index("variant")
    assert df.loc["tuned", "speedup_tok_s_verdict"] == "faster" and df.loc["tuned", "accuracy_invalid"] == ""


def test_the_report_has_the_accuracy_section(tmp_path: Path) -> None:
    from cluster.analysis.report import build_report

    _compare(tmp_path, 4)
    page = build_report(Results.open(str(tmp_path), "acc"), str(tmp_path / "report"), n_boot=100).read_text()
    section = page[page.index("<h2>Accuracy under load</h2>"):]
    assert "4/10 = 40.0% [16.8%, 68.7%]" in section and "INVALID: less accurate than the baseline" in section
    assert "-60.0 [-83.2, -20.1]" in section  # tuned under load minus the baseline, in points
    assert VERDICT_LESS_ACCURATE in page  # the comparison table's speedup cell


def test_the_run_summary_flags_the_speedup_it_cannot_claim(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from cluster.cli import app

    _compare(tmp_path, 4)
    out = CliRunner().invoke(app, ["results", "compare", "acc", "--root", str(tmp_path)], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    tuned = next(line for line in out.output.splitlines() if " tuned " in f" {line} " and "c8" in line)
    assert tuned.rstrip().endswith("✗"), tuned
    assert "✗ not a speed claim tuned: accuracy under load 4/10 = 40.0%" in out.output
    base = next(line for line in out.output.splitlines() if "baseline*" in line)
    assert "✗" not in base
