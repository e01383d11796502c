"""The figures the load generator computes over a window's requests itself, each defined once: the run-scoped
acceptance length (tokens per verify step after the prefill token) and the client's send lag.

Here, below both, so the load generator (the gate's acceptance, the window's lag) and the analysis (the runs row's
accept_length and m_lag_ms_*, analysis/metrics.py) use one definition without loadgen importing analysis."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class Acceptance:
    """Run-scoped acceptance over requests with spec_verify_ct > 0 (None when there are none)."""

    accept_length: Optional[float]
    """Σ(output_tokens - 1) / Σ spec_verify_ct: tokens per verify step after the prefill token (all engines)."""
    sglang_accept_length: Optional[float]
    """Σ output_tokens / Σ spec_verify_ct: SGLang's own meta_info figure, named as SGLang's."""
    verify_steps: int


def acceptance(output_tokens: npt.ArrayLike, spec_verify_ct: npt.ArrayLike) -> Acceptance:
    """The one acceptance definition: over the entries with spec_verify_ct > 0 (the caller passes ok requests)."""
    tok = np.asarray(output_tokens, dtype=np.float64)
    svc = np.asarray(spec_verify_ct, dtype=np.float64)
    spec = svc > 0
    steps = float(svc[spec].sum())
    if not spec.any():
        return Acceptance(None, None, 0)
    return Acceptance(float((tok[spec] - 1).sum() / steps), float(tok[spec].sum() / steps), int(steps))


@dataclass(frozen=True)
class ClientLag:
    """Client send lag over every request of a window (LAG): numpy linear-interpolation percentiles, in ns."""

    p50_ns: float
    p99_ns: float
    max_ns: float


def client_lag(lag_ns: npt.ArrayLike) -> Optional[ClientLag]:
    """The one client-lag computation, from per-request actual_send_ns - intended_send_ns (None when empty):
    the runner reports it, the runs row stores it (m_lag_ms_*) and validity is judged on that stored figure."""
    x = np.asarray(lag_ns, dtype=np.float64)
    if x.size == 0:
        return None
    p50, p99 = np.percentile(x, [50, 99])
    return ClientLag(float(p50), float(p99), float(x.max()))
