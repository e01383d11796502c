"""Fuzz the `sglbench init` boundary: for any checkpoint the test builders can make (MTP present, declared, stripped;
NVFP4 in either config file; MoE or dense; any depth), any GPU and any SGLang release the tool knows, the starter
parses as a spec and the fairness rules find nothing left to pin."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Optional

from hypothesis import given
from hypothesis import strategies as st

from cluster.commands.init import Interpreter, render_starter, residual_findings
from cluster.probe.checkpoint import probe_checkpoint
from tests import checkpoints as ck
from tests.fuzz.fuzzing import FUZZ


@st.composite
def checkpoints(draw: st.DrawFn) -> tuple[str, dict[str, object]]:
    family = draw(st.sampled_from(["qwen35", "deepseek", "mimo", "qwen3_next", "dense", "ernie45", "deepseek_v4"]))
    if family == "qwen35":
        return family, {"layers": draw(st.integers(1, 8)), "experts": draw(st.integers(2, 6)),
                        "mtp_weights": draw(st.booleans()), "mtp_declared": draw(st.booleans()),
                        "quant_in_config": draw(st.booleans())}
    if family == "deepseek":
        return family, {"layers": draw(st.integers(1, 4)), "nextn_weights": draw(st.booleans())}
    if family == "mimo":
        return family, {"layers": draw(st.integers(1, 4)), "mtp_layers": draw(st.integers(1, 3))}
    return family, {"layers": draw(st.integers(1, 4))}


BUILD = {"qwen35": ck.qwen35_nvfp4, "deepseek": ck.deepseek_nextn, "mimo": ck.mimo_mtp,
         "qwen3_next": ck.qwen3_next_flat, "dense": ck.single_file_model, "ernie45": ck.ernie45_mtp,
         "deepseek_v4": ck.deepseek_v4_mtp}


@FUZZ
@given(checkpoints(), st.sampled_from([None, 80, 89, 90, 100, 103, 120]),
       st.sampled_from(["0.5.23", "0.5.23.post1", "0.5.14", "0.5.10", "0.5.9", "0.5.2"]))
def test_the_starter_leaves_no_fairness_finding(ckpt: tuple[str, dict[str, object]], gpu_sm: Optional[int],
                                                version: str) -> None:
    family, kwargs = ckpt
    with tempfile.TemporaryDirectory() as tmp:
        model = BUILD[family](Path(tmp) / "m", **kwargs)  # type: ignore[operator]
        report = probe_checkpoint(str(model))
        text = render_starter(report, Interpreter(None, None, "none"), version, gpu_sm)
        assert residual_findings(text, report, "starter.yaml", gpu_sm) == [], text


NAME = st.text(st.characters(codec="utf-8", exclude_characters="/\x00"), min_size=1, max_size=30).filter(lambda s: s not in (".", ".."))


@FUZZ
@given(NAME, st.text(max_size=40), st.text(max_size=20))
def test_any_model_directory_name_and_config_text_stay_data(name: str, arch: str, model_type: str) -> None:
    """The directory name and the config's strings reach the starter's values and comments: none may end a comment
    line, add a key or change the path (the spec must read back the model path exactly)."""
    import json

    with tempfile.TemporaryDirectory() as tmp:
        try:
            model = ck.single_file_model(Path(tmp) / name)
        except OSError:  # a name this file system refuses (too long in bytes)
            return
        cfg = json.loads((model / "config.json").read_text())
        (model / "config.json").write_text(json.dumps(cfg | {"architectures": [arch], "model_type": model_type}))
        report = probe_checkpoint(str(model))
        text = render_starter(report, Interpreter(None, None, "none"), "0.5.23")
        from cluster.config.fields import SpecError
        from cluster.config.loader import parse_spec_text

        try:
            spec = parse_spec_text(text, "starter.yaml")
        except SpecError as e:  # the one refusal allowed: a path no experiment may hold (init says so, exit 2)
            assert e.field == "model.path" and "control character" in e.message, e
            assert any(not c.isprintable() for c in str(model.absolute())), e
            return
        assert spec.model.path == str(model.absolute())
        assert [v.name for v in spec.variants] == ["baseline"]
        assert residual_findings(text, report, "starter.yaml") == []
