"""Environment capture for a run: engine/library versions, CUDA and driver, GPUs, hostname — every part optional."""

from __future__ import annotations

import json
import socket
import subprocess
from typing import Optional, Sequence

from cluster.engines.registry import reported_packages
from cluster.input_files import JsonValue

_PROBE = r"""
import importlib.metadata as m, json
out = {"packages": {}}
for name in %r:
    try:
        out["packages"][name] = m.version(name)
    except Exception:
        pass
try:
    import torch
    out["torch_cuda"] = torch.version.cuda
    if torch.cuda.is_available():
        out["torch_gpus"] = [
            {"name": torch.cuda.get_device_name(i),
             "memory_mib": torch.cuda.get_device_properties(i).total_memory // (1 << 20),
             "capability": ".".join(map(str, torch.cuda.get_device_capability(i)))}
            for i in range(torch.cuda.device_count())
        ]
except Exception:
    pass
print(json.dumps(out))
"""

NVIDIA_SMI_FIELDS = ("index", "name", "memory.total", "clocks.max.sm", "clocks.max.memory", "driver_version",
                     "pci.bus_id", "power.limit")


def _run(argv: Sequence[str], timeout_s: float) -> Optional[str]:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def nvidia_smi_gpus(timeout_s: float = 20.0) -> list[dict[str, str]]:
    """One dict per GPU from nvidia-smi's CSV query (empty where nvidia-smi is absent or fails)."""
    out = _run(["nvidia-smi", f"--query-gpu={','.join(NVIDIA_SMI_FIELDS)}", "--format=csv,noheader,nounits"],
               timeout_s)
    gpus: list[dict[str, str]] = []
    for line in (out or "").splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == len(NVIDIA_SMI_FIELDS):
            gpus.append(dict(zip(NVIDIA_SMI_FIELDS, cells)))
    return gpus


def cuda_driver_version(timeout_s: float = 20.0) -> Optional[str]:
    """The CUDA version the driver supports, from nvidia-smi's banner."""
    out = _run(["nvidia-smi"], timeout_s) or ""
    for token in out.split("CUDA Version:")[1:2]:
        return token.split()[0].strip(" |") or None
    return None


def engine_packages(python: Optional[str], timeout_s: float = 60.0) -> dict[str, JsonValue]:
    """Package versions and torch's CUDA/GPU view as seen by the engine's own interpreter ({} on any failure)."""
    if not python:
        return {}
    out = _run([python, "-c", _PROBE % (reported_packages(),)], timeout_s)
    if not out:
        return {}
    try:
        doc = json.loads(out.strip().splitlines()[-1])
    except (ValueError, RecursionError, IndexError):  # junk, the digit limit, or nesting past the decoder's stack
        return {}
    return doc if isinstance(doc, dict) else {}


def capture_environment(python: Optional[str] = None, timeout_s: float = 60.0) -> dict[str, JsonValue]:
    """Everything known about where a run executes; never raises, missing parts are simply absent."""
    env: dict[str, JsonValue] = {"hostname": socket.gethostname()}
    probed = engine_packages(python, timeout_s)
    env["packages"] = probed.get("packages", {})
    if probed.get("torch_cuda"):
        env["torch_cuda"] = probed["torch_cuda"]
    gpus = nvidia_smi_gpus(min(timeout_s, 20.0))
    if gpus:
        env["gpus"] = gpus
        env["driver_version"] = gpus[0].get("driver_version")
        cuda = cuda_driver_version(min(timeout_s, 20.0))
        if cuda:
            env["cuda_driver"] = cuda
    elif probed.get("torch_gpus"):
        env["gpus"] = probed["torch_gpus"]
    from cluster.engines.interconnect import collect_interconnect

    # topology, PCIe links, P2P, NCCL_/CUDA_ env, IOMMU: {"available": false, "reason": ...} without nvidia-smi
    env["interconnect"] = collect_interconnect().to_json()
    return env
