"""`sglbench results recommend` on the demo experiment (the simulator, local Ray): the printed table names a
variant or says why not at every load point, the depth schedule covers them, the JSON agrees with the table.

Machine load tolerated: at c1 one NEXTN depth must beat the baseline with its interval's low end above 1 over three
repeats. At time_scale 0.05 NEXTN-3 makes 3.37 tokens a 0.88-ms step (17.5 model ms) against the baseline's 1 a
0.70-ms step, so lateness that falls alike on both is tolerated at any size, and lateness on NEXTN-3's windows alone
up to 1.47 ms a step ((3.37 x 13.9 - 17.5) x 0.05) plus 2.37x the baseline's own. The clock rule compares busy
samples only (requests in flight for at least half a sample's 100 ms): a client that stalls between requests removes
samples from it instead of lowering a variant's clock mean, which is how a fresh-clone CI run marked NEXTN-1 "not
vouched" (2278 vs 2430 MHz over every sample). The client may lag its schedule by up to max_client_lag_ms (1 s).
Measured 2026-12-06 at a load average of ~10 on this 2-core machine (eight sessions' tests, no burners): it failed
on speed, not on the clocks. c1's windows took 0.8-18 s for the same work and the intervals spanned [0.01, 8.6], so
nothing was significant; every point was vouched for (busy-sample means 2430 MHz everywhere, where the old
all-sample means were 2125 MHz for nextn-1 and nextn-3 at c8 in one repeat each and 2378 for a baseline repeat).
Twenty minutes later, at a load average of ~15, it passed in 115 s (c1: nextn-2 2.42x [2.01, 2.75])."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cluster.config.experiment import ExperimentSpec
from cluster.config.loader import load_spec

pytestmark = pytest.mark.ray

REPO = Path(__file__).resolve().parents[2]


def test_recommend_on_the_demo(ray_local: None, tmp_path: Path) -> None:
    from cluster.cli import app
    from cluster.distributed.driver import run_experiment

    demo = load_spec(REPO / "experiments" / "demo-sim.yaml")
    # the demo's variants and load points, run faster: simulated time scaled down, one workload, three repeats
    data = demo.model_dump(mode="json", exclude_unset=True)
    data["sim"]["time_scale"] = 0.05
    data["workloads"] = [{**data["workloads"][0], "num_requests": 32, "output_tokens": 32}]
    data["repeats"] = 3
    data["output"] = str(tmp_path / "results")
    data["max_client_lag_ms"] = 1000.0
    for v in data["variants"]:
        v.pop("profile", None)
    spec = ExperimentSpec.model_validate(data)
    result = run_experiment(spec, base_dir=tmp_path)
    assert set(result.counts()) == {"ok"}, result.statuses

    args = ["results", "recommend", spec.name, "--root", result.dataset_root, "--n-boot", "500"]
    res = CliRunner().invoke(app, args)
    print(res.output)  # the printed table, for the record (pytest -s)
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert f"{spec.name} (simulated engine): what to serve per load point" in text
    assert f"depth schedule {spec.workloads[0].name} (concurrency): c1 → " in text and ", c8 → " in text
    doc = json.loads(CliRunner().invoke(app, args + ["--format", "json"]).output)
    assert [(p["load_kind"], p["load_value"]) for p in doc["points"]] == [("concurrency", 1.0), ("concurrency", 8.0)]
    for p in doc["points"]:
        # every point either serves a variant of the demo, with an interval when it is not the baseline, or says why
        assert p["because"], p
        if p["serve"] is not None:
            assert p["serve"] in {"baseline", "nextn-1", "nextn-2", "nextn-3"} and p["gate"] == "passed", p
            assert p["serve"] == "baseline" or p["speedup_lo"] > 1.0, p
    # at concurrency 1 the simulator's NEXTN steps (acceptance 0.93, 0.86, 0.8) beat the baseline by far more than
    # the run-to-run noise (test_demo.py): a depth is served there
    c1 = doc["points"][0]
    assert c1["serve"] in {"nextn-1", "nextn-2", "nextn-3"}, c1
    assert doc["schedule"][0]["depth"] == int(c1["serve"][-1])
