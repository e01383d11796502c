"""Engine adapters; `get_engine(name)` is the only way the rest of the code reaches one."""

from __future__ import annotations

from cluster.engines.base import Engine
from cluster.errors import UserError


def get_engine(name: str) -> Engine:
    if name == "sglang":
        from cluster.engines.sglang import SGLangEngine

        return SGLangEngine()
    if name == "sim":
        from cluster.engines.sim import SimEngine

        return SimEngine()
    if name == "vllm":
        from cluster.engines.vllm import VLLMEngine

        return VLLMEngine()
    raise UserError(f"unknown engine {name!r} (expected sglang, sim or vllm)", field="engine",
                    expected="sglang, sim or vllm")
