"""What `sglbench doctor` reads on the node that will serve: one typed record per fact, each with why it is missing.

A fact that cannot be read is None with a `*_reason` beside it, so a check reports "unavailable: <why>" instead of
guessing. The records cross the Ray boundary as JSON (model_dump / model_validate), so they stay plain data.
"""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict


class _Record(BaseModel):
    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")


class FactQuery(_Record):
    """Where to look: the engine interpreter, the checkpoint and the directories runs write to."""

    python: Optional[str] = None
    """The engine's interpreter (engines.sglang.python); None: no SGLang interpreter to check."""
    model_path: Optional[str] = None
    disk_paths: tuple[str, ...] = ()
    """Directories that fill up during a run (dataset root, tuning artifacts, server logs)."""
    gateway: Optional[str] = None
    """SGLang's gateway executable (smg beside the engine's interpreter); None: not asked."""
    modules: tuple[str, ...] = ()
    """Python modules the engine's interpreter must import (a prefill/decode transfer backend's)."""
    shm_path: str = "/dev/shm"
    clocksource_dir: str = "/sys/devices/system/clocksource/clocksource0"


class GpuFact(_Record):
    index: int
    bus_id: Optional[str] = None
    compute_cap: Optional[str] = None
    """e.g. "12.0" (SM120), from `nvidia-smi --query-gpu=compute_cap`."""
    width_current: Optional[int] = None
    width_max: Optional[int] = None


class InterpreterFact(_Record):
    path: str
    runs: bool
    """The interpreter exists and printed its package versions."""
    reason: Optional[str] = None
    sglang_importable: bool = False
    """`import sglang` finds the package (importlib.util.find_spec in that interpreter; sglang itself not run)."""
    sglang_version: Optional[str] = None
    flashinfer_version: Optional[str] = None
    torch_version: Optional[str] = None


class GatewayFact(_Record):
    path: str
    runs: bool
    """`smg --version` ran and printed a version."""
    version: Optional[str] = None
    reason: Optional[str] = None


class ModuleFact(_Record):
    name: str
    importable: bool
    """`import <name>` succeeded in the engine's interpreter."""
    reason: Optional[str] = None
    """The import's error, its last line."""


class CheckpointFact(_Record):
    path: str
    readable: bool
    reason: Optional[str] = None
    """The probe's error (CheckpointError text) when not readable."""
    mtp_verdict: Optional[str] = None
    mtp_weights_present: bool = False
    tensors: int = 0


class DiskFact(_Record):
    path: str
    """The directory asked about; `measured_at` is its nearest existing ancestor (what statvfs measured)."""
    measured_at: Optional[str] = None
    free_bytes: Optional[int] = None
    writable: bool = False
    reason: Optional[str] = None


class NodeFacts(_Record):
    hostname: str
    gpus: Optional[tuple[GpuFact, ...]] = None
    gpus_reason: Optional[str] = None
    cuda_visible_devices: Optional[str] = None
    """CUDA_VISIBLE_DEVICES of the environment the server inherits (None: unset, every GPU visible)."""
    nvml_ok: Optional[bool] = None
    nvml_reason: Optional[str] = None
    topology_text: Optional[str] = None
    topology_reason: Optional[str] = None
    interpreter: Optional[InterpreterFact] = None
    gateway: Optional[GatewayFact] = None
    modules: tuple[ModuleFact, ...] = ()
    checkpoint: Optional[CheckpointFact] = None
    disks: tuple[DiskFact, ...] = ()
    shm_bytes: Optional[int] = None
    shm_reason: Optional[str] = None
    nofile_soft: Optional[int] = None
    nofile_hard: Optional[int] = None
    cpus: Optional[int] = None
    """CPUs this process may run on (sched_getaffinity)."""
    ray_node_id: Optional[str] = None
    """The Ray node the facts were collected on (None: not on a Ray cluster)."""
    ray_node_cpus: Optional[float] = None
    """The Ray node's CPU resource (None: not on a Ray cluster)."""
    ray_available_cpus: Optional[float] = None
    """CPU the Ray cluster has left unreserved right now."""
    cluster_gpus: Optional[tuple[int, ...]] = None
    """GPUs of each alive GPU node of the Ray cluster (None: not asked on a cluster)."""
    clocksource: Optional[str] = None
    clocksource_available: tuple[str, ...] = ()
    clocksource_reason: Optional[str] = None
