"""Every built-in MTP/NextN layout SGLang 0.5.23 serves is recognised by the probe, and preflight follows it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # tests/ is not a package: reach tests/checkpoints.py

from tests import checkpoints as ck  # noqa: E402

from cluster.errors import PreflightError  # noqa: E402
from cluster.plan.preflight import check_speculative_support  # noqa: E402
from cluster.plan.runs import expand_variants  # noqa: E402
from cluster.probe.checkpoint import probe_checkpoint  # noqa: E402
from cluster.probe.tensors import MTP_LAYOUTS  # noqa: E402
from cluster.config.loader import parse_spec_text  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]

FIXTURES: dict[str, tuple[Callable[..., Path], dict[str, Any], list[int]]] = {
    # kind → (builder, kwargs, layer indices the probe must report)
    "mtp": (ck.qwen35_nvfp4, {}, [0]),
    "nextn": (ck.deepseek_nextn, {"layers": 3}, [3]),
    "mtp_layers": (ck.mimo_mtp, {"mtp_layers": 2}, [0, 1]),
    "mtp_block": (ck.ernie45_mtp, {}, [0]),
}


def test_every_layout_has_a_fixture() -> None:
    assert {lay.kind for lay in MTP_LAYOUTS} == set(FIXTURES)


@pytest.mark.parametrize("kind", sorted(FIXTURES))
def test_each_layout_is_found_with_its_layers(tmp_path: Path, kind: str) -> None:
    build, kw, layers = FIXTURES[kind]
    m = probe_checkpoint(str(build(tmp_path / kind, **kw))).mtp
    assert (m.verdict, m.kind, m.layers_found) == ("present", kind, layers)
    assert m.layout_matches_architecture is True and m.layout in m.expected_layouts
    assert m.layout_source and m.header_tensors > 0


@pytest.mark.parametrize("build,arch", [(ck.model_mtp_prefixed, "MiMoV2FlashForCausalLM"),
                                        (ck.model_mtp_prefixed, "LongcatFlashForCausalLM"),
                                        (ck.deepseek_v4_mtp, "DeepseekV4ForCausalLM")])
def test_model_mtp_and_numbered_mtp_prefixes_are_the_mtp_layout(tmp_path: Path, build: Any, arch: str) -> None:
    kw = {"arch": arch} if build is ck.model_mtp_prefixed else {}
    m = probe_checkpoint(str(build(tmp_path / "m", **kw))).mtp
    assert (m.verdict, m.kind, m.layers_found, m.layout_matches_architecture) == ("present", "mtp", [0], True)


def test_mimo_mtp_params_are_not_counted_as_target(tmp_path: Path) -> None:
    r = probe_checkpoint(str(ck.mimo_mtp(tmp_path / "m", hidden=64)))
    # one decoder layer (4·64² attention + 3·128·64 MLP + 2 norms + q/k norms) + 3 norms + input_proj 64×128
    layer = 4 * 64 * 64 + 32 + 3 * 128 * 64 + 2 * 64
    assert r.params.mtp == layer + 3 * 64 + 64 * 128
    assert r.mtp.fc_tensor == "model.mtp_layers.0.input_proj.weight"


def _spec(path: str) -> Any:
    return parse_spec_text(f"""
version: 1
name: mimo
model: {{path: "{path}", engine: sglang, tp: 1}}
variants:
  - {{name: base, baseline: true}}
  - {{name: nextn, speculative: {{algorithm: NEXTN, num_steps: [1]}}}}
workloads:
  - {{name: w, input_tokens: 8, output_tokens: 8, num_requests: 2}}
load: {{concurrency: [1]}}
""")


def test_preflight_accepts_nextn_on_a_mimo_checkpoint(tmp_path: Path) -> None:
    d = ck.mimo_mtp(tmp_path / "m")
    spec = _spec(str(d))
    reports = check_speculative_support(spec, expand_variants(spec))
    assert reports[str(d)].mtp.kind == "mtp_layers"


def test_preflight_refuses_nextn_on_a_stripped_mimo_checkpoint(tmp_path: Path) -> None:
    d = ck.mimo_mtp(tmp_path / "m", mtp_weights=False)
    spec = _spec(str(d))
    with pytest.raises(PreflightError) as ei:
        check_speculative_support(spec, expand_variants(spec))
    msg = str(ei.value)
    assert "declared_but_absent" in msg and "model.mtp_layers.{i}.*" in msg and "num_nextn_predict_layers" in msg


def test_preflight_refuses_a_layout_sglang_does_not_load_for_the_architecture(tmp_path: Path) -> None:
    # MiMo's MTP model loads model.mtp_layers.*; a checkpoint with mtp.* would give its draft no weights
    d = ck.model_mtp_prefixed(tmp_path / "m", arch="MiMoForCausalLM")
    spec = _spec(str(d))
    with pytest.raises(PreflightError, match=r"under mtp\.\* or model\.mtp\.\*, but SGLang loads model\.mtp_layers"):
        check_speculative_support(spec, expand_variants(spec))


SGLANG_MODELS = ROOT / ".ci/venvs/sglang/lib/python3.11/site-packages/sglang/srt/models"


@pytest.mark.skipif(not SGLANG_MODELS.is_dir(), reason="the SGLang venv (.ci/venvs/sglang) is not installed")
def test_each_rule_names_sglang_files_that_exist_and_load_that_prefix() -> None:
    for lay in MTP_LAYOUTS:
        files = [w.strip(",()") for w in lay.source.split() if w.strip(",()").endswith(".py")]
        assert files, lay
        for f in files:
            path = SGLANG_MODELS / f
            assert path.is_file(), f"{lay.kind}: {f} is not in the installed SGLang"
        text = "".join((SGLANG_MODELS / f).read_text() for f in files)
        token = {"mtp": '"mtp', "nextn": "num_hidden_layers", "mtp_layers": "mtp_layers",
                 "mtp_block": "mtp_block"}[lay.kind]
        assert token in text, lay.kind
    registry = (SGLANG_MODELS.parent / "configs/model_config.py").read_text()
    for lay in MTP_LAYOUTS:
        for arch in lay.architectures:
            assert f'"{arch}"' in registry, f"{arch} is not a draft-capable target in SGLang's _config_draft_model"
