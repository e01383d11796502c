"""A local cluster for an experiment whose servers all run on the CPU gets logical GPUs, so placement runs unchanged."""

from __future__ import annotations

from cluster.distributed.driver import logical_gpus_for
from cluster.config.loader import parse_spec_text


def _spec(device_args: str, variant_args: str = "") -> str:
    return f"""
version: 1
name: cpu-placement
model: {{path: /models/tiny-mimo, engine: sglang}}
server: {{args: {{{device_args}}}}}
variants:
  - {{name: base, baseline: true{variant_args}}}
  - {{name: nextn, speculative: {{algorithm: NEXTN, num_steps: [1, 2]}}}}
workloads: [{{name: w, input_tokens: 8, output_tokens: 8, num_requests: 2}}]
load: {{concurrency: [1]}}
"""


def test_cpu_device_sglang_gets_logical_gpus() -> None:
    assert logical_gpus_for(parse_spec_text(_spec("device: cpu"))) == 8


def test_gpu_sglang_uses_detected_gpus() -> None:
    assert logical_gpus_for(parse_spec_text(_spec("attention-backend: fa3"))) is None


def test_one_gpu_variant_means_detected_gpus() -> None:
    # the baseline overrides the shared device: a real GPU server is in the experiment, so Ray must see real GPUs
    assert logical_gpus_for(parse_spec_text(_spec("device: cpu", ", args: {device: cuda}"))) is None
