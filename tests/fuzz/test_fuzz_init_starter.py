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


MTP_KEYS = ("mtp_num_hidden_layers", "num_nextn_predict_layers")


@st.composite
def config_edits(draw: st.DrawFn) -> dict[tuple[str, str], Optional[int]]:
    """(scope, key) → a new value or None to delete: the MTP keys at the top level or in text_config, and a shift
    of num_hidden_layers (scope `shift`)."""
    edits: dict[tuple[str, str], Optional[int]] = {}
    for scope in ("top", "text"):
        for key in MTP_KEYS:
            if draw(st.booleans()):
                edits[(scope, key)] = draw(st.one_of(st.none(), st.integers(0, 3)))
    edits[("shift", "num_hidden_layers")] = draw(st.sampled_from([0, 0, -1, 1]))
    return edits


def _apply(model: Path, edits: dict[tuple[str, str], Optional[int]]) -> None:
    import json

    cfg = json.loads((model / "config.json").read_text())
    body = cfg.get("text_config", cfg)
    for (scope, key), value in edits.items():
        if scope == "shift":
            body[key] = max(1, body[key] + (value or 0))
            if "layer_types" in body:
                body["layer_types"] = ["linear_attention"] * body[key]
            continue
        where = body if scope == "text" else cfg
        if value is None:
            where.pop(key, None)
        else:
            where[key] = value
    (model / "config.json").write_text(json.dumps(cfg))


@FUZZ
@given(checkpoints(), config_edits())
def test_nextn_only_when_config_and_weights_agree(ckpt: tuple[str, dict[str, object]],
                                                  edits: dict[tuple[str, str], Optional[int]]) -> None:
    """Whatever config.json says about the MTP head and the layer count: every probe warning is a TODO line, the
    starter still plans clean, and an active NEXTN variant means the config and the weights agree (restated here
    from the facts, not from the probe's own predicate)."""
    from cluster.probe.consistency import MTP_COUNT_SET_BY_SGLANG

    family, kwargs = ckpt
    with tempfile.TemporaryDirectory() as tmp:
        model = BUILD[family](Path(tmp) / "m", **kwargs)  # type: ignore[operator]
        _apply(model, edits)
        report = probe_checkpoint(str(model))
        text = render_starter(report, Interpreter(None, None, "none"), "0.5.23")
        assert residual_findings(text, report, "starter.yaml") == [], text
        todo = [ln.removeprefix("# TODO: probe: ") for ln in text.splitlines() if ln.startswith("# TODO: probe: ")]
        assert todo == [w.message for w in report.warnings]
        active = "\n  - name: nextn\n" in text
        m, cfg = report.mtp, report.config
        keys_agree = len({k.layers for k in cfg.mtp_keys}) <= 1
        declared_ok = (m.declared and len(m.layers_found) == m.declared_layers) or (
            not m.declared and not cfg.mtp_keys and bool(MTP_COUNT_SET_BY_SGLANG.intersection(cfg.architectures)))
        if active:
            assert m.weights_present and keys_agree and declared_ok, (report.warnings, m)
        else:
            assert "# no NEXTN variants: " in text
            assert ("\n#  - name: nextn\n" in text) is (m.weights_present or m.declared)
