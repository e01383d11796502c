"""Would SGLang run a variant's --speculative-adaptive? Asked of SGLang's own code, never of a copy of its rules.

The parser probe (engines/flag_probe.py) resolves each adaptive argv with SGLang's launch pipeline
(`ServerArgs.resolve_once`) in the engine's interpreter, under the variant's environment, and reports what SGLang's
adaptive code did: `_maybe_disable_adaptive` (sglang/srt/arg_groups/speculative_hook.py:1374) turns the flag off,
with only a warning, wherever `adaptive_unsupported_reason` (sglang/srt/speculative/adaptive_spec_params.py:56)
gives a reason (another algorithm, a platform worker, topk != 1, attention DP, multi-layer EAGLE, two-batch overlap,
PD-mux); `_init_adaptive_speculative_params` (speculative_hook.py:1393) refuses a config it cannot read or a
--speculative-num-steps outside its candidates. Either is refused here, quoting SGLang's words, before any server.
The pipeline reads the checkpoint's config, so it runs where the model is: on the GPU node's preflight, and at
`plan`/`validate` where the SGLang interpreter and the checkpoint are both on this machine. The simulator's answer
comes from its own model of the rules (engines/sim_launch.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence

from cluster.config.experiment import ExperimentSpec
from cluster.errors import PreflightError
from cluster.kernel.runs import ResolvedVariant


@dataclass(frozen=True)
class AdaptiveVerdict:
    """SGLang's resolution of one adaptive argv (engines/flag_probe.py `adaptive_verdict`)."""

    reached: bool
    """SGLang's `_maybe_disable_adaptive` ran (the pipeline got as far as the adaptive checks)."""
    on: bool
    reason: Optional[str]
    """`adaptive_unsupported_reason`'s answer, or the error `_init_adaptive_speculative_params` raised."""
    error: Optional[str]
    """Where the pipeline stopped, if it did."""


def is_adaptive(v: ResolvedVariant) -> bool:
    return v.speculative is not None and v.speculative.adaptive_config is not None


def adaptive_here(group: Sequence[ResolvedVariant], python: str) -> list[ResolvedVariant]:
    """The adaptive variants SGLang's pipeline can resolve on this machine: its interpreter and the checkpoint here."""
    if "/" in python and not Path(python).exists():
        return []
    return [v for v in group if is_adaptive(v) and Path(v.model_path).exists()]


def resolve_envs(group: Sequence[ResolvedVariant]) -> dict[str, dict[str, str]]:
    """variant -> the environment its server runs in, for the adaptive variants (SGLang's pipeline reads env vars)."""
    return {v.name: dict(v.env) for v in group if is_adaptive(v)}


def _field(spec: ExperimentSpec, v: ResolvedVariant) -> str:
    index = next((i for i, sv in enumerate(spec.variants) if sv.name == (v.family or v.name)), None)
    return f"variants.{index}.speculative.adaptive" if index is not None else "variants"


def check_adaptive(spec: ExperimentSpec, group: Sequence[ResolvedVariant], verdicts: Mapping[str, AdaptiveVerdict],
                   engine_label: str) -> list[str]:
    """Refuse (PreflightError) the first adaptive variant SGLang would refuse or silently turn off, in SGLang's words;
    warnings for those its pipeline could not judge here."""
    warnings: list[str] = []
    for v in group:
        verdict = verdicts.get(v.name)
        if verdict is None or not is_adaptive(v):
            continue
        where = _field(spec, v)
        if verdict.reached and not verdict.on and verdict.reason and verdict.error is None:
            steps = v.speculative.num_steps if v.speculative else None
            raise PreflightError(
                f"{where}: variant {v.name!r}: {engine_label} would silently turn --speculative-adaptive off and serve "
                f"the static depth {steps} (its _maybe_disable_adaptive warns 'speculative_adaptive disabled: "
                f"{verdict.reason}. Falling back to static speculative params.'); adaptive_unsupported_reason: "
                f"{verdict.reason}", field=where,
                expected="a configuration SGLang runs adaptive speculation with (EAGLE/NEXTN, topk 1, no attention DP, "
                         "no two-batch overlap, no PD-mux)")
        if verdict.reason and verdict.error is not None:
            raise PreflightError(f"{where}: variant {v.name!r}: {engine_label} refuses the adaptive configuration: "
                                 f"{verdict.reason}", field=where,
                                 expected="an adaptive config SGLang reads, with --speculative-num-steps among its "
                                          "candidate steps")
        if not verdict.on:
            why = verdict.error or "adaptive was off after resolution without a reason"
            warnings.append(f"warning: adaptive speculation of {v.name} not judged by {engine_label}'s own code here: "
                            f"its launch pipeline stopped first ({why}); the run checks /server_info")
    return warnings
