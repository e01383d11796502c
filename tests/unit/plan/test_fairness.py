"""Each fairness rule, and resolved-arg differences between two variants."""

from __future__ import annotations

from typing import Any

from cluster.plan.fairness import Finding, check_fairness, resolved_differences
from cluster.kernel.runs import ResolvedVariant, SpecDecode

GOOD = {"max-running-requests": 64, "kv-cache-dtype": "bf16", "attention-backend": "triton"}


def v(name: str, args: dict[str, Any], spec: bool = False, engine: str = "sglang", base: bool = False,
      model: str = "/m") -> ResolvedVariant:
    sp = SpecDecode("NEXTN", 2, 1, 3) if spec else None
    return ResolvedVariant(name=name, engine=engine, tp=8, model_path=model, args=args, env={}, speculative=sp,
                           is_baseline=base)  # type: ignore[arg-type]


def rules(findings: list[Finding], level: str | None = None) -> set[tuple[str, str]]:
    return {(f.variant, f.rule) for f in findings if level is None or f.level == level}


def test_fair_matrix_has_no_findings() -> None:
    assert check_fairness([v("base", GOOD, base=True), v("nextn", dict(GOOD), spec=True)]) == []


def test_missing_max_running_requests_is_an_error_on_speculative_variants() -> None:
    args = {k: x for k, x in GOOD.items() if k != "max-running-requests"}
    f = check_fairness([v("base", args, base=True), v("nextn", args, spec=True)])
    assert ("nextn", "max-running-requests") in rules(f, "error")
    assert ("base", "max-running-requests") in rules(f, "warning")
    assert "48" in next(x.message for x in f if x.variant == "nextn")


def test_unequal_max_running_requests_is_an_error() -> None:
    f = check_fairness([v("base", GOOD, base=True), v("nextn", {**GOOD, "max_running_requests": 48}, spec=True)])
    assert rules(f, "error") == {("nextn", "max-running-requests")}
    assert f[0].level == "error"


def test_fp8_checkpoint_with_auto_kv_dtype_is_an_error() -> None:
    auto = {**GOOD, "kv-cache-dtype": "auto"}
    unset = {k: x for k, x in GOOD.items() if k != "kv-cache-dtype"}
    f = check_fairness([v("a", auto, base=True), v("b", unset)], {"/m": "FP8"})
    assert {("a", "kv-cache-dtype"), ("b", "kv-cache-dtype")} <= rules(f, "error")
    assert check_fairness([v("a", GOOD)], {"/m": "FP8"}) == []
    f2 = check_fairness([v("b", unset)], {"/m": None})
    assert rules(f2) == {("b", "kv-cache-dtype")} and f2[0].level == "warning"


def test_unpinned_attention_backend_warns() -> None:
    args = {k: x for k, x in GOOD.items() if k != "attention-backend"}
    f = check_fairness([v("nextn", args, spec=True)])
    assert rules(f, "warning") == {("nextn", "attention-backend")} and "39515" in f[0].message
    split = {**args, "prefill-attention-backend": "fa3", "decode-attention-backend": "triton"}
    assert check_fairness([v("x", split)]) == []


def test_unequal_cuda_graph_max_bs_warns_across_spellings() -> None:
    f = check_fairness([v("a", {**GOOD, "cuda-graph-max-bs": 64}, base=True),
                        v("b", {**GOOD, "cuda-graph-max-bs-decode": 32})])
    assert rules(f) == {("b", "cuda-graph-max-bs")} and f[0].level == "warning"
    assert check_fairness([v("a", {**GOOD, "cuda-graph-max-bs": 64}, base=True),
                           v("b", {**GOOD, "cuda-graph-max-bs-decode": 64})]) == []


def test_sim_findings_are_warnings_and_vllm_is_not_checked() -> None:
    f = check_fairness([v("s", {}, spec=True, engine="sim"), v("x", {}, engine="vllm")])
    assert {x.level for x in f} == {"warning"} and ("s", "max-running-requests") in rules(f)
    assert all(x.variant == "s" for x in f)


def test_unknown_algorithm_and_abbreviations_are_errors() -> None:
    odd = ResolvedVariant(name="m", engine="sglang", tp=8, model_path="/m", args={**GOOD, "quant": "fp8"}, env={},
                          speculative=SpecDecode("MEDUSA", 1, 1, 2))
    assert rules(check_fairness([odd]), "error") == {("m", "speculative-algorithm"), ("m", "full-flag-names")}
    # MTP is the spec's engine-neutral name for the built-in head; SGLang launches it as NEXTN
    mtp = ResolvedVariant(name="m", engine="sglang", tp=8, model_path="/m", args=dict(GOOD), env={},
                          speculative=SpecDecode("MTP", 1, 1, 2))
    assert ("m", "speculative-algorithm") not in rules(check_fairness([mtp]), "error")


def test_resolved_differences_names_unintended_keys_only() -> None:
    a = {"port": 30000, "host": "0.0.0.0", "nccl_port": 1, "random_seed": 5, "attention_backend": "triton",
         "max_running_requests": 64, "speculative_algorithm": None, "mem_fraction_static": 0.85,
         "launch_command": "x", "cuda_graph_bs": [1, 2]}
    b = {**a, "port": 30001, "host": "10.0.0.2", "nccl_port": 2, "random_seed": 9, "launch_command": "y",
         "speculative_algorithm": "EAGLE", "speculative_num_steps": 3, "attention_backend": "flashinfer",
         "max_running_requests": 48, "mem_fraction_static": 0.85000, "cuda_graph_bs": (1, 2)}
    d = resolved_differences(a, b, {"speculative_*"})
    assert d == {"attention_backend": ("triton", "flashinfer"), "max_running_requests": (64, 48)}
    assert resolved_differences(a, a, set()) == {}
