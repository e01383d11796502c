"""GPU tier: the fused-MoE Triton search and kernel on a real CUDA device (needs torch + Triton, never SGLang)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]

SHAPE = {"num_experts": 16, "shard_n": 64, "hidden_size": 512, "top_k": 4, "dtype": "auto"}


def test_kernel_matches_reference_for_several_configs() -> None:
    from cluster.tuning.moe_search import candidate_configs
    from cluster.tuning.moe_kernel import moe_gemm, reference_moe_gemm, routing

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(33, 512, generator=gen).cuda().bfloat16()
    w = (torch.randn(16, 128, 512, generator=gen) * 0.05).cuda().bfloat16()
    ids = routing(33, 16, 4, 1).cuda()
    ref = reference_moe_gemm(x, w, ids)
    ran = 0
    for cfg in candidate_configs(12, seed=3):
        try:
            out = moe_gemm(x, w, ids, cfg, return_output=True)()
        except Exception:  # noqa: BLE001 - a tile too big for this GPU
            continue
        ran += 1
        assert (out.float() - ref).abs().max().item() < 0.05, cfg
    assert ran >= 6


def test_search_returns_sglang_format() -> None:
    from cluster.engines.sglang_tuning import valid_moe_config
    from cluster.tuning.stage import merge_moe_configs
    from cluster.tuning.moe_search import tune_batch_sizes

    res = tune_batch_sizes(SHAPE, [1, 8], mode="cuda", max_configs=8)
    assert res["mode"] == "cuda" and res["device_name"] == torch.cuda.get_device_name()
    doc = merge_moe_configs([{bs: r["config"] for bs, r in res["results"].items()}])
    assert list(doc) == ["1", "8"] and valid_moe_config(doc)
    assert all(r["time_us"] > 0 and r["max_abs_err"] < 0.05 for r in res["results"].values())
