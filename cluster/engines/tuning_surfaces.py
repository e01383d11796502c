"""Each engine's answers to the tuning stage (the TuningSurface protocol of cluster/tuning/jobs.py): the simulator
declares its GPU, its model's MoE shape and its search device in its knobs; a real engine's GPU is probed on the node,
its model config read from the checkpoint, and its MoE search timed on the GPU."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional, Union

from cluster.config.sim_knobs import Knobs
from cluster.engines.tuning_contract import GpuFacts, MoeModelConfig
from cluster.kernel.runs import ResolvedVariant
from cluster.version import SGLANG_RELEASE


@dataclass(frozen=True)
class MoeSearchDevice:
    """Where a Triton fused-MoE search times its configs."""

    mode: Literal["cuda", "sim"]
    """cuda: on the worker's GPU (device name and Triton version are then the worker's own); sim: the cost model."""
    device_name: str = ""
    """The simulated GPU's name (sim only)."""
    triton_version: str = ""
    """The simulated Triton version (sim only)."""


def sim_moe_config(k: Knobs) -> MoeModelConfig:
    """The simulated model's MoE dimensions (a Qwen3.5-shaped MoE, not NVFP4), for the triton_moe shape mapping."""
    return MoeModelConfig(k.moe_num_experts, k.moe_intermediate_size, k.moe_hidden_size, k.moe_top_k)


def sim_gpu_facts(k: Knobs, gpu_count: int = 0) -> GpuFacts:
    """GpuFacts of the simulated GPU described by a variant's sim knobs (for artifact keys)."""
    return GpuFacts(gpu_name=k.gpu_name, compute_capability=k.compute_capability, driver_version=k.driver_version,
                    gpu_count=gpu_count, sglang_version=SGLANG_RELEASE, flashinfer_version=k.flashinfer_version,
                    triton_version=k.triton_version)


class SimTuningSurface:
    """The simulator: everything a tuning job depends on is declared in the variant's sim knobs."""

    def declared_gpu_facts(self, variant: ResolvedVariant, gpus_per_node: int) -> Optional[GpuFacts]:
        return sim_gpu_facts(variant.sim, gpus_per_node)

    def declared_moe_config(self, variant: ResolvedVariant) -> Optional[MoeModelConfig]:
        return sim_moe_config(variant.sim)

    def moe_search_device(self, variant: ResolvedVariant) -> MoeSearchDevice:
        return MoeSearchDevice("sim", variant.sim.gpu_name, variant.sim.triton_version)


class GpuTuningSurface:
    """A real engine on a GPU node: its GPU is probed there, its model config read from the checkpoint."""

    def declared_gpu_facts(self, variant: ResolvedVariant, gpus_per_node: int) -> Optional[GpuFacts]:
        return None

    def declared_moe_config(self, variant: ResolvedVariant) -> Optional[MoeModelConfig]:
        return None

    def moe_search_device(self, variant: ResolvedVariant) -> MoeSearchDevice:
        return MoeSearchDevice("cuda")


AnyTuningSurface = Union[SimTuningSurface, GpuTuningSurface]
