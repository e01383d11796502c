"""The probe's typed warnings where config.json and the weights disagree (probe/consistency.py), and none where a
real checkpoint family ships that way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cluster.probe.checkpoint import ProbeWarning, probe_checkpoint
from tests import checkpoints as ck


@pytest.mark.parametrize("case", sorted(ck.MTP_CONTRADICTIONS))
def test_each_contradiction_is_one_typed_warning_that_refuses_nextn(tmp_path: Path, case: str) -> None:
    r = probe_checkpoint(str(ck.mtp_contradiction(tmp_path / "m", case)))
    assert [w.code for w in r.warnings] == [ck.MTP_CONTRADICTIONS[case]]
    (w,) = r.warnings
    assert isinstance(w, ProbeWarning) and w.about_mtp and "\n" not in w.message
    assert r.nextn_refused == w.message and r.mtp.weights_present


@pytest.mark.parametrize("build", [ck.qwen35_nvfp4, ck.qwen3_next_flat, ck.deepseek_nextn, ck.mimo_mtp,
                                   ck.ernie45_mtp, ck.deepseek_v4_mtp, ck.model_mtp_prefixed, ck.single_file_model,
                                   lambda d: ck.qwen35_nvfp4(d, mtp_declared=False)])
def test_the_builders_checkpoints_agree_with_themselves(tmp_path: Path, build) -> None:  # type: ignore[no-untyped-def]
    """Qwen3-Next and Qwen3.5 ship MTP weights with no config key: SGLang sets the draft to one layer itself."""
    r = probe_checkpoint(str(build(tmp_path / "m")))
    assert r.warnings == []
    assert (r.nextn_refused is None) is r.mtp.weights_present


def test_a_zero_key_beside_a_nonzero_one_disagrees(tmp_path: Path) -> None:
    """Before: the first key read (0) silently won, and the head was called undeclared."""
    d = ck.mimo_mtp(tmp_path / "m")
    cfg = json.loads((d / "config.json").read_text()) | {"mtp_num_hidden_layers": 0}
    (d / "config.json").write_text(json.dumps(cfg))
    r = probe_checkpoint(str(d))
    assert "mtp-keys-disagree" in [w.code for w in r.warnings]
    assert "mtp_num_hidden_layers = 0, num_nextn_predict_layers = 1" in r.warnings[0].message


@pytest.mark.parametrize(("layers", "said"), [(6, "2 missing (first: 4)"), (3, "1 past that count (first: 3)")])
def test_a_num_hidden_layers_the_decoder_weights_contradict(tmp_path: Path, layers: int, said: str) -> None:
    d = ck.qwen35_nvfp4(tmp_path / "m")
    cfg = json.loads((d / "config.json").read_text())
    cfg["text_config"] |= {"num_hidden_layers": layers, "layer_types": ["linear_attention"] * layers}
    (d / "config.json").write_text(json.dumps(cfg))
    r = probe_checkpoint(str(d))
    (w,) = [w for w in r.warnings if w.code == "layer-count"]
    assert f"declares {layers} hidden layer(s)" in w.message and "decoder layers 0..3" in w.message
    assert said in w.message
    assert not w.about_mtp  # Qwen3.5's head is under mtp.*, found by name, not by index


def test_an_explicit_zero_beside_mtp_weights_is_warned_even_where_sglang_sizes_the_draft(tmp_path: Path) -> None:
    """Fuzz finding (tests/fuzz/test_fuzz_init_starter.py): Qwen3-Next with num_nextn_predict_layers 0 and an mtp.*
    head got an active NEXTN variant and no word: the config says no MTP, the weights say one."""
    d = ck.qwen3_next_flat(tmp_path / "m")
    cfg = json.loads((d / "config.json").read_text()) | {"num_nextn_predict_layers": 0}
    (d / "config.json").write_text(json.dumps(cfg))
    r = probe_checkpoint(str(d))
    assert [w.code for w in r.warnings] == ["mtp-undeclared"]
    assert "config.json says num_nextn_predict_layers = 0" in r.warnings[0].message and r.nextn_refused


def _sglang_model_config() -> Path | None:
    import os

    venv = Path(os.environ.get("SGLBENCH_SGLANG_VENV", Path(__file__).resolve().parents[3] / ".ci/venvs/sglang"))
    found = sorted(venv.glob("lib/python3*/site-packages/sglang/srt/configs/model_config.py"))
    return found[0] if found else None


@pytest.mark.skipif(_sglang_model_config() is None, reason="no SGLang venv (SGLBENCH_SGLANG_VENV or .ci/venvs/sglang)")
def test_the_architectures_exempt_from_a_config_key_are_those_sglang_gives_one_draft_layer() -> None:
    """Each architecture in MTP_COUNT_SET_BY_SGLANG is one whose draft rewrite in the installed SGLang sets
    num_nextn_predict_layers = 1 (the rewrite block that names it, up to the next `if is_draft_model`)."""
    from cluster.probe.consistency import MTP_COUNT_SET_BY_SGLANG

    path = _sglang_model_config()
    assert path is not None
    text = path.read_text()
    blocks = text.split("if is_draft_model")[1:]
    for arch in sorted(MTP_COUNT_SET_BY_SGLANG):
        named = [b for b in blocks if f'"{arch}"' in b or "MIMO_V2_MODEL_ARCHS" in b and arch.startswith("MiMoV2")]
        assert any("num_nextn_predict_layers = 1" in b for b in named), arch
