"""Preflight refuses NEXTN/MTP variants on checkpoints without MTP/NextN weights, before any GPU is touched."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # tests/ is not a package: reach tests/checkpoints.py

from tests import checkpoints as ck  # noqa: E402

from cluster.plan.runs import expand_variants  # noqa: E402
from cluster.errors import PreflightError  # noqa: E402
from cluster.plan.preflight import check_speculative_support  # noqa: E402
from cluster.probe.checkpoint import ProbeReport, probe_checkpoint  # noqa: E402
from cluster.config.experiment import ExperimentSpec
from cluster.config.loader import parse_spec_text  # noqa: E402


def _spec(path: str, engine: str = "sglang", spec_block: str = "{algorithm: NEXTN, num_steps: [1, 2]}") -> ExperimentSpec:
    return parse_spec_text(f"""
version: 1
name: mtp-study
model: {{path: "{path}", engine: {engine}, tp: 1}}
variants:
  - {{name: base, baseline: true}}
  - {{name: nextn, speculative: {spec_block}}}
workloads:
  - {{name: w, input_tokens: 8, output_tokens: 8, num_requests: 2}}
load: {{concurrency: [1]}}
""")


def test_nextn_on_stripped_checkpoint_is_refused_with_where_it_looked(tmp_path: Path) -> None:
    d = ck.qwen35_nvfp4_mtp_stripped(tmp_path / "m")
    spec = _spec(str(d))
    with pytest.raises(PreflightError) as ei:
        check_speculative_support(spec, expand_variants(spec))
    msg = str(ei.value)
    assert isinstance(ei.value, ValueError)
    assert "variant 'nextn-1'" in msg and str(d) in msg and "declared_but_absent" in msg
    assert "text_config.mtp_num_hidden_layers" in msg and "model.safetensors.index.json" in msg
    assert "safetensors headers of 3 shard(s)" in msg and "mtp.*" in msg


def test_nextn_on_checkpoint_with_mtp_passes_and_probes_each_path_once(tmp_path: Path) -> None:
    d = ck.qwen35_nvfp4(tmp_path / "m")
    spec = _spec(str(d))
    calls: list[str] = []

    def probe(p: str) -> ProbeReport:
        calls.append(p)
        return probe_checkpoint(p)

    reports = check_speculative_support(spec, expand_variants(spec), probe=probe)
    assert calls == [str(d)]
    assert reports[str(d)].mtp.verdict == "present"


def test_ngram_and_baseline_need_no_mtp(tmp_path: Path) -> None:
    d = ck.single_file_model(tmp_path / "m")
    spec = _spec(str(d), spec_block="{algorithm: NGRAM, num_steps: 2}")
    reports = check_speculative_support(spec, expand_variants(spec))
    assert reports[str(d)].mtp.verdict == "absent"


def test_eagle_without_draft_uses_builtin_head(tmp_path: Path) -> None:
    d = ck.qwen3_next_flat(tmp_path / "m", mtp_weights=False)
    spec = _spec(str(d), spec_block="{algorithm: EAGLE, num_steps: 2}")
    with pytest.raises(PreflightError, match="EAGLE needs the checkpoint's MTP/NextN weights"):
        check_speculative_support(spec, expand_variants(spec))


def test_eagle3_with_draft_probes_the_draft(tmp_path: Path) -> None:
    target = ck.single_file_model(tmp_path / "t")
    spec = _spec(str(target), spec_block=f'{{algorithm: EAGLE3, num_steps: 2, draft_model_path: "{tmp_path / "d"}"}}')
    with pytest.raises(PreflightError, match="cannot probe draft_model_path .*does not exist"):
        check_speculative_support(spec, expand_variants(spec))
    ck.single_file_model(tmp_path / "d")
    assert set(check_speculative_support(spec, expand_variants(spec))) == {str(target), str(tmp_path / "d")}


def test_unreadable_path_is_a_preflight_error(tmp_path: Path) -> None:
    spec = _spec(str(tmp_path / "missing"), engine="vllm")
    with pytest.raises(PreflightError, match=r"variant 'base': cannot probe model path .*missing: does not exist"):
        check_speculative_support(spec, expand_variants(spec))


def test_sim_variants_only_probed_when_the_path_is_a_directory(tmp_path: Path) -> None:
    spec = _spec("sim://tiny", engine="sim")
    assert check_speculative_support(spec, expand_variants(spec)) == {}
    d = ck.deepseek_nextn(tmp_path / "m", nextn_weights=False)
    spec = _spec(str(d), engine="sim")
    with pytest.raises(PreflightError, match="model.layers.3"):
        check_speculative_support(spec, expand_variants(spec))
