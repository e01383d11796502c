"""Preflight on the cluster: the checkpoint is probed by a CPU-only Ray task on a GPU node before any placement
group exists; a NEXTN variant on a checkpoint whose MTP weights were lost is refused; the probe is stored."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from cluster.config.loader import parse_spec_text
from tests.checkpoints import qwen35_nvfp4, qwen35_nvfp4_mtp_stripped

pytestmark = pytest.mark.ray


def _spec(model: Path, out: Path) -> str:
    return f"""
version: 1
name: preflight
model: {{path: "{model}", engine: sim}}
server: {{args: {{max-running-requests: 8, kv-cache-dtype: bf16, attention-backend: flashinfer}}}}
sim: {{time_scale: 0.02}}
variants:
  - {{name: baseline, baseline: true}}
  - {{name: nextn, speculative: {{algorithm: NEXTN, num_steps: 1}}}}
workloads:
  - {{name: w, input_tokens: 16, output_tokens: 8, num_requests: 3}}
load: {{concurrency: [1]}}
warmup_requests: 0
max_client_lag_ms: 1000
output: {out}
"""


def test_nextn_refused_on_stripped_checkpoint_before_any_gpu(ray_local: None, tmp_path: Path) -> None:
    import ray

    from cluster.distributed.driver import run_experiment
    from cluster.errors import PreflightError

    model = qwen35_nvfp4_mtp_stripped(tmp_path / "stripped")
    spec = parse_spec_text(_spec(model, tmp_path / "out"))
    before = ray.util.placement_group_table()
    with pytest.raises(PreflightError) as err:
        run_experiment(spec, base_dir=tmp_path)
    msg = str(err.value)
    assert "nextn" in msg and "declared_but_absent" in msg and "model.safetensors.index.json" in msg
    assert ray.util.placement_group_table() == before, "no placement group may be created before preflight"
    assert not (tmp_path / "out" / "preflight" / "runs").exists()


def test_probe_result_stored_with_the_experiment(ray_local: None, tmp_path: Path) -> None:
    from cluster.distributed.driver import run_experiment

    model = qwen35_nvfp4(tmp_path / "good")
    spec = parse_spec_text(_spec(model, tmp_path / "out"))
    result = run_experiment(spec, base_dir=tmp_path)
    assert set(result.counts()) == {"ok"}
    meta = json.loads((tmp_path / "out" / "preflight" / "experiment.json").read_text())
    report = meta["preflight"][str(model)]
    assert report["mtp"]["verdict"] == "present"
    # the checkpoint's identity reaches every run's provenance, not only the experiment's metadata
    fingerprint = report["identity"]["fingerprint"]
    assert len(fingerprint) == 64
    runs = pd.read_parquet(tmp_path / "out" / "preflight" / "runs")
    for text in runs["provenance_json"]:
        prov = json.loads(text)
        assert prov["checkpoint_fingerprint"] == fingerprint and prov["hub_revision"] is None


def test_the_node_answers_with_typed_probe_reports(ray_local: None, tmp_path: Path) -> None:
    """The probe report crosses Ray as its record (failed before: the task sent `to_json()` dicts the driver parsed
    back); the same JSON as probing here, the shard headers left on the node."""
    from cluster.distributed.cluster_state import remote_preflight
    from cluster.probe.checkpoint import ProbeReport, probe_checkpoint

    model = qwen35_nvfp4(tmp_path / "good")
    said: list[str] = []
    reports = remote_preflight(parse_spec_text(_spec(model, tmp_path / "out")), tmp_path, warn=said.append)
    assert reports is not None and list(reports) == [str(model)]
    report = reports[str(model)]
    assert isinstance(report, ProbeReport) and report.headers == []
    assert report.to_json() == probe_checkpoint(str(model)).to_json()
    assert said and all(line.startswith("warning: ") for line in said)
