"""The shipped experiments/repeats-until-sim.yaml through the driver on local Ray, then `results show`: the quiet
baseline reads 'narrow at 3 repeats', the noisy variant (window_speed_spread 0.6, seed 4) a warning at max 8
(about 25 s on two cores)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cluster.config.loader import load_spec

pytestmark = pytest.mark.ray

YAML = Path(__file__).resolve().parents[2] / "experiments" / "repeats-until-sim.yaml"


def test_the_shipped_until_experiment_shows_where_each_point_stopped(ray_local: None, tmp_path: Path) -> None:
    from cluster.cli import app
    from cluster.distributed.driver import Driver

    out = str(tmp_path / "out")
    logs: list[str] = []
    result = Driver(load_spec(YAML), tmp_path, out, logs.append, lambda p, s: None).run()
    assert set(result.statuses.values()) == {"ok"}, (result.statuses, logs)
    res = CliRunner().invoke(app, ["results", "show", "repeats-until-sim", "--root", out], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "quiet / w / c2: narrow at 3 repeats: ±" in res.output, res.output
    assert "warning noisy / w / c2: max 8 reached: ±" in res.output, res.output
    assert "not sure, the interval is wider than asked" in res.output
    res = CliRunner().invoke(app, ["results", "show", "repeats-until-sim", "--root", out, "--format", "json"])
    facts = {f["variant"]: f for f in json.loads(res.output)["repeats_until"]}
    assert (facts["quiet"]["sure"], facts["quiet"]["repeats_done"]) == (True, 3), facts
    assert (facts["noisy"]["sure"], facts["noisy"]["reason"], facts["noisy"]["repeats_done"]) == (False, "max", 8)
    assert facts["noisy"]["half_width_pct"] > facts["noisy"]["target_half_width_pct"] == 10.0
