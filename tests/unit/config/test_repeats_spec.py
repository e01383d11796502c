"""`repeats:` as a count or as {until, min, max}: each form read, and each mistake named at its field."""

from __future__ import annotations

import pytest

from cluster.config.fields import SpecError
from cluster.config.loader import parse_spec_text
from cluster.config.repeats import RepeatsUntil, most_repeats, planned_repeats
from cluster.plan.runs import make_plan

BASE = ("version: 1\nname: x\nmodel: {path: sim://m, engine: sim}\nvariants: [{name: a}, {name: b}]\n"
        "workloads: [{name: w, input_tokens: 8, output_tokens: 8, num_requests: 8}]\nload: {concurrency: [1, 2]}\n")


def test_both_forms_and_what_the_plan_holds() -> None:
    assert parse_spec_text(BASE + "repeats: 4\n").repeats == 4
    spec = parse_spec_text(BASE + "repeats: {until: {metric: output_tps, half_width_pct: 2}, min: 3, max: 10}\n")
    r = spec.repeats
    assert isinstance(r, RepeatsUntil) and (r.until.metric, r.until.half_width_pct, r.min, r.max) == (
        "output_tps", 2.0, 3, 10)
    assert (planned_repeats(r), most_repeats(r)) == (3, 10)
    # 2 variants x 1 workload x 2 points x min 3 repeats: the plan holds 12 runs, repeats 0..2 of each point
    runs = make_plan(spec)
    assert len(runs) == 12 and sorted({p.repeat for p in runs}) == [0, 1, 2]


@pytest.mark.parametrize(("text", "where"), [
    ("repeats: {until: {half_width_pct: 2}, min: 5, max: 3}\n", "repeats.max: max (3) is below min (5)"),
    ("repeats: {until: {metric: tps, half_width_pct: 2}}\n", "repeats.until.metric: Input should be"),
    ("repeats: {until: {half_width_pct: 0}}\n", "repeats.until.half_width_pct: Input should be greater than 0"),
    ("repeats: {until: {half_width_pct: 2}, mx: 3}\n", "repeats.mx: unknown field; expected one of: until, min, max"),
    ("repeats: {min: 3}\n", "repeats.until: required field is missing"),
    ("repeats: {until: {half_width_pct: 2}, min: 1}\n", "repeats.min: Input should be greater than or equal to 2"),
    ("repeats: {until: {half_width_pct: 2}}\norder: interleaved\n", "repeats.until: repeats until an interval is "
     "narrow run on the server start that measured the point: they need order: grouped"),
    ("repeats: 0\n", "repeats: Input should be greater than or equal to 1"),
])
def test_each_mistake_is_named_at_its_field(text: str, where: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_spec_text(BASE + text)
    assert where in str(e.value), str(e.value)


def test_plan_shows_the_bound_on_runs_and_time(tmp_path: object) -> None:
    from pathlib import Path

    from typer.testing import CliRunner

    from cluster.cli import app

    spec = Path(str(tmp_path)) / "exp.yaml"
    spec.write_text(BASE + "repeats: {until: {metric: output_tps, half_width_pct: 2}, min: 3, max: 10}\n")
    out = CliRunner().invoke(app, ["plan", str(spec)])
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    # 2 variants x 2 points = 4 points at 3 repeats (12 rows), at most 10 each: 40 runs, 10/3 = 3.33x the time
    assert "x: 12 runs" in text
    assert "each of the 4 points runs 3 repeats" in text and "at most 40 runs, up to 3.33x the time" in text
