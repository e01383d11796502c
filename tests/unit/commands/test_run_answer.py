"""What `sglbench run` ends with: the answer of `results recommend`, one line per load point, and in a pipe the
per-category tables as summary lines naming `compare --by category` (cluster/commands/run_answer.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from cluster.analysis.recommend import Recommendation, Recommendations
from cluster.commands.run_answer import answer_lines, category_summary_lines
from cluster.config.loader import parse_spec_text
from tests.unit.analysis.test_categories import SPEC as CATS_SPEC, _build


def _rec(workload: str, load: float, serve: str | None, because: str) -> Recommendation:
    nan = math.nan
    return Recommendation(workload, "concurrency", load, serve, None, because, nan, nan, nan, "-", True,
                          "whole-window output tok/s", ())


def test_answer_lines_one_per_load_point() -> None:
    rec = Recommendations((_rec("chat", 1, "nextn-2", "nextn-2 is 1.90× [1.80, 2.00] the baseline, significantly "
                                "faster"), _rec("chat", 8, None, "the data does not tell them apart"),
                           _rec("code", 1, "baseline", "every variant is significantly slower")),
                          (), "baseline", "")
    lines = answer_lines(rec, "demo", "/tmp/r")
    assert lines == [
        "answer (sglbench results recommend demo --root /tmp/r: the evidence and the depth schedule):",
        "answer chat c1: serve nextn-2: nextn-2 is 1.90× [1.80, 2.00] the baseline, significantly faster",
        "answer chat c8: nothing chosen: the data does not tell them apart",
        "answer code c1: serve baseline: every variant is significantly slower"]
    assert answer_lines(Recommendations((), (), None, ""), "demo", "r") == []


def test_category_summary_names_the_extremes_and_the_command() -> None:
    df = pd.DataFrame({"workload": ["w"] * 4, "load_kind": ["concurrency"] * 4, "load_value": [1.0, 1.0, 8.0, 8.0],
                       "variant": ["baseline", "nextn", "nextn", "nextn"], "category": ["code", "code", "chat", "code"],
                       "accept_length": [math.nan, 3.6, 2.5, 3.4]})
    lines = category_summary_lines(df, "category", "demo", "res")
    assert lines[0].startswith("by category: 4 rows (2 category value(s) x 2 variant(s) x 2 point(s))")
    assert lines[0].endswith("sglbench results compare demo --by category --root res")
    assert lines[1:] == ["by category nextn: accept length 2.50 (chat, c8) to 3.60 (code, c1)"]


SHAREGPT_SPEC = CATS_SPEC.replace("- {name: mixed, input_tokens: 16, output_tokens: 33, num_requests: 20}",
                                  "- {name: mixed, prompts: {source: sharegpt, path: datasets/categories-sharegpt.json},"
                                  " input_tokens: dataset, output_tokens: 33, num_requests: 20}")


@pytest.mark.parametrize("piped", [True, False])
def test_run_summary_piped_summarises_categories_and_ends_with_the_answer(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], piped: bool) -> None:
    """Before: print_run_summary printed every category block whatever the output, and no answer."""
    from cluster.commands.results import print_run_summary

    _build(str(tmp_path))
    spec = parse_spec_text(SHAREGPT_SPEC)
    capsys.readouterr()
    print_run_summary(str(tmp_path), spec, {"ok": 6}, piped=piped)
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.strip()]
    assert lines[-2].startswith("answer (sglbench results recommend cats --root ")
    assert lines[-1].startswith("answer c1: ")
    summary = f"sglbench results compare cats --by category --root {tmp_path}"
    if piped:
        assert "cats by category" not in out and summary in out
        assert "by category nextn: accept length 2.00 (chat, c1) to 4.00 (code, c1)" in out
    else:
        assert "cats by category" in out and summary not in out


def test_run_closes_with_the_variant_results_recommend_names_on_a_near_tie(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """At c8 nextn-1's speedup lies on the edge of nextn-2's bootstrap interval (nextn-2 1.0196× as fast as built):
    1000 and 2000 resamples decide it differently. Before: the run decided with 1000, `results recommend` with 2000,
    and the run's closing line named nextn-2 where `results recommend` names nextn-1."""
    import json

    from typer.testing import CliRunner

    from cluster.analysis.recommend import recommend_results
    from cluster.analysis.results import Results
    from cluster.cli import app
    from cluster.commands.results import print_run_summary
    from tests.unit.analysis.test_comparison import SPEC, build_dataset

    root = str(tmp_path)
    build_dataset(root, "tie", steps=[1, 2], repeats=8, conc=(1, 8), n_requests=8, out_tokens=16,
                  speed={"nextn-2": 1.0196}, seed=0)
    served = {nb: [r.serve for r in recommend_results(Results.open(root, "tie"), n_boot=nb).points]
              for nb in (1000, 2000)}
    assert served[1000] != served[2000], "the dataset is a near tie: the decision depends on the resamples"
    res = CliRunner().invoke(app, ["results", "recommend", "tie", "--root", root, "--format", "json"])
    assert res.exit_code == 0, res.output
    recommended = {p["load_value"]: p["serve"] for p in json.loads(res.output)["points"]}
    spec = parse_spec_text(SPEC.format(name="tie", other="nextn", steps=[1, 2], out=16, n=8, conc=[1, 8],
                                       repeats=8))
    capsys.readouterr()
    print_run_summary(root, spec, {"ok": 32})
    closing = [line for line in capsys.readouterr().out.splitlines() if line.startswith("answer c")]
    answered = {float(line.split()[1].removeprefix("c").rstrip(":")): line.split(": ")[1].removeprefix("serve ")
                for line in closing}
    assert answered == recommended
    assert recommended[8] == "nextn-1" and "tied with nextn-2" in next(x for x in closing if x.startswith("answer c8"))
