"""The GPU node's preflight task checks every variant's launch flags before any placement group exists."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster.config.loader import parse_spec_text

pytestmark = pytest.mark.ray


def _spec(out: Path, extra: str = "", engines: str = "") -> str:
    return f"""
version: 1
name: flags
model: {{path: sim://tiny, engine: sim}}
server: {{args: {{max-running-requests: 8, kv-cache-dtype: bf16, attention-backend: flashinfer}}}}
sim: {{time_scale: 0.02}}
variants:
  - {{name: baseline, baseline: true}}
  - {{name: nextn, speculative: {{algorithm: NEXTN, num_steps: 1}}{extra}}}
workloads:
  - {{name: w, input_tokens: 16, output_tokens: 8, num_requests: 2}}
load: {{concurrency: [1]}}
warmup_requests: 0
max_client_lag_ms: 1000
output: {out}
{engines}
"""


def test_node_preflight_refuses_a_misspelled_flag(ray_local: None, tmp_path: Path) -> None:
    import ray

    from cluster.distributed.driver import run_experiment
    from cluster.errors import PreflightError

    spec = parse_spec_text(_spec(tmp_path / "out", ", args: {max-prefil-tokens: 4096}"))
    before = ray.util.placement_group_table()
    with pytest.raises(PreflightError) as err:
        run_experiment(spec, base_dir=tmp_path)
    assert err.value.field == "variants.1.args.max-prefil-tokens"
    assert "did you mean max-prefill-tokens?" in str(err.value)
    assert ray.util.placement_group_table() == before
    assert not (tmp_path / "out" / "flags" / "runs").exists()


def test_node_preflight_warns_for_a_launcher(ray_local: None, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    from cluster.distributed.cluster_state import remote_preflight

    engines = f"engines:\n  sim:\n    launcher: [{sys.executable}, -m, cluster.sim.server]"
    spec = parse_spec_text(_spec(tmp_path / "out", engines=engines))
    seen: list[str] = []
    assert remote_preflight(spec, tmp_path, warn=seen.append) == {}
    assert seen == ["warning: flags not checked for baseline, nextn (engine sim): engines.sim.launcher is a command "
                    "of your own, so the engine's parser is not reachable"]
