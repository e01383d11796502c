"""Thinking on and off as an axis, through the driver on local Ray: the shipped experiments/thinking-sim.yaml, cut
short (one NEXTN depth, one load, one repeat), runs both settings as their own workloads; `results compare` and
`results recommend` report each setting apart and close with the line contrasting their acceptance (the
simulator's template_accept_probs: about 2.5 tokens per step with thinking, 3.0 without, at depth 3)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cluster.config.experiment import ExperimentSpec
from cluster.config.loader import load_spec

pytestmark = pytest.mark.ray

REPO = Path(__file__).resolve().parents[2]


def test_thinking_and_no_thinking_are_run_and_reported_apart(ray_local: None, tmp_path: Path) -> None:
    from cluster.cli import app
    from cluster.distributed.driver import run_experiment

    data = load_spec(REPO / "experiments" / "thinking-sim.yaml").model_dump(mode="json", exclude_unset=True)
    data["sim"]["time_scale"] = 0.02
    data["variants"] = [{"name": "baseline", "baseline": True},
                        {"name": "nextn", "speculative": {"algorithm": "NEXTN", "num_steps": 3}}]
    data["workloads"][0]["num_requests"] = 16
    data["load"] = {"concurrency": [4]}
    data["repeats"] = 1
    data["output"] = str(tmp_path / "results")
    data["max_client_lag_ms"] = 1000.0
    spec = ExperimentSpec.model_validate(data)
    result = run_experiment(spec, base_dir=REPO)  # the dataset and the template's paths are the repository's
    assert set(result.counts()) == {"ok"}, result.statuses

    res = CliRunner().invoke(app, ["results", "compare", spec.name, "--root", result.dataset_root])
    print(res.output)
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "thinking-sim / chat-thinking:" in text and "thinking-sim / chat-no-thinking:" in text
    m = re.search(r"acceptance by chat template setting, chat / nextn: thinking ([\d.]+) \(1 run\), no-thinking "
                  r"([\d.]+) \(1 run\) tokens per verify step \(mean over ok runs\); no-thinking/thinking ×([\d.]+)",
                  text)
    assert m is not None, text
    on, off, ratio = (float(x) for x in m.groups())
    # declared 2.54 and 3.02 at depth 3 (SIMULATED); 16 requests of 32 tokens keep each well within ±0.3
    assert 2.2 < on < 2.85 and 2.7 < off < 3.3 and off > on, (on, off)
    assert ratio == pytest.approx(off / on, abs=0.01)
    assert "acceptance by chat template setting, chat / baseline" not in text  # no speculation, no acceptance

    res = CliRunner().invoke(app, ["results", "recommend", spec.name, "--root", result.dataset_root,
                                   "--n-boot", "200"])
    print(res.output)
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "depth schedule chat-thinking (concurrency): c4 → " in text
    assert "depth schedule chat-no-thinking (concurrency): c4 → " in text
    assert "acceptance by chat template setting, chat / nextn: thinking" in text
    doc = json.loads(CliRunner().invoke(app, ["results", "recommend", spec.name, "--root", result.dataset_root,
                                              "--n-boot", "200", "--format", "json"]).output)
    assert sorted(p["workload"] for p in doc["points"]) == ["chat-no-thinking", "chat-thinking"]
    (c,) = doc["template_settings"]
    assert (c["declared"], c["variant"]) == ("chat", "nextn")
    assert [(s["setting"], s["workload"], s["runs"]) for s in c["settings"]] == [
        ("thinking", "chat-thinking", 1), ("no-thinking", "chat-no-thinking", 1)]
    assert [round(s["accept_length"], 2) for s in c["settings"]] == [on, off]
