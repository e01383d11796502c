"""Acceptance health on the simulator (local Ray): a checkpoint whose MTP head the quantizer did not exclude, served
with a degraded head (sim accept_probs 0.3, 0.2), is `acceptance-collapsed` against the healthy checkpoint's measured
curve, with the probe's evidence (NVFP4-quantized MTP tensors, no exclude pattern) in show, compare, recommend and
the report; the healthy checkpoint (MTP in BF16, excluded by 'mtp*') is not, against Qwen3.5's shipped figures."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cluster.config.loader import parse_spec_text
from tests.checkpoints import qwen35_nvfp4

pytestmark = pytest.mark.ray


def _spec(name: str, model: Path, out: Path, sim: str, extra: str = "") -> str:
    return f"""
version: 1
name: {name}
model: {{path: "{model}", engine: sim}}
server: {{args: {{max-running-requests: 8, kv-cache-dtype: bf16, attention-backend: flashinfer}}}}
sim: {{time_scale: 0.02, {sim}}}
variants:
  - {{name: baseline, baseline: true}}
  - {{name: nextn, speculative: {{algorithm: NEXTN, num_steps: 2}}}}
workloads:
  - {{name: w, input_tokens: 16, output_tokens: 48, num_requests: 8}}
load: {{concurrency: [2]}}
warmup_requests: 0
repeats: 2
max_client_lag_ms: 1000
output: {out}
{extra}
"""


def test_degraded_head_is_flagged_with_the_probe_evidence(ray_local: None, tmp_path: Path) -> None:
    from cluster.cli import app
    from cluster.distributed.driver import run_experiment

    out = tmp_path / "results"
    healthy = qwen35_nvfp4(tmp_path / "bf16-mtp")
    degraded = qwen35_nvfp4(tmp_path / "nvfp4-mtp", mtp_quantized=True)
    for text in (_spec("healthy", healthy, out, "accept_probs: [0.93, 0.86]"),
                 _spec("degraded", degraded, out, "accept_probs: [0.3, 0.2]",
                       "acceptance_reference: {experiment: healthy, margin: 0.1}")):
        result = run_experiment(parse_spec_text(text), base_dir=tmp_path)
        assert set(result.counts()) == {"ok"}, result.statuses

    runner = CliRunner()
    outputs = {}
    for cmd in (["show"], ["compare"], ["compare", "--ci", "--n-boot", "200"], ["recommend", "--n-boot", "200"]):
        for exp in ("healthy", "degraded"):
            res = runner.invoke(app, ["results", cmd[0], exp, "--root", str(out), *cmd[1:]])
            assert res.exit_code == 0, res.output
            outputs[(" ".join(cmd), exp)] = " ".join(res.output.split())
            print(res.output)  # for the record (pytest -s)
    for (cmd, exp), text in outputs.items():
        if exp == "healthy":
            # no declared reference: the probe names Qwen3_5MoeForConditionalGeneration, so Qwen3.5's shipped figure
            assert "acceptance health w nextn: acceptance-healthy against qwen3.5-mtp published figures" in text, cmd
            assert "acceptance-collapsed" not in text, cmd
        else:
            assert ("acceptance health w nextn: acceptance-collapsed against experiment healthy nextn (measured, "
                    "95 % lower bound): position 1 accepts 0.") in text, cmd
            # the simulated head accepts 0.3 then 0.2: both positions flagged, each near its knob
            p1, p2 = (float(x) for x in re.findall(r"position \d accepts (0\.\d+) \[", text))
            assert abs(p1 - 0.3) < 0.08 and abs(p2 - 0.2) < 0.1, text
            # the probe's evidence: the head is there, its experts NVFP4 (U8 + F8_E4M3 scales), no pattern excludes it
            assert "probe: MTP head present, 65 tensors, weight format mixed" in text, cmd
            assert "U8 ×12" in text and "NOT excluded from NVFP4 quantization (no exclude pattern covers mtp.*" in text
            assert "the head is present but quantized" in text and "try: keep the MTP layers in BF16" in text, cmd
    res = runner.invoke(app, ["results", "report", "degraded", "--root", str(out), "--n-boot", "200",
                              "--out", str(tmp_path / "report")])
    assert res.exit_code == 0, res.output
    page = (tmp_path / "report" / "index.html").read_text()
    assert "<h2>Acceptance health</h2>" in page and "acceptance-collapsed" in page and "mtp.*" in page


def test_a_head_below_the_gate_floor_is_invalid_and_still_judged_collapsed(ray_local: None, tmp_path: Path) -> None:
    # vLLM #43455's case: an NVFP4-quantized head accepting ~2 % of drafts; acceptance length ~1.02 trips the gate's
    # floor (1.05), so every run is invalid, yet the variant is measured and shown collapsed with the probe's evidence
    import json

    from cluster.cli import app
    from cluster.distributed.driver import run_experiment

    out = tmp_path / "results"
    model = qwen35_nvfp4(tmp_path / "nvfp4-mtp", mtp_quantized=True)
    # repeats until sure: the baseline repeats as its rule says, the invalid variant only its planned (min) repeats
    spec = _spec("floor", model, out, "accept_probs: [0.02]").replace(
        "repeats: 2", "repeats: {until: {metric: output_tps, half_width_pct: 0.001}, min: 2, max: 3}")
    result = run_experiment(parse_spec_text(spec), base_dir=tmp_path)
    assert result.counts() == {"ok": 3, "invalid": 2}, result.statuses
    runner = CliRunner()
    show = runner.invoke(app, ["results", "show", "floor", "--root", str(out)])
    assert show.exit_code == 0, show.output
    print(show.output)
    assert "correctness gate failed: acceptance length 1.0" in " ".join(show.output.split())
    rec = runner.invoke(app, ["results", "recommend", "floor", "--root", str(out), "--n-boot", "200"])
    assert rec.exit_code == 0, rec.output
    print(rec.output)
    text = " ".join(rec.output.split())
    assert ("acceptance health w nextn (2 runs invalid: the gate's acceptance floor; judged, never compared): "
            "acceptance-collapsed against qwen3.5-mtp published figures: position 1 accepts 0.0") in text
    assert "NOT excluded from NVFP4 quantization" in text and "try: keep the MTP layers in BF16" in text
    # never compared: the invalid variant is no recommendation
    assert "serve nextn" not in text
    for cmd in (["show"], ["compare"], ["compare", "--ci", "--n-boot", "200"]):
        res = runner.invoke(app, ["results", cmd[0], "floor", "--root", str(out), *cmd[1:], "--format", "json"])
        assert res.exit_code == 0, res.output
        rows = json.loads(res.output)
        rows = rows["runs"] if isinstance(rows, dict) else rows
        health = {r["variant"]: r["acceptance_health"] for r in rows}
        assert health["baseline"] is None, cmd
        assert health["nextn"]["verdict"] == "acceptance-collapsed" and health["nextn"]["floor_invalid_runs"] == 2
        assert health["nextn"]["positions"][0]["collapsed"] and health["nextn"]["probe"]["quantized"], cmd
    rec_json = runner.invoke(app, ["results", "recommend", "floor", "--root", str(out), "--n-boot", "200",
                                   "--format", "json"])
    assert rec_json.exit_code == 0, rec_json.output
    (doc,) = json.loads(rec_json.output)["acceptance_health"]
    assert doc["variant"] == "nextn" and doc["verdict"] == "acceptance-collapsed"
    assert doc["reference"]["label"] == "qwen3.5-mtp published figures" and doc["positions"][0]["rate"] < 0.06
    assert doc["probe"]["quant_algo"] == "NVFP4" and doc["probe"]["excluded"] is False
