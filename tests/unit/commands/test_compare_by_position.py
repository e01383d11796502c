"""`sglbench results compare EXP --by position`: acceptance per draft position as a table (estimate [95% CI]) and as
numbers in json; exit 2 with the reason when no request carries a histogram."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from cluster.cli import app
from tests.unit.analysis.test_comparison import build_dataset

ENV = {"COLUMNS": "200", "TERMINAL_WIDTH": "200"}


def test_by_position_table_and_json(tmp_path: Path) -> None:
    root = str(tmp_path)
    build_dataset(root, "pos", steps=[1, 3], conc=(2,), repeats=1, n_requests=30, out_tokens=20)
    res = CliRunner().invoke(app, ["results", "compare", "pos", "--root", root, "--by", "position"], env=ENV)
    assert res.exit_code == 0, res.output
    assert "by draft position (simulated engine)" in res.output and "Wilson score 95 %" in res.output
    assert "P(accept k | k-1)" in res.output and "nextn-3" in res.output
    res = CliRunner().invoke(app, ["results", "compare", "pos", "--root", root, "--by", "position",
                                   "--format", "json"], env=ENV)
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    # nextn-1: one position; nextn-3: three; the baseline sends no histogram
    assert sorted((r["variant"], r["position"]) for r in rows) == [("nextn-1", 1), ("nextn-3", 1), ("nextn-3", 2),
                                                                   ("nextn-3", 3)]
    for r in rows:
        assert r["accept_rate_lo"] <= r["accept_rate"] <= r["accept_rate_hi"]
        assert r["steps_accepting"] <= r["steps_reaching"]


def test_no_histogram_is_exit_2_saying_why(tmp_path: Path) -> None:
    root = str(tmp_path)
    build_dataset(root, "plain", steps=[], conc=(2,), repeats=1, n_requests=8, out_tokens=8)
    res = CliRunner().invoke(app, ["results", "compare", "plain", "--root", root, "--by", "position"], env=ENV)
    assert res.exit_code == 2 and "carries spec_correct_drafts_histogram" in res.output, res.output
