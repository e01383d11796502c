"""The simulator's side of the tuning contract: reads SGLANG_CACHE_DIR / SGLANG_MOE_CONFIG_DIR like SGLang does.

- A tuned speed factor applies only when a valid artifact is present: a FlashInfer autotune cache whose
  `_metadata` matches this (simulated) GPU and FlashInfer version under the `<hash16>` of the launch's key args,
  or a Triton MoE config file named for this GPU's (E, N, dtype) under `configs/triton_<ver>/`.
- With autotuning on and SGLANG_CACHE_DIR set but no cache, the simulator "tunes" (sleeps autotune_time_s, scaled)
  and writes per-rank files in SGLang's layout, exactly what the tuning stage archives. It never writes anywhere
  when SGLANG_CACHE_DIR is unset.
- `garbage_backends` lists back ends that produce garbage (NaN text), so the correctness gate can be exercised.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Union

from cluster.engines import sglang_tuning as sgt
from cluster.config.sim_knobs import Knobs
from cluster.engines.tuning_contract import moe_shape
from cluster.engines.tuning_surfaces import sim_moe_config
from cluster.input_files import JsonObject, JsonValue

TUNING_KNOBS = ("gpu_name", "compute_capability", "driver_version", "flashinfer_version", "triton_version",
                "autotune_speed_factor", "moe_config_speed_factor", "autotune_time_s", "garbage_backends",
                "backend_speed_factors", "moe_num_experts", "moe_intermediate_size", "moe_hidden_size", "moe_top_k",
                "moe_dtype")
"""The knobs of `Knobs` (cluster/config/sim_knobs.py, the one knob model) that this module reads."""

SimTuningKnobs = Knobs
"""The tuning side of the simulator's knobs is the same model (cluster/config/sim_knobs.py)."""


def split_knobs(raw: Union[Knobs, JsonObject, None]) -> tuple[Knobs, dict[str, JsonValue]]:
    """(knobs with the tuning knobs of `raw` validated, the remaining raw knobs); KnobError naming a bad knob.
    Given validated knobs (a variant's `sim`), returns them and nothing left over."""
    if isinstance(raw, Knobs):
        return raw, {}
    rest = dict(raw or {})
    mine = {k: rest.pop(k) for k in list(rest) if k in TUNING_KNOBS}
    return Knobs.from_mapping(mine), rest


def _arg(args: JsonObject, name: str, default: JsonValue) -> Any:
    for key in (name, name.replace("-", "_"), "fp4_gemm_runner_backend" if name == sgt.FLAG_FP4_BACKEND else ""):
        if key in args and args[key] is not None:
            return args[key]
    return default


def autotune_cache_dir(args: JsonObject, cache_root: str, k: SimTuningKnobs) -> Path:
    digest = sgt.autotune_config_digest(args, str(_arg(args, "model-path", "")), int(_arg(args, "tp-size", 1)))
    return Path(cache_root) / sgt.autotune_dir_relpath(k.flashinfer_version, sgt.sm_tag(k.compute_capability), digest)


def autotune_file_doc(args: JsonObject, rank: int, k: SimTuningKnobs) -> dict[str, JsonValue]:
    """A per-rank cache document: FlashInfer-style `_metadata` plus deterministic tactics per num_tokens bucket."""
    buckets = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
    moe = str(_arg(args, sgt.FLAG_MOE_BACKEND, "auto"))
    seed = sum(ord(c) for c in moe)
    tactics = {op: {str(b): (seed + i * 7 + b.bit_length() * 3) % 23 for b in buckets}
               for i, op in enumerate(("trtllm::fused_moe::gemm1", "trtllm::fused_moe::gemm2", "fp4_gemm"))}
    return {"_metadata": {"flashinfer_version": k.flashinfer_version, "gpu_name": k.gpu_name, "cuda": "sim",
                          "tp_rank": rank}, "tactics": tactics}


def write_autotune_cache(args: JsonObject, cache_root: str, k: SimTuningKnobs) -> list[Path]:
    """Tuning mode: write `rank_tp<r>_pp0_dp0.json` for every TP rank, in SGLang's layout under cache_root."""
    d = autotune_cache_dir(args, cache_root, k)
    d.mkdir(parents=True, exist_ok=True)
    out = []
    for r in range(int(_arg(args, "tp-size", 1))):
        p = d / sgt.autotune_rank_file(r)
        p.write_text(json.dumps(autotune_file_doc(args, r, k), sort_keys=True, indent=1))
        out.append(p)
    return out


def valid_autotune_cache(args: JsonObject, cache_root: str, k: SimTuningKnobs) -> bool:
    """Every rank's file present, parseable, with metadata matching this GPU and FlashInfer (else SGLang re-tunes)."""
    d = autotune_cache_dir(args, cache_root, k)
    for r in range(int(_arg(args, "tp-size", 1))):
        try:
            doc = json.loads((d / sgt.autotune_rank_file(r)).read_text())
        except (OSError, ValueError):
            return False
        meta = doc.get("_metadata") if isinstance(doc, dict) else None
        if not isinstance(meta, dict) or meta.get("flashinfer_version") != k.flashinfer_version \
                or meta.get("gpu_name") != k.gpu_name or not isinstance(doc.get("tactics"), dict):
            return False
    return True


def moe_config_path(config_root: str, k: SimTuningKnobs, tp: int) -> Path:
    shape = moe_shape(sim_moe_config(k), tp, 1, k.moe_dtype)
    return Path(config_root) / sgt.moe_config_relpath(k.triton_version, shape.file_name(k.gpu_name))


@dataclass
class TuningEffect:
    """What the tuning contract does to one simulated launch."""

    speed_factor: float = 1.0
    garbage: bool = False
    autotune: str = "off"
    """off | loaded | tuned | no_cache_dir | disabled"""
    moe_config: str = "off"
    """off | loaded | default"""
    notes: list[str] = field(default_factory=list)


def startup_effect(args: JsonObject, env: Mapping[str, str], k: SimTuningKnobs, time_scale: float = 1.0,
                   log: Callable[[str], None] = lambda s: None, sleep: Callable[[float], None] = time.sleep
                   ) -> TuningEffect:
    """Decide speed factor and garbage for a launch; in tuning mode (autotune on, no cache) write the cache."""
    eff = TuningEffect()
    moe = str(_arg(args, sgt.FLAG_MOE_BACKEND, "auto"))
    fp4 = str(_arg(args, sgt.FLAG_FP4_BACKEND, "auto"))
    for b in (moe, fp4):
        eff.speed_factor *= k.backend_speed_factors.get(b, 1.0)
        if b in k.garbage_backends:
            eff.garbage = True
            eff.notes.append(f"back end {b} produces garbage on this (simulated) GPU")
    if _arg(args, sgt.FLAG_DISABLE_AUTOTUNE, False):
        eff.autotune = "disabled"
    elif sgt.autotune_applies({sgt.FLAG_MOE_BACKEND: moe, sgt.FLAG_FP4_BACKEND: fp4}):
        root = env.get(sgt.ENV_CACHE_DIR)
        if not root:
            eff.autotune = "no_cache_dir"
            log("FlashInfer autotune not simulated: SGLANG_CACHE_DIR is unset (the simulator never writes to ~)")
        elif valid_autotune_cache(args, root, k):
            eff.autotune = "loaded"
            eff.speed_factor *= k.autotune_speed_factor
            log(f"Loaded FlashInfer autotune cache from {autotune_cache_dir(args, root, k)}")
        else:
            log("Running FlashInfer autotune ...")
            sleep(k.autotune_time_s * time_scale)
            write_autotune_cache(args, root, k)
            eff.autotune = "tuned"
            eff.speed_factor *= k.autotune_speed_factor
            log("FlashInfer autotune completed")
    moe_root = env.get(sgt.ENV_MOE_CONFIG_DIR)
    if moe in sgt.TRITON_MOE_BACKENDS and moe_root:
        p = moe_config_path(moe_root, k, int(_arg(args, "tp-size", 1)))
        try:
            ok = sgt.valid_moe_config(json.loads(p.read_text()))
        except (OSError, ValueError):
            ok = False
        if ok:
            eff.moe_config = "loaded"
            eff.speed_factor *= k.moe_config_speed_factor
            log(f"Using MoE kernel config from {p}")
        else:
            eff.moe_config = "default"
            log(f"Using default MoE kernel config. Performance might be sub-optimal! Config file not found at {p}")
    return eff
