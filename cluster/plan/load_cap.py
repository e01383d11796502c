"""Load points above a variant's own admission cap: a warning, not a refusal.

A closed loop of concurrency N against a server that runs at most `--max-running-requests` M < N queues the other
N - M requests inside the server: that is a real measurement (saturation, queueing in TTFT), so the point stays,
but validate and plan say it, since the figure is M running requests and not N. An open loop's rate has no such
bound, and a concurrency search is clamped at the server's reported cap at run time (plan/capacity.py)."""

from __future__ import annotations

from typing import Sequence

from cluster.engines.registry import cap_flags
from cluster.kernel.runs import ResolvedVariant
from cluster.config.experiment import ExperimentSpec


def load_above_cap(spec: ExperimentSpec, variants: Sequence[ResolvedVariant]) -> list[str]:
    """One warning per variant whose declared admission cap is below the experiment's largest concurrency."""
    if not spec.load.concurrency:
        return []
    top = max(spec.load.concurrency)
    out: list[str] = []
    for v in variants:
        caps = [(k, val) for k, val in v.args.items() if k.replace("_", "-") in cap_flags(v.engine)
                and isinstance(val, int) and not isinstance(val, bool)]
        for key, cap in caps:
            if cap < top:
                out.append(f"warning: variant {v.name!r}: load.concurrency {top} is above its --{key.replace('_', '-')} "
                           f"{cap}: the server runs at most {cap} requests at once and queues the rest (their wait "
                           f"is in TTFT); the point measures saturation at {cap}, not {top} running")
    return out
