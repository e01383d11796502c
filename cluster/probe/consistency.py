"""Cross-checks of config.json against the weights the probe read: each contradiction becomes a typed ProbeWarning."""

from __future__ import annotations

import re

from cluster.probe.config import ModelConfig
from cluster.probe.safetensors_header import MAX_INDEX_DIGITS, TensorInfo
from cluster.probe.tensors import Classifier, MtpEvidence
from cluster.probe.warning import ProbeWarning

MTP_COUNT_SET_BY_SGLANG = frozenset({
    "DeepseekV4ForCausalLM", "Glm5NextForConditionalGeneration", "MiMoV2ForCausalLM", "MiMoV2FlashForCausalLM",
    "Qwen3NextForCausalLM", "Qwen4ExpForConditionalGeneration", "Qwen3MoeForCausalLM",
    "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration", "Qwen3_5ForCausalLM",
    "Qwen3_5MoeForCausalLM", "ExaoneMoEForCausalLM", "ExaoneMoeForCausalLM", "NemotronHForCausalLM",
    "NemotronHPuzzleForCausalLM", "HYV3ForCausalLM", "HYV4ForCausalLM",
})
"""Architectures whose draft SGLang 0.5.23 builds with num_nextn_predict_layers = 1 whatever config.json says
(sglang/srt/configs/model_config.py, the draft-architecture rewrites): MTP weights with no config key are normal here
(Qwen3-Next ships so); every other architecture sizes its draft from the config's key."""

_BODY_LAYER = re.compile(r"(?:model\.)?(?:language_model\.)?layers\.(\d+)\.")


def _span(layers: list[int]) -> str:
    return f"{layers[0]}..{layers[-1]}" if len(layers) > 1 else str(layers[0])


def _decoder_layer(cls: Classifier, name: str, mtp: MtpEvidence) -> bool:
    """A `layers.{i}` tensor of the decoder: not MTP, or read as NextN only by its index while the head is elsewhere."""
    hit = cls.mtp_match(name)
    return hit is None or (hit[0].kind == "nextn" and mtp.kind != "nextn")


def consistency_warnings(cfg: ModelConfig, mtp: MtpEvidence, cls: Classifier,
                         tensors: dict[str, TensorInfo]) -> list[ProbeWarning]:
    """What config.json says that the weights (or config.json itself) contradict; `about_mtp` where it bears on
    whether the built-in draft head would load as declared."""
    out: list[ProbeWarning] = []
    if len({k.layers for k in cfg.mtp_keys}) > 1:
        said = ", ".join(f"{k.key.removeprefix('config.json ')} = {k.layers}" for k in cfg.mtp_keys)
        out.append(ProbeWarning("mtp-keys-disagree", f"config.json's MTP layer counts disagree ({said}): which one "
                                "a loader reads decides how many draft layers it builds", about_mtp=True))
    zero = [k.key.removeprefix("config.json ") for k in cfg.mtp_keys if k.layers == 0]
    sized_by_sglang = bool(MTP_COUNT_SET_BY_SGLANG.intersection(cfg.architectures))
    if mtp.weights_present and not mtp.declared and (zero or not sized_by_sglang):
        archs = ", ".join(cfg.architectures) or "this model"
        said = f"says {' = '.join(zero)} = 0" if zero else "declares no MTP layers (mtp_num_hidden_layers / " \
            f"num_nextn_predict_layers), and SGLang sizes the draft of {archs} from that key"
        out.append(ProbeWarning("mtp-undeclared", f"the weights hold {mtp.header_tensors} MTP/NextN tensor(s) under "
                                f"{mtp.layout} but config.json {said}", about_mtp=True))
    if mtp.declared and mtp.weights_present and mtp.layers_found and len(mtp.layers_found) != mtp.declared_layers:
        out.append(ProbeWarning(
            "mtp-layer-count", f"config declares {mtp.declared_layers} MTP layer(s); weights hold "
            f"{len(mtp.layers_found)} ({mtp.declared_in}; layers {_span(mtp.layers_found)} under {mtp.layout})"
            + (f"; NextN layers are found past num_hidden_layers ({cfg.num_hidden_layers}), so a short "
               "num_hidden_layers reads as this too" if mtp.kind == "nextn" else ""), about_mtp=True))
    if mtp.layout_matches_architecture is False:
        out.append(ProbeWarning(
            "mtp-layout", f"the MTP tensors sit under {mtp.layout}, but SGLang loads "
            f"{' or '.join(mtp.expected_layouts)} for {', '.join(cfg.architectures)}", about_mtp=True))
    n = cfg.num_hidden_layers
    body = sorted({int(m.group(1)) for name in tensors if (m := _BODY_LAYER.match(name))
                   and len(m.group(1)) <= MAX_INDEX_DIGITS and _decoder_layer(cls, name, mtp)})
    if n is not None and body and body != list(range(n)):
        missing = sorted(set(range(n)) - set(body))
        past = [i for i in body if i >= n]
        detail = "; ".join(([f"{len(missing)} missing (first: {missing[0]})"] if missing else [])
                           + ([f"{len(past)} past that count (first: {past[0]})"] if past else []))
        out.append(ProbeWarning(
            "layer-count", f"config.json declares {n} hidden layer(s) (num_hidden_layers) but the weights hold "
            f"decoder layers {_span(body)}: {detail}",
            about_mtp=mtp.kind == "nextn"))  # NextN layers are found by their index past num_hidden_layers
    return out
