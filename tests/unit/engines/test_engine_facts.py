"""The facts that moved from name-keyed tables onto the adapter classes answer what those tables said at a8528d0
(the move changes no behaviour): scraped names and packages are the union over the registered engines, in order."""

from __future__ import annotations

from cluster.config.engines import engine_entry, engine_names
from cluster.engines.registry import (cap_flags, engine_class, get_tuning_surface, probes_checkpoint,
                                      reported_packages, scraped_metric_names, sglang_argv_engines)
from cluster.engines.tuning_surfaces import GpuTuningSurface, SimTuningSurface


def test_the_registered_engines_and_the_spec_fact() -> None:
    assert engine_names() == ("sglang", "sim", "vllm")
    assert [n for n in engine_names() if engine_entry(n).reports_sglbench_version] == ["sim"]  # type: ignore[union-attr]


def test_the_tables_the_adapters_replaced() -> None:
    assert {n: cap_flags(n) for n in engine_names()} == {
        "sglang": frozenset({"max-running-requests"}), "sim": frozenset({"max-running-requests"}),
        "vllm": frozenset({"max-num-seqs"})}
    assert {n: type(get_tuning_surface(n)) for n in engine_names()} == {
        "sglang": GpuTuningSurface, "sim": SimTuningSurface, "vllm": GpuTuningSurface}
    assert sglang_argv_engines() == ("sglang", "sim")
    assert [n for n in engine_names() if probes_checkpoint(n)] == ["sglang", "vllm"]
    assert {n: engine_class(n).label for n in engine_names()} == {
        "sim": "SGLang 0.5.23 (simulated)", "sglang": "SGLang", "vllm": "vLLM"}
    assert [n for n in engine_names() if engine_class(n).flag_parser is not None] == ["sglang", "vllm"]
    assert [n for n in engine_names() if engine_class(n).flags_parsed_here] == ["sim"]
    assert [n for n in engine_names() if engine_class(n).adaptive_resolved] == ["sglang"]
    assert reported_packages() == ("sglang", "flashinfer-python", "sglang-kernel", "torch", "triton", "transformers",
                                   "vllm")
    assert scraped_metric_names() == (
        "sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:gen_throughput", "sglang:token_usage",
        "sglang:spec_accept_length", "sglang:spec_accept_rate", "sglang:cache_hit_rate", "sglang:utilization",
        "sglang:num_used_tokens", "sglang:spec_verify_calls_total", "sglang:generation_tokens_total",
        # the prefill/decode TTFT parts' histograms, their _sum and _count only (no buckets)
        *(f"sglang:{h}_{x}" for h in ("per_stage_req_latency_seconds", "queue_time_seconds", "kv_transfer_bootstrap_ms",
                                      "kv_transfer_alloc_ms", "kv_transfer_latency_ms") for x in ("sum", "count")),
        "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
        "vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_drafts_total",
        "vllm:generation_tokens_total")
