"""Adapter for the simulated engine: SGLang's own argv and wire format, served by `python -m cluster.sim.server`."""

from __future__ import annotations

import json
from typing import Optional

from cluster.engines.sglang import SGLangEngine
from cluster.plan.runs import ResolvedVariant

SIM_ENV = "SGLBENCH_SIM"
"""Environment variable carrying the simulator's knobs as JSON (the argv stays exactly SGLang's)."""


class SimEngine(SGLangEngine):
    name = "sim"
    module = "cluster.sim.server"

    def server_env(self, variant: ResolvedVariant, version: Optional[str]) -> dict[str, str]:
        env = super().server_env(variant, version)
        env[SIM_ENV] = json.dumps(variant.sim.wire(), sort_keys=True)  # validated again by the server (sim/model.py)
        return env
