"""Issue 15 items 1 and 3: the hybrid-model radix-cache strategy and the pinned back ends, and the study YAMLs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cluster.plan.fairness import Finding, check_fairness
from cluster.plan.model_rules import ModelFacts
from cluster.plan.runs import expand_variants
from cluster.kernel.runs import ResolvedVariant, SpecDecode
from cluster.config.loader import load_spec

REPO = Path(__file__).resolve().parents[3]
GOOD = {"max-running-requests": 64, "kv-cache-dtype": "bf16", "attention-backend": "triton"}
QWEN35 = ModelFacts(hybrid=True, moe=True, nvfp4=True, routed_nvfp4=True,
                    dense_nvfp4_families=("model.language_model.layers.*.self_attn.q_proj",))
"""Qwen3.5-397B-A17B-NVFP4 as the probe reads it: Gated-DeltaNet layers, MoE, NVFP4 routed experts and attention."""
PINNED = {**GOOD, "mamba-radix-cache-strategy": "extra_buffer", "moe-runner-backend": "flashinfer_cutlass",
          "fp4-gemm-backend": "flashinfer_cudnn"}


def v(name: str, args: dict[str, Any], spec: bool = False, base: bool = False) -> ResolvedVariant:
    sp = SpecDecode("NEXTN", 2, 1, 3) if spec else None
    return ResolvedVariant(name=name, engine="sglang", tp=8, model_path="/m", args=args, env={}, speculative=sp,
                           is_baseline=base)  # type: ignore[arg-type]


def rules(findings: list[Finding], level: str | None = None) -> set[tuple[str, str]]:
    return {(f.variant, f.rule) for f in findings if level is None or f.level == level}


def test_hybrid_model_needs_an_explicit_radix_cache_strategy() -> None:
    f = check_fairness([v("base", GOOD, base=True)], facts={"/m": QWEN35}, version="0.5.23")
    assert ("base", "mamba-radix-cache-strategy") in rules(f, "error")
    msg = next(x.message for x in f if x.rule == "mamba-radix-cache-strategy")
    assert "--mamba-radix-cache-strategy" in msg and "27220" in msg
    auto = check_fairness([v("base", {**GOOD, "mamba-radix-cache-strategy": "auto"}, base=True)],
                          facts={"/m": QWEN35}, version="0.5.23")
    assert ("base", "mamba-radix-cache-strategy") in rules(auto, "error")
    off = check_fairness([v("base", {**GOOD, "disable-radix-cache": True}, base=True)], facts={"/m": QWEN35})
    assert ("base", "mamba-radix-cache-strategy") not in rules(off)
    # a non-hybrid model refuses an explicit strategy (0.5.23 model_hook.py: "needs mamba state")
    dense = check_fairness([v("b", {**GOOD, "mamba-radix-cache-strategy": "extra_buffer"})],
                           facts={"/m": ModelFacts(hybrid=False)})
    assert ("b", "mamba-radix-cache-strategy") in rules(dense, "error")


def test_radix_cache_strategy_must_match_across_variants_even_unprobed() -> None:
    f = check_fairness([v("base", {**GOOD, "mamba-radix-cache-strategy": "extra_buffer"}, base=True),
                        v("nextn", {**GOOD, "mamba-radix-cache-strategy": "no_buffer"}, spec=True)])
    assert rules(f, "error") == {("nextn", "mamba-radix-cache-strategy")}


def test_old_release_spelling_and_the_nextn_no_buffer_trap() -> None:
    from cluster.engines.sglang import SGLangEngine

    old = {**GOOD, "mamba-scheduler-strategy": "no_buffer"}
    f = check_fairness([v("base", old, base=True), v("nextn", old, spec=True)], facts={"/m": QWEN35},
                       version="0.5.9")
    assert ("nextn", "mamba-radix-cache-strategy") in rules(f, "error")
    assert ("base", "mamba-radix-cache-strategy") not in rules(f)
    assert "--mamba-scheduler-strategy" in next(x.message for x in f if x.variant == "nextn")
    # the argv gets the release's spelling, whichever the spec used
    argv_old = SGLangEngine().server_args(v("x", {"mamba-radix-cache-strategy": "extra_buffer"}), "h", 1, "0.5.9")
    argv_new = SGLangEngine().server_args(v("x", {"mamba-scheduler-strategy": "extra_buffer"}), "h", 1, "0.5.23")
    assert "--mamba-scheduler-strategy" in argv_old and "--mamba-radix-cache-strategy" in argv_new


def test_nextn_on_sm120_needs_both_moe_runners_pinned() -> None:
    f = check_fairness([v("nextn", {**PINNED, "moe-runner-backend": "auto"}, spec=True)], facts={"/m": QWEN35},
                       gpu_sm=120, version="0.5.23")
    assert {("nextn", "moe-runner-backend"), ("nextn", "speculative-moe-runner-backend")} <= rules(f, "error")
    assert "39807" in next(x.message for x in f if x.rule == "moe-runner-backend")
    # not known to be SM120: warnings on an NVFP4 MoE checkpoint
    w = check_fairness([v("nextn", GOOD | {"mamba-radix-cache-strategy": "extra_buffer",
                                           "fp4-gemm-backend": "flashinfer_cudnn"}, spec=True)],
                       facts={"/m": QWEN35})
    assert ("nextn", "speculative-moe-runner-backend") in rules(w, "warning")
    ok = check_fairness([v("nextn", {**PINNED, "speculative-moe-runner-backend": "triton"}, spec=True)],
                        facts={"/m": QWEN35}, gpu_sm=120, version="0.5.23")
    assert ok == []
    # the baseline runs no draft model: only the target's runner matters there, and only with speculative decoding
    assert check_fairness([v("base", PINNED, base=True)], facts={"/m": QWEN35}, gpu_sm=120) == []


def test_fp4_gemm_backend_pinned_where_a_dense_layer_is_nvfp4() -> None:
    args = {k: val for k, val in PINNED.items() if k != "fp4-gemm-backend"}
    f = check_fairness([v("base", args, base=True)], facts={"/m": QWEN35}, gpu_sm=120)
    assert rules(f, "error") == {("base", "fp4-gemm-backend")}
    assert "self_attn.q_proj" in f[0].message and "20047" in f[0].message
    routed_only = ModelFacts(hybrid=True, moe=True, nvfp4=True, routed_nvfp4=True)
    assert check_fairness([v("base", args, base=True)], facts={"/m": routed_only}, gpu_sm=120) == []


@pytest.mark.parametrize("name", ["qwen35-397b-nvfp4-mtp.yaml", "qwen35-397b-nvfp4-sm120.yaml"])
def test_study_yamls_are_fair_on_the_real_node(name: str) -> None:
    """Both studies, with the facts the GPU node's probe gives (Qwen3.5 NVFP4, SM120), have no finding at all."""
    spec = load_spec(REPO / "experiments" / name)
    variants = expand_variants(spec)
    assert check_fairness(variants, {"/models/Qwen3.5-397B-A17B-NVFP4": None},
                          facts={spec.model.path: QWEN35}, gpu_sm=120, version="0.5.23") == []
    assert all(str(x.args.get("mamba-radix-cache-strategy")) == "extra_buffer" for x in variants)
    assert all(x.args.get("speculative-moe-runner-backend") == "triton" for x in variants if x.speculative)


def test_facts_from_the_probe_report_record(tmp_path: Path) -> None:
    """ModelFacts read the probe's typed record (before, from_report wrote the report to JSON and parsed it back)."""
    import dataclasses

    from cluster.probe.checkpoint import probe_checkpoint
    from tests.checkpoints import qwen35_nvfp4

    report = probe_checkpoint(str(qwen35_nvfp4(tmp_path / "m")))
    f = ModelFacts.from_report(dataclasses.replace(report, quantized_families={
        "model.layers.*.mlp.experts.*.gate_proj": 1, "model.layers.*.self_attn.q_proj": 1}))
    assert (f.hybrid, f.moe, f.nvfp4, f.routed_nvfp4) == (True, True, True, True)
    assert f.dense_nvfp4_families == ("model.layers.*.self_attn.q_proj",)
    plain = dataclasses.replace(report, quant=dataclasses.replace(report.quant, quant_algo=None),
                                config=dataclasses.replace(report.config, layer_types={}, num_experts=None))
    assert ModelFacts.from_report(plain) == \
        ModelFacts(hybrid=False, moe=False, nvfp4=False, dense_nvfp4_families=(), routed_nvfp4=False)
