"""The environment variables sglbench itself sets for an engine server, each with who sets it: the one list the
spec refuses in server.env and a variant's env (cluster/config/experiment.py), since a value given there is either
overwritten without a word or overrides what the tool set (Ray's GPU pinning). A leaf module: stdlib and the pure
sglang_tuning facts only. The setters: engines/sim.py (SIM_ENV), engines/sglang.py (SPEC_V2_ENV),
tuning/stage.py (the tuning kinds' variables), distributed/actors.py (CUDA_VISIBLE_DEVICES)."""

from __future__ import annotations

from typing import Optional

from cluster.engines import sglang_tuning as sgt

CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
SIM_ENV = "SGLBENCH_SIM"
"""The simulator's knobs as JSON (the argv stays exactly SGLang's)."""
SPEC_V2_ENV = "SGLANG_ENABLE_SPEC_V2"

SET_FOR_EVERY_SERVER: dict[str, str] = {
    CUDA_VISIBLE_DEVICES: "Ray, from the GPUs it gives the server (tp GPUs, disjoint between servers)",
    SIM_ENV: "the spec's sim: block and a variant's sim: (the simulator's knobs)",
    # before 0.5.11 set to 1 when speculative decoding is on (a user's 0 would turn off the overlap scheduler the
    # comparison assumes); from 0.5.11 removed, as the default: either way the tool decides it from the version
    SPEC_V2_ENV: "sglbench, from the SGLang version and the variant's speculative: block",
}
"""Variables set for every server whatever its variant."""

SET_BY_TUNING: dict[str, dict[str, str]] = {
    "flashinfer_autotune": {sgt.ENV_CACHE_DIR: "the variant's tuning: block (flashinfer_autotune's cache)",
                            sgt.ENV_AUTOTUNE_CACHE: "the variant's tuning: block (flashinfer_autotune)",
                            sgt.ENV_AUTOTUNE_EXTEND: "the variant's tuning: block (flashinfer_autotune's extend)"},
    "triton_moe": {sgt.ENV_MOE_CONFIG_DIR: "the variant's tuning: block (triton_moe's config directory)"},
}
"""Variables a tuning kind sets for its variant's server (elsewhere SGLANG_CACHE_DIR is the user's to choose)."""


def set_by_sglbench(tuning_kind: Optional[str]) -> dict[str, str]:
    """Variable -> who sets it, for a server of a variant with this tuning kind (None: no tuning)."""
    return {**SET_FOR_EVERY_SERVER, **SET_BY_TUNING.get(tuning_kind or "", {})}
