"""The model every variant serves: its checkpoint, default engine and tensor-parallel size (the `model:` section)."""

from __future__ import annotations

from typing import Annotated, Optional

from pydantic import AfterValidator, Field

from cluster.config import bounds as B
from cluster.config.engines import EngineName
from cluster.config.fields import FrozenModel
from cluster.config.locations import MODEL_SCHEMES, check_location


class ModelSpec(FrozenModel):
    path: Annotated[str, AfterValidator(lambda v: check_location(v, "model.path", MODEL_SCHEMES))] = Field(min_length=1)
    """Checkpoint directory as seen on the GPU node (e.g. the model volume's mount point in k8s/), or sim://NAME."""
    engine: EngineName = "sglang"
    """Engine every variant uses unless it sets its own: sglang, vllm, or sim (the simulated SGLang server)."""
    tp: int = Field(default=1, ge=1, le=B.MAX_GPUS_PER_NODE)
    """Tensor-parallel size (GPUs per server) unless a variant sets its own."""
    served_name: Optional[str] = None
    """Model name the OpenAI endpoints expect (default: the engine's own, from the path)."""
