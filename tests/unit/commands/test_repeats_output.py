"""`results show` and the run summary say where each point's repeats until sure stopped: a point whose interval
reached the target reads as narrow, one that ran out of repeats still wide reads as a warning; JSON carries the same
facts, read from a hand-built experiment.json."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import pytest
from typer.testing import CliRunner

from cluster.analysis.results import Results
from cluster.cli import app
from cluster.commands.repeats_output import point_line, recorded_repeats
from cluster.dataset.root import StoreError
from cluster.dataset.store import DatasetStore
from cluster.plan.repeats import PointRepeats
from tests.unit.analysis.test_comparison import build_dataset

NARROW = PointRepeats("base", "chat", "c4", "output_tps", True, "narrow", 3, 3, 0.43, 10.0, 3, 8)
WIDE = PointRepeats("nextn", "chat", "c4", "output_tps", True, "max", 8, 7, 42.04, 10.0, 3, 8)
UNFINISHED = PointRepeats("nextn", "chat", "c1", "output_tps", False, "too wide", 5, 5, 12.5, 10.0, 3, 8)


def _with_facts(root: str, name: str, facts: Any) -> None:
    store = DatasetStore(root, name)
    meta = store.read_experiment_meta() or {}
    meta["repeats_until"] = facts
    store.write_experiment_meta(meta)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> str:
    r = str(tmp_path_factory.mktemp("results"))
    build_dataset(r, "until", steps=[1, 2], repeats=2, conc=(1, 4), n_requests=8, out_tokens=8)
    _with_facts(r, "until", [asdict(NARROW), asdict(WIDE), asdict(UNFINISHED)])
    build_dataset(r, "plain", steps=[1, 2], repeats=2, conc=(1, 4), n_requests=8, out_tokens=8)
    return r


def test_lines_say_the_stop_reason_and_the_half_width_against_the_target() -> None:
    assert point_line(NARROW) == "base / chat / c4: narrow at 3 repeats: ±0.4 % ≤ ±10 %"
    # 7 ok of 8 (one failed repeat used one up), ±42.04 % rounds to ±42.0
    assert point_line(WIDE) == ("warning nextn / chat / c4: max 8 reached (7 ok): ±42.0 % > ±10 %: not sure, the "
                                "interval is wider than asked")
    assert point_line(UNFINISHED).startswith("warning nextn / chat / c1: not stopped after 5 repeats (the interval "
                                             "still too wide): ±12.5 % > ±10 %")


def test_show_prints_one_line_per_point_and_json_carries_the_facts(root: str) -> None:
    res = CliRunner().invoke(app, ["results", "show", "until", "--root", root], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "base / chat / c4: narrow at 3 repeats: ±0.4 % ≤ ±10 %" in res.output
    assert "warning nextn / chat / c4: max 8 reached (7 ok): ±42.0 % > ±10 %: not sure" in res.output
    res = CliRunner().invoke(app, ["results", "show", "until", "--root", root, "--format", "json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert len(out["runs"]) == 12  # 3 variants (baseline, nextn-1, nextn-2) x 2 loads x 2 repeats
    facts = {(f["variant"], f["load"]): f for f in out["repeats_until"]}
    assert facts["base", "c4"]["sure"] is True and facts["base", "c4"]["reason"] == "narrow"
    assert facts["nextn", "c4"]["sure"] is False and facts["nextn", "c4"]["half_width_pct"] == 42.04
    assert facts["nextn", "c4"]["repeats_done"] == 8 and facts["nextn", "c4"]["ok_repeats"] == 7


def test_an_experiment_without_until_shows_its_runs_as_before(root: str) -> None:
    res = CliRunner().invoke(app, ["results", "show", "plain", "--root", root, "--format", "json"])
    assert res.exit_code == 0, res.output
    assert isinstance(json.loads(res.output), list)
    assert recorded_repeats(Results.open(root, "plain")) == []


def test_a_malformed_entry_is_named(tmp_path: Any) -> None:
    r = str(tmp_path)
    build_dataset(r, "bad", steps=[1, 2], repeats=2, conc=(1,), n_requests=4, out_tokens=8)
    _with_facts(r, "bad", [{"variant": "base"}])
    with pytest.raises(StoreError, match=r"repeats_until\[0\] is not a point's facts"):
        recorded_repeats(Results.open(r, "bad"))


def test_the_run_summary_ends_with_the_points(root: str, capsys: pytest.CaptureFixture[str]) -> None:
    """What `sglbench run` and the Ray job print after an experiment: the compare table, then the points."""
    from cluster.commands.results import print_run_summary
    from cluster.config.loader import parse_spec_text
    from tests.unit.analysis.test_comparison import SPEC

    spec: Any = parse_spec_text(SPEC.format(name="until", other="nextn", steps=[1, 2], out=8, n=8, conc=[1, 4],
                                            repeats=2))
    print_run_summary(root, spec, {"ok": 12})
    out = capsys.readouterr().out
    assert "base / chat / c4: narrow at 3 repeats: ±0.4 % ≤ ±10 %" in out
    assert "warning nextn / chat / c1: not stopped after 5 repeats" in out
