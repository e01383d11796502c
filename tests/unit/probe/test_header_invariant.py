"""The header invariant across the probe: every tensor of every accepted shard lies inside its data region, is as
large as its dtype and shape say, and shares no byte with another (tests/checkpoints.py assert_header_invariant)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # tests/ is not a package: reach tests/checkpoints.py

from tests import checkpoints as ck  # noqa: E402

from cluster.probe.checkpoint import probe_checkpoint  # noqa: E402

BUILDERS: dict[str, Callable[[Path], Path]] = {
    "qwen35_nvfp4": ck.qwen35_nvfp4, "qwen35_mtp_stripped": ck.qwen35_nvfp4_mtp_stripped,
    "deepseek_nextn": ck.deepseek_nextn, "qwen3_next_flat": ck.qwen3_next_flat,
    "single_file": ck.single_file_model, "mimo_mtp": ck.mimo_mtp, "ernie45_mtp": ck.ernie45_mtp,
    "model_mtp_prefixed": ck.model_mtp_prefixed, "deepseek_v4_mtp": ck.deepseek_v4_mtp,
}


@pytest.mark.parametrize("builder", sorted(BUILDERS))
def test_every_accepted_tensor_satisfies_the_invariant(builder: str, tmp_path: Path) -> None:
    report = probe_checkpoint(str(BUILDERS[builder](tmp_path / "m")))
    assert report.headers and len(report.headers) == len(report.shards)
    assert sum(len(h.tensors) for h in report.headers) >= report.tensor_count > 0
    for header in report.headers:
        ck.assert_header_invariant(header)


def test_the_invariant_catches_an_overlap(tmp_path: Path) -> None:
    """The checker itself can fail: two tensors sharing bytes (as the probe refuses them) trip it."""
    from cluster.probe.safetensors_header import ShardHeader, TensorInfo

    a = TensorInfo("BF16", (4,), 8, (0, 8))
    b = TensorInfo("BF16", (4,), 8, (4, 12))
    with pytest.raises(AssertionError):
        ck.assert_header_invariant(ShardHeader(str(tmp_path / "x"), 8 + 2 + 12, 2, {"a": a, "b": b}))
    with pytest.raises(AssertionError):
        ck.assert_header_invariant(ShardHeader(str(tmp_path / "x"), 8 + 2 + 6, 2, {"a": a}))
    with pytest.raises(AssertionError):  # an absurd but empty shape
        ck.assert_header_invariant(ShardHeader(str(tmp_path / "x"), 8 + 2, 2,
                                               {"e": TensorInfo("BF16", (0, 10**30), 0, (0, 0))}))
