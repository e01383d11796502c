"""`get_engine(name)`: the only way the rest of the code reaches an engine adapter; `is_simulated(name)` for labels
over stored rows."""

from __future__ import annotations

from cluster.engines.base import Engine
from cluster.engines.sglang import SGLangEngine
from cluster.engines.sim import SimDeviceSampler, SimEngine
from cluster.engines.tuning_surfaces import TUNING_SURFACES, AnyTuningSurface
from cluster.engines.vllm import VLLMEngine
from cluster.errors import UserError

ENGINES: dict[str, type[Engine]] = {"sglang": SGLangEngine, "sim": SimEngine, "vllm": VLLMEngine}


def get_engine(name: str) -> Engine:
    try:
        return ENGINES[name]()
    except KeyError:
        raise UserError(f"unknown engine {name!r} (expected sglang, sim or vllm)", field="engine",
                        expected="sglang, sim or vllm") from None


def is_simulated(engine_name: str) -> bool:
    """True when the engine named (a variant's, or a stored row's `engine` column) is the simulator: its figures
    are labelled simulated. An unknown name (a row written by another version) is not."""
    engine = ENGINES.get(engine_name)
    return engine is not None and engine.simulated


def is_simulated_source(source: str) -> bool:
    """True when device readings (gpu_metrics' `source` column) come from the simulator's device model."""
    return source == SimDeviceSampler.source


def get_tuning_surface(name: str) -> AnyTuningSurface:
    """An engine's answers to the tuning stage (cluster/engines/tuning_surfaces.py); UserError as get_engine's."""
    get_engine(name)
    return TUNING_SURFACES[name]()
