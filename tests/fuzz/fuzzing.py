"""Shared settings of the boundary fuzz targets: seeded, bounded, no network, scaled by one environment variable.

CI runs each target with a fixed seed and `FUZZ_EXAMPLES` examples (deterministic, a few seconds each);
`scripts/fuzz.sh` runs the same targets longer (SGLBENCH_FUZZ_EXAMPLES=5000 by default there).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

FUZZ_EXAMPLES = int(os.environ.get("SGLBENCH_FUZZ_EXAMPLES", "150"))
"""Examples per target: CI's default keeps every target to a few seconds on a 2-core machine."""

FUZZ = settings(max_examples=FUZZ_EXAMPLES, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
"""Apply as @FUZZ: derandomized (the seed is fixed by the test's own name), no example database written."""


def budget(n: int) -> int:
    """A target's example count scaled by SGLBENCH_FUZZ_EXAMPLES against CI's default (for costly targets)."""
    return max(1, n * FUZZ_EXAMPLES // 150)
