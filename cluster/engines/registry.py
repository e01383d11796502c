"""`get_engine(name)`: the only way the rest of the code reaches an engine adapter."""

from __future__ import annotations

from cluster.engines.base import Engine
from cluster.engines.sglang import SGLangEngine
from cluster.engines.sim import SimEngine
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


def get_tuning_surface(name: str) -> AnyTuningSurface:
    """An engine's answers to the tuning stage (cluster/engines/tuning_surfaces.py); UserError as get_engine's."""
    get_engine(name)
    return TUNING_SURFACES[name]()
