"""Adapter for the simulated engine: SGLang's own argv and wire format, served by `python -m cluster.sim.server`."""

from __future__ import annotations

import json
from typing import Any, Mapping, Optional, Sequence

from cluster.engines.base import HttpRequest
from cluster.engines.server_env import SIM_ENV
from cluster.engines.sglang import SGLangEngine
from cluster.engines.tuning_surfaces import SimTuningSurface
from cluster.kernel.runs import ResolvedVariant
from cluster.telemetry.readings import GpuReading
from cluster.version import SGLANG_RELEASE

DEVICE_PATH = "/sim_device"
"""The simulator's device readings (not an SGLang endpoint): what NVML would report for each of its GPUs."""
_READING_FIELDS = frozenset(GpuReading.__dataclass_fields__)


class SimEngine(SGLangEngine):
    name = "sim"
    label = f"SGLang {SGLANG_RELEASE} (simulated)"
    module = "cluster.sim.server"
    simulated = True
    tuning_surface = SimTuningSurface
    checkpoint_probed = False
    flag_parser = None
    flags_parsed_here = True
    adaptive_resolved = False

    def runs_on_cpu(self, variant: ResolvedVariant) -> bool:
        """Always: the simulator computes nothing on a GPU (it models one)."""
        return True

    def profile_request(self, output_dir: str, steps: int, profile_id: str, cpu: bool) -> Optional[HttpRequest]:
        """Asked as SGLang on a GPU is (CPU and GPU activities): its trace is of the GPU it models, whatever
        runs_on_cpu says about where it computes."""
        return super().profile_request(output_dir, steps, profile_id, cpu=False)

    def server_env(self, variant: ResolvedVariant, version: Optional[str]) -> dict[str, str]:
        env = super().server_env(variant, version)
        env[SIM_ENV] = json.dumps(variant.sim.wire(), sort_keys=True)  # validated again by the server (sim/model.py)
        return env

    def device_sampler(self, variant: ResolvedVariant, base_url: str, gpu_ids: Sequence[str]) -> "SimDeviceSampler":
        """The simulated device model, read over the server's /sim_device (the same sampler interface as NVML)."""
        return SimDeviceSampler(base_url, gpu_ids, self.headers)


class SimDeviceSampler:
    """Reads the simulated server's device model; its GPUs are relabelled with the ids Ray gave the server."""

    source = "sim"

    def __init__(self, base_url: str, gpu_ids: Sequence[str], headers: Mapping[str, str], timeout_s: float = 2.0):
        self.url = base_url + DEVICE_PATH
        self.gpu_ids = list(gpu_ids)
        self.headers = dict(headers)
        self.timeout_s = timeout_s

    def sample(self) -> list[GpuReading]:
        import urllib.request

        req = urllib.request.Request(self.url, headers=self.headers)
        with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:  # noqa: S310 - loopback URL we built
            doc: Any = json.loads(resp.read())
        out = []
        for i, raw in enumerate(doc.get("gpus") or []):
            fields = {k: v for k, v in raw.items() if k in _READING_FIELDS}
            if i < len(self.gpu_ids):
                fields["gpu"] = self.gpu_ids[i]
            out.append(GpuReading(**fields))
        return out

    def close(self) -> None:
        return None
