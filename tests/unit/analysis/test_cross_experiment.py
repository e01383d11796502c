"""Two experiments compared point for point: matching by workload shape, load point and variant; the regress gate's
exit codes (0 none, 1 a significant slowdown beyond the threshold, 2 nothing to judge)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from cluster.analysis.cross_experiment import compare_experiments, parse_fraction, regressions
from cluster.cli import app
from cluster.errors import UserError
from cluster.analysis.results import Results
from tests.unit.analysis.test_comparison import build_dataset


def _pair(root: str, new_speed: float, *, repeats: int = 3, seed_b: int = 1, out_b: int = 32) -> None:
    build_dataset(root, "base", other="tuned", steps=[], conc=(1, 4), repeats=repeats, n_requests=24,
                  out_tokens=32, seed=0)
    build_dataset(root, "new", other="tuned", steps=[], conc=(1, 4), repeats=repeats, n_requests=24,
                  out_tokens=out_b, seed=seed_b, speed={"baseline": new_speed, "tuned": new_speed})


def test_matches_points_and_finds_a_known_slowdown(tmp_path: Path) -> None:
    root = str(tmp_path)
    _pair(root, 0.7)
    df = compare_experiments(Results.open(root, "base"), Results.open(root, "new"), n_boot=400)
    assert len(df) == 4 and set(df["variant"]) == {"baseline", "tuned"} and set(df["load_value"]) == {1.0, 4.0}
    assert (df["output_tok_s_verdict"] == "slower").all()
    assert df["output_tok_s_ratio"].between(0.6, 0.8).all()
    assert (df["output_tok_s_ratio_hi"] < 1).all() and (df["output_tok_s_ratio_lo"] > 0.5).all()
    assert (df["output_tok_s_new"] < df["output_tok_s_base"]).all() and (df["output_tok_s_repeats"] == "3/3").all()
    assert df.attrs["unmatched"] == []
    found = regressions(df, 0.05)
    assert {(r.metric, r.point.split()[-1]) for r in found} >= {("output_tok_s", "baseline"), ("output_tok_s", "tuned")}
    assert regressions(df, 0.5) == []  # a 30 % slowdown is within a 50 % allowance


def test_a_changed_workload_shape_is_not_matched(tmp_path: Path) -> None:
    root = str(tmp_path)
    _pair(root, 1.0, out_b=16)  # same workload name, other output length: a different workload
    with pytest.raises(UserError, match="share no point"):
        compare_experiments(Results.open(root, "base"), Results.open(root, "new"), n_boot=200)


def test_regress_exit_codes(tmp_path: Path) -> None:
    root = str(tmp_path)
    _pair(root, 0.7)
    runner = CliRunner()
    slow = runner.invoke(app, ["results", "regress", "base", "new", "--root", root, "--max-slowdown", "5%",
                               "--n-boot", "300"])
    assert slow.exit_code == 1, slow.output
    assert "REGRESSION" in slow.output and "output_tok_s" in slow.output
    same = runner.invoke(app, ["results", "regress", "base", "base", "--root", root, "--n-boot", "300"])
    assert same.exit_code == 0, same.output
    assert "0 regression(s)" in same.output
    allowed = runner.invoke(app, ["results", "regress", "base", "new", "--root", root, "--max-slowdown", "50%",
                                  "--n-boot", "300"])
    assert allowed.exit_code == 0, allowed.output
    bad = runner.invoke(app, ["results", "regress", "base", "new", "--root", root, "--max-slowdown", "five"])
    assert bad.exit_code == 2 and "--max-slowdown" in bad.output


def test_regress_with_single_repeats_cannot_judge(tmp_path: Path) -> None:
    root = str(tmp_path)
    _pair(root, 0.7, repeats=1)
    res = CliRunner().invoke(app, ["results", "regress", "base", "new", "--root", root, "--n-boot", "200"])
    assert res.exit_code == 2 and "nothing can be judged" in res.output


def test_compare_two_experiments_table_fits_80_columns(tmp_path: Path) -> None:
    root = str(tmp_path)
    _pair(root, 0.7)
    res = CliRunner().invoke(app, ["results", "compare", "base", "new", "--root", root, "--n-boot", "1000"],
                             env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    assert "NEW/BASE" in res.output and "slower" in res.output and "…" not in res.output
    assert max(len(line) for line in res.output.splitlines()) <= 80


def test_parse_fraction() -> None:
    assert parse_fraction("5%") == pytest.approx(0.05) and parse_fraction("0.1") == pytest.approx(0.1)
    with pytest.raises(UserError, match="--max-slowdown"):
        parse_fraction("five")
    with pytest.raises(UserError, match="fraction"):
        regressions(pd.DataFrame(), 1.5)
