"""Tensor-name analysis for the probe: MTP/NextN evidence, module families, quantized modules, params and bytes."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Optional

from cluster.input_files import JsonValue
from cluster.probe.config import ModelConfig, QuantInfo
from cluster.probe.safetensors_header import MAX_INDEX_DIGITS, TensorInfo
from cluster.probe.warning import ProbeWarning

SCALE_LEAVES = frozenset(
    {"weight_scale", "weight_scale_2", "input_scale", "weight_scale_inv", "k_scale", "v_scale", "output_scale"}
)
"""Quantization scale tensors: counted in bytes, not in parameters."""

FLOAT_DTYPES = frozenset({"BF16", "F16", "F32", "F64"})
_DIGITS = re.compile(r"^\d+$")


def leaf(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def module_of(name: str) -> str:
    return name.rsplit(".", 1)[0] if "." in name else ""


def family_of(module: str) -> str:
    """`model.layers.3.mlp.experts.7.gate_proj` → `model.layers.*.mlp.experts.*.gate_proj`."""
    return ".".join("*" if _DIGITS.match(p) else p for p in module.split("."))


def top_prefix(name: str) -> str:
    """Module path up to the first numeric index or the leaf: 3 components under `model.`, else the first one."""
    parts = name.split(".")
    max_depth = 3 if parts[0] == "model" else 1
    out: list[str] = []
    for i, p in enumerate(parts):
        if _DIGITS.match(p) or i == len(parts) - 1 or len(out) == max_depth:
            break
        out.append(p)
    return ".".join(out) or name


def glob_to_regex(pattern: str) -> re.Pattern[str]:
    """ModelOpt exclude patterns are glob-ish: `*` → `.*`, full match on the module name."""
    return re.compile(".*".join(re.escape(p) for p in pattern.split("*")))


@dataclass(frozen=True)
class MtpLayout:
    """Where one family of architectures keeps its built-in MTP/NextN head in the checkpoint, as SGLang 0.5.23 loads it."""

    kind: str
    """`mtp`, `nextn`, `mtp_layers` or `mtp_block` (the value of MtpEvidence.kind)."""
    prefix: str
    """The tensor-name prefix for humans, e.g. `model.mtp_layers.{i}.*`."""
    pattern: str
    """Regex matched at the start of a tensor name; group 1, when present, is the layer index."""
    config_key: str
    """The config.json key giving the number of MTP/NextN layers."""
    architectures: tuple[str, ...]
    source: str
    """The SGLang 0.5.23 file(s) whose weight loading this rule was read from (under sglang/srt/models/)."""


MTP_LAYOUTS: tuple[MtpLayout, ...] = (
    MtpLayout("mtp", "mtp.* or model.mtp.*", r"(?:model\.|language_model\.|llm\.)?mtp\.(?:layers\.)?(\d+)?",
              "mtp_num_hidden_layers (Qwen3.5 text_config) or num_nextn_predict_layers",
              ("Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration", "Qwen3_5ForCausalLM",
               "Qwen3_5MoeForCausalLM", "Qwen3NextForCausalLM", "Qwen3MoeForCausalLM", "ExaoneMoEForCausalLM",
               "ExaoneMoeForCausalLM", "Qwen4ExpForConditionalGeneration", "NemotronHForCausalLM",
               "NemotronHPuzzleForCausalLM", "IQuestQ1ForCausalLM", "DeepseekV4ForCausalLM",
               "LongcatFlashForCausalLM", "MiMoV2ForCausalLM", "MiMoV2FlashForCausalLM", "InklingForConditionalGeneration"),
              "qwen3_5_mtp.py, qwen3_next.py / qwen3_moe.py / exaone_moe.py load_weights(is_mtp) ('mtp' → 'model'), "
              "qwen4_exp_mtp.py, nemotron_h_mtp.py (mtp.layers.*), iquest_q1_mtp.py, deepseek_v4_nextn.py (mtp.0.*), "
              "longcat_flash_nextn.py / mimo_v2_nextn.py / dots3_common/nextn.py (model.mtp.*), inkling.py"),
    MtpLayout("nextn", "model.layers.{num_hidden_layers + i}.*", r"model\.(?:language_model\.)?layers\.(\d+)\.",
              "num_nextn_predict_layers",
              ("DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "GlmMoeDsaForCausalLM", "Glm4MoeForCausalLM",
               "Glm4MoeLiteForCausalLM", "GlmOcrForConditionalGeneration", "Glm5NextForConditionalGeneration",
               "BailingMoeForCausalLM", "BailingMoeV2ForCausalLM", "BailingMoeV2_5ForCausalLM",
               "BailingMoeV3ForCausalLM", "Step3p5ForCausalLM", "GigaChat35ForCausalLM", "HYV3ForCausalLM"),
              "deepseek_nextn.py, glm4_moe.py load_weights(is_nextn), glm5_next_nextn.py (also "
              "model.language_model.layers.{n}), bailing_moe_nextn.py, step3p5_mtp.py, gigachat35_mtp.py, "
              "hunyuan_v3_nextn.py"),
    MtpLayout("mtp_layers", "model.mtp_layers.{i}.*", r"model\.mtp_layers\.(\d+)\.", "num_nextn_predict_layers",
              ("MiMoForCausalLM", "HYV4ForCausalLM"),
              "mimo_mtp.py map_model_name_to_mtp_param_name (mimo.py skips mtp_layers), hunyuan_v4_nextn.py"),
    MtpLayout("mtp_block", "model.mtp_{block,emb_norm,hidden_norm,linear_proj}.{i}.*",
              r"model\.mtp_(?:block|emb_norm|hidden_norm|linear_proj)\.(\d+)\.", "num_nextn_predict_layers",
              ("Ernie4_5_MoeForCausalLM",),
              "ernie4_eagle.py Ernie4_5_MoeForCausalLMMTP.load_weights (ernie4.py skips model.mtp_*)"),
)
"""Every built-in MTP/NextN weight layout SGLang 0.5.23 serves with NEXTN (draft architectures chosen in
sglang/srt/configs/model_config.py `_config_draft_model`). The `nextn` rule only counts layer indices at or past
num_hidden_layers."""


def layouts_for(architectures: list[str]) -> list[MtpLayout]:
    """The layouts SGLang loads for these architectures (all of them when none is known)."""
    known = [lay for lay in MTP_LAYOUTS if any(a in lay.architectures for a in architectures)]
    return known or list(MTP_LAYOUTS)


class Classifier:
    """Sorts tensor names into mtp / vision / routed_expert / embedding / other."""

    def __init__(self, cfg: ModelConfig) -> None:
        n = cfg.num_hidden_layers
        self._n_layers = n if n is not None else 0
        self._has_layers = n is not None
        self._rules = [(lay, re.compile(lay.pattern)) for lay in MTP_LAYOUTS
                       if lay.kind != "nextn" or n is not None]

    def mtp_match(self, name: str) -> Optional[tuple[MtpLayout, Optional[int]]]:
        """The MTP/NextN layout a tensor name belongs to and its layer index (None when not an MTP tensor)."""
        for lay, rx in self._rules:
            m = rx.match(name)
            if m is None:
                continue
            digits = m.group(1)
            # the header reader refuses such names; an index's weight_map may still hold one
            idx = int(digits) if digits is not None and len(digits) <= MAX_INDEX_DIGITS else None
            if lay.kind == "nextn" and (idx is None or idx < self._n_layers):
                continue
            return lay, idx
        return None

    def nextn_layer(self, name: str) -> Optional[int]:
        hit = self.mtp_match(name)
        return hit[1] if hit is not None and hit[0].kind == "nextn" else None

    def kind(self, name: str) -> str:
        if self.mtp_match(name) is not None:
            return "mtp"
        if "visual." in name or "vision_tower" in name or "vision_model" in name:
            return "vision"
        if ".experts." in name and "shared_expert" not in name:
            return "routed_expert"
        if "embed_tokens" in name or name.endswith(("wte.weight", "word_embeddings.weight")):
            return "embedding"
        return "other"


def is_nvfp4_packed(name: str, info: TensorInfo, tensors: dict[str, TensorInfo]) -> bool:
    sib = tensors.get(module_of(name) + ".weight_scale")
    return leaf(name) == "weight" and info.dtype == "U8" and sib is not None and sib.dtype == "F8_E4M3"


def param_count(name: str, info: TensorInfo, tensors: dict[str, TensorInfo]) -> int:
    if leaf(name) in SCALE_LEAVES:
        return 0
    if is_nvfp4_packed(name, info, tensors):
        return 2 * info.numel
    return info.numel


@dataclass
class MtpEvidence:
    verdict: str
    """present | declared_but_absent | not_declared_but_present | absent"""
    kind: Optional[str]
    """The MtpLayout kind found: `mtp` (`mtp.*`, `model.mtp.*`), `nextn` (`model.layers.{num_hidden_layers}.*`),
    `mtp_layers` (MiMo `model.mtp_layers.{i}.*`), `mtp_block` (Ernie 4.5) or None."""
    layout: Optional[str]
    """The found layout's tensor-name prefix (MTP_LAYOUTS), None when no MTP tensor was found."""
    layout_source: Optional[str]
    """The SGLang model file(s) that load that layout."""
    expected_layouts: list[str]
    """The prefixes SGLang loads for the config's architecture (every known one for an unknown architecture)."""
    layout_matches_architecture: Optional[bool]
    """False when the weights use a layout SGLang does not load for this architecture (None: unknown arch or none)."""
    declared: bool
    declared_layers: int
    declared_in: Optional[str]
    index_tensors: Optional[int]
    """MTP/NextN tensor names in model.safetensors.index.json (None when there is no index)."""
    header_tensors: int
    layers_found: list[int]
    fc_tensor: Optional[str]
    fc_dtype: Optional[str]
    weight_format: Optional[str]
    """BF16 | F16 | F32 | NVFP4 (U8 + F8_E4M3 scales) | FP8 | mixed."""
    dtypes: dict[str, int]
    has_weight_scale: bool
    excluded_in_quant_config: bool
    looked_in: list[str] = field(default_factory=list)
    exclude_pattern: Optional[str] = None
    """The quantization config's exclude/ignore pattern that covers the MTP head (None: none does)."""

    @property
    def weights_present(self) -> bool:
        return self.header_tensors > 0

    def to_json(self) -> dict[str, JsonValue]:
        return asdict(self)


def mtp_evidence(
    cfg: ModelConfig,
    quant: QuantInfo,
    cls: Classifier,
    index_names: Optional[list[str]],
    tensors: dict[str, TensorInfo],
    looked_in: list[str],
) -> MtpEvidence:
    mtp_names = [n for n in tensors if cls.kind(n) == "mtp"]
    kind: Optional[str] = None
    layout: Optional[MtpLayout] = None
    layers: set[int] = set()
    for n in sorted(mtp_names):
        hit = cls.mtp_match(n)
        if hit is None:
            continue
        lay, idx = hit
        if layout is None or (layout.kind == "nextn" and lay.kind != "nextn"):
            layout = lay
    for n in mtp_names:  # the found layout's layers only: past num_hidden_layers beside mtp.* is a decoder layer
        hit = cls.mtp_match(n)
        if hit is not None and hit[0] is layout and hit[1] is not None:
            layers.add(hit[1])
    kind = layout.kind if layout else None
    expected = layouts_for(cfg.architectures)
    fc: Optional[str] = next((n for n in ("mtp.fc.weight", "model.mtp.fc.weight") if n in tensors), None)
    if fc is None:
        fc = next((n for n in sorted(mtp_names) if n.endswith((".eh_proj.weight", ".input_proj.weight",
                                                                 ".mtp_linear_proj.0.weight"))), None)
    dtypes: dict[str, int] = {}
    for n in mtp_names:
        dtypes[tensors[n].dtype] = dtypes.get(tensors[n].dtype, 0) + 1
    weight_dtypes = set()
    for n in mtp_names:
        if leaf(n) == "weight" and len(tensors[n].shape) >= 2:
            weight_dtypes.add("NVFP4" if is_nvfp4_packed(n, tensors[n], tensors) else tensors[n].dtype)
    weight_dtypes = {"FP8" if d.startswith("F8_") else d for d in weight_dtypes}
    fmt = None if not weight_dtypes else (weight_dtypes.pop() if len(weight_dtypes) == 1 else "mixed")
    probes = ["mtp", "mtp.fc", "mtp.layers.0.mlp.experts.0.gate_proj"]
    pattern = next((p for p in quant.exclude_modules if any(glob_to_regex(p).fullmatch(m) for m in probes)), None)
    excluded = pattern is not None
    declared = cfg.mtp is not None
    present = bool(mtp_names)
    verdict = {
        (True, True): "present",
        (True, False): "declared_but_absent",
        (False, True): "not_declared_but_present",
        (False, False): "absent",
    }[(declared, present)]
    return MtpEvidence(
        verdict=verdict,
        kind=kind,
        layout=layout.prefix if layout else None,
        layout_source=layout.source if layout else None,
        expected_layouts=[lay.prefix for lay in expected],
        layout_matches_architecture=None if layout is None or len(expected) == len(MTP_LAYOUTS) else layout in expected,
        declared=declared,
        declared_layers=cfg.mtp.layers if cfg.mtp else 0,
        declared_in=cfg.mtp.key if cfg.mtp else None,
        index_tensors=None if index_names is None else sum(1 for n in index_names if cls.kind(n) == "mtp"),
        header_tensors=len(mtp_names),
        layers_found=sorted(layers),
        fc_tensor=fc,
        fc_dtype=tensors[fc].dtype if fc else None,
        weight_format=fmt,
        dtypes=dict(sorted(dtypes.items())),
        has_weight_scale=any(leaf(n) == "weight_scale" for n in mtp_names),
        excluded_in_quant_config=excluded,
        looked_in=looked_in,
        exclude_pattern=pattern,
    )


@dataclass
class ParamCounts:
    total: int
    target: int
    """Language-model params without MTP/NextN and vision."""
    mtp: int
    vision: int
    routed_experts: int
    embedding: int
    active_per_token: int
    """Target params one token uses: routed experts × experts_per_tok/num_experts, embedding matrix counted whole."""
    active_per_token_excl_embedding: int
    decode_bytes_per_token: int
    """Weight bytes one batch-1 decode step reads: active target tensors incl. scales, embedding as one row."""
    decode_routed_expert_bytes_per_token: int
    mtp_bytes: int
    """Bytes of the MTP/NextN module (what one draft step reads besides the shared lm_head)."""
    bytes_by_dtype: dict[str, int]

    def to_json(self) -> dict[str, JsonValue]:
        return asdict(self)


def count_params(cfg: ModelConfig, cls: Classifier, tensors: dict[str, TensorInfo],
                 warnings: list[ProbeWarning]) -> ParamCounts:
    sums = {"mtp": 0, "vision": 0, "routed_expert": 0, "embedding": 0, "other": 0}
    bytes_ = dict(sums)
    embed_row_bytes = 0
    by_dtype: dict[str, int] = {}
    for name, info in tensors.items():
        k = cls.kind(name)
        sums[k] += param_count(name, info, tensors)
        bytes_[k] += info.nbytes
        by_dtype[info.dtype] = by_dtype.get(info.dtype, 0) + info.nbytes
        if k == "embedding" and info.shape:
            embed_row_bytes += info.nbytes // max(info.shape[0], 1)
    frac_num, frac_den = 1, 1
    if sums["routed_expert"]:
        if cfg.num_experts and cfg.num_experts_per_tok:
            frac_num, frac_den = cfg.num_experts_per_tok, cfg.num_experts
        else:
            warnings.append(ProbeWarning("experts-unknown", "routed-expert tensors found but config.json lacks "
                                         "num_experts/num_experts_per_tok: counting all experts as active"))
    active_experts = sums["routed_expert"] * frac_num // frac_den
    active_expert_bytes = bytes_["routed_expert"] * frac_num // frac_den
    target = sums["routed_expert"] + sums["embedding"] + sums["other"]
    return ParamCounts(
        total=sum(sums.values()),
        target=target,
        mtp=sums["mtp"],
        vision=sums["vision"],
        routed_experts=sums["routed_expert"],
        embedding=sums["embedding"],
        active_per_token=active_experts + sums["embedding"] + sums["other"],
        active_per_token_excl_embedding=active_experts + sums["other"],
        decode_bytes_per_token=active_expert_bytes + bytes_["other"] + embed_row_bytes,
        decode_routed_expert_bytes_per_token=active_expert_bytes,
        mtp_bytes=bytes_["mtp"],
        bytes_by_dtype=dict(sorted(by_dtype.items())),
    )


def quantized_families(tensors: dict[str, TensorInfo]) -> tuple[dict[str, int], dict[str, int]]:
    """Linear-like modules (2-D+ `.weight`) grouped by family: those with a weight_scale sibling, and those without."""
    quant: dict[str, int] = {}
    plain: dict[str, int] = {}
    for name, info in tensors.items():
        if leaf(name) != "weight" or len(info.shape) < 2:
            continue
        mod = module_of(name)
        fam = family_of(mod)
        target = quant if mod + ".weight_scale" in tensors else plain
        target[fam] = target.get(fam, 0) + 1
    return dict(sorted(quant.items())), dict(sorted(plain.items()))
