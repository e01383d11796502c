"""vLLM adapter: argv, env, request bodies, Prometheus speculative counters and their windowed acceptance."""

from __future__ import annotations

import json
import re
from typing import Any, Optional

import pytest

from cluster.engines.registry import get_engine
from cluster.engines.base import Prompt, StreamRequest
from cluster.engines.streams import OpenAIStreamParser
from cluster.engines.vllm import VLLMEngine, acceptance_from_counters, speculative_config
from cluster.kernel.runs import ResolvedVariant, SpecDecode
from cluster.config.engines import EngineLauncher


def _variant(args: Optional[dict[str, Any]] = None, speculative: Optional[SpecDecode] = None, tp: int = 1) -> ResolvedVariant:
    return ResolvedVariant(
        name="v",
        engine="vllm",
        tp=tp,
        model_path="/models/tiny",
        args=dict(args or {}),
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
        speculative=speculative,
    )


def _flag(argv: list[str] | tuple[str, ...], flag: str) -> str:
    assert argv.count(flag) == 1, f"{flag} appears {argv.count(flag)} times in {argv}"
    return argv[argv.index(flag) + 1]


def test_get_engine_returns_vllm() -> None:
    eng = get_engine("vllm")
    assert isinstance(eng, VLLMEngine)
    assert eng.name == "vllm"


def test_launch_uses_the_engine_python_and_module() -> None:
    lc = VLLMEngine().launch(_variant(), "127.0.0.1", 8123, EngineLauncher(python="/venv/bin/python"), "python3")
    assert list(lc.argv[:3]) == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert _flag(lc.argv, "--model") == "/models/tiny"
    assert _flag(lc.argv, "--host") == "127.0.0.1"
    assert _flag(lc.argv, "--port") == "8123"
    assert _flag(lc.argv, "--tensor-parallel-size") == "1"
    assert lc.env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert lc.env["VLLM_SERVER_DEV_MODE"] == "1"  # /reset_prefix_cache is a dev endpoint in vLLM 0.32


def test_launcher_replaces_python_module() -> None:
    lc = VLLMEngine().launch(_variant(), "0.0.0.0", 9000, EngineLauncher(launcher=["vllm", "serve"]), "python3")
    assert list(lc.argv[:2]) == ["vllm", "serve"]
    assert "-m" not in lc.argv


def test_args_map_max_running_requests_and_render_full_flags() -> None:
    args = {
        "max-running-requests": 8,
        "enforce-eager": True,
        "max_model_len": 2048,
        "enable-prefix-caching": False,
        "served-model-name": "tiny",
        "tp-size": 4,
        "port": 1,
    }
    argv = VLLMEngine().server_args(_variant(args, tp=2), "127.0.0.1", 8000, None)
    assert _flag(argv, "--max-num-seqs") == "8"
    assert "--max-running-requests" not in argv
    assert "--enforce-eager" in argv
    assert _flag(argv, "--max-model-len") == "2048"
    assert "--enable-prefix-caching" not in argv
    assert _flag(argv, "--served-model-name") == "tiny"
    assert _flag(argv, "--tensor-parallel-size") == "2"  # from the variant, not the SGLang-spelled arg
    assert "--tp-size" not in argv
    assert _flag(argv, "--port") == "8000"
    assert all(not a.startswith("--") or "_" not in a for a in argv)


def test_max_num_seqs_given_directly() -> None:
    argv = VLLMEngine().server_args(_variant({"max-num-seqs": 16}), "h", 1, None)
    assert _flag(argv, "--max-num-seqs") == "16"


def test_ngram_speculative_config() -> None:
    sp = SpecDecode("NGRAM", 3, 1, 4)
    argv = VLLMEngine().server_args(_variant({"speculative-config": "stale"}, sp), "h", 1, None)
    cfg = json.loads(_flag(argv, "--speculative-config"))
    assert cfg == {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}


@pytest.mark.parametrize("alg", ["NEXTN", "MTP"])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_mtp_speculative_config(alg: str, k: int) -> None:
    argv = VLLMEngine().server_args(_variant(speculative=SpecDecode(alg, k, 1, k + 1)), "h", 1, None)
    assert json.loads(_flag(argv, "--speculative-config")) == {"method": "mtp", "num_speculative_tokens": k}


@pytest.mark.parametrize(("alg", "method"), [("EAGLE", "eagle"), ("EAGLE3", "eagle3"), ("STANDALONE", "draft_model")])
def test_draft_model_speculative_config(alg: str, method: str) -> None:
    cfg = speculative_config(SpecDecode(alg, 2, 1, 3, draft_model_path="/models/draft"))
    assert cfg == {"method": method, "model": "/models/draft", "num_speculative_tokens": 2}


def test_eagle_without_draft_model_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="EAGLE.*draft_model_path"):
        speculative_config(SpecDecode("EAGLE", 2, 1, 3))


def test_no_speculative_config_for_baseline() -> None:
    argv = VLLMEngine().server_args(_variant({"enforce-eager": True}), "h", 1, None)
    assert "--speculative-config" not in argv


def test_endpoints() -> None:
    eng = VLLMEngine()
    assert eng.health_path == "/health"
    assert eng.flush_path == "/reset_prefix_cache"
    assert eng.metrics_path == "/metrics"
    assert eng.info_paths(None) == {"models": "/v1/models", "version": "/version"}


def test_resolved_args_from_infos() -> None:
    infos = {
        "models": {"object": "list", "data": [{"id": "tiny", "root": "/models/tiny", "max_model_len": 2048}]},
        "version": {"version": "0.32.0"},
    }
    out = VLLMEngine().resolved_args(infos)
    assert out == {"served_model_name": "tiny", "max_model_len": 2048, "model_root": "/models/tiny", "engine_version": "0.32.0"}
    assert VLLMEngine().resolved_args({}) == {}


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_request_bodies_are_openai_without_sglang_fields(api: str) -> None:
    req = VLLMEngine().build_request(StreamRequest(api, Prompt(input_ids=(5, 6, 7)), 32, True, 0.0, "tiny"))
    body = json.loads(req.body)
    assert "return_spec_tokens_details" not in body
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body["max_tokens"] == 32 and body["ignore_eos"] is True and body["model"] == "tiny"
    if api == "completions":
        assert req.path == "/v1/completions"
        assert body["prompt"] == [5, 6, 7]
    else:
        assert req.path == "/v1/chat/completions"
        assert body["messages"][0]["role"] == "user"


def test_native_api_is_refused_with_the_workload_api_named() -> None:
    with pytest.raises(ValueError, match="'native'.*completions"):
        VLLMEngine().build_request(StreamRequest("native", Prompt(text="hi"), 8, True, 0.0, "tiny"))


def test_parser_counts_continuous_usage() -> None:
    parser = VLLMEngine().new_parser("completions")
    assert isinstance(parser, OpenAIStreamParser)
    chunks = [
        {"id": "c1", "choices": [{"index": 0, "text": "a b", "finish_reason": None}],
         "usage": {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}},
        {"id": "c1", "choices": [{"index": 0, "text": " c d e", "finish_reason": "length"}],
         "usage": {"prompt_tokens": 4, "completion_tokens": 5, "total_tokens": 9}},
        {"id": "c1", "choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 5, "total_tokens": 9}},
    ]
    counts = [parser.feed(json.dumps(c).encode()) for c in chunks]
    assert counts == [2, 3, 0]
    meta = parser.meta()
    assert meta.completion_tokens == 5 and meta.prompt_tokens == 4 and meta.finish_reason == "length"


METRICS_BEFORE = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny"} 10.0
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="tiny"} 30.0
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="tiny"} 12.0
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="0"} 6.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="1"} 4.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="2"} 2.0
# HELP vllm:spec_decode_num_drafts_created Number of spec decoding drafts.
vllm:spec_decode_num_drafts_created{engine="0",model_name="tiny"} 1.7e9
vllm:generation_tokens_total{engine="0",model_name="tiny"} 500.0
"""

METRICS_AFTER = METRICS_BEFORE.replace(
    'model_name="tiny"} 10.0', 'model_name="tiny"} 110.0'
).replace(
    'model_name="tiny"} 30.0', 'model_name="tiny"} 330.0'
).replace(
    'model_name="tiny"} 12.0', 'model_name="tiny"} 262.0'
).replace(
    'position="0"} 6.0', 'position="0"} 96.0'
).replace(
    'position="1"} 4.0', 'position="1"} 84.0'
).replace(
    'position="2"} 2.0', 'position="2"} 72.0'
)


def test_spec_counters_parse() -> None:
    c = VLLMEngine().spec_counters(METRICS_BEFORE)
    assert c == {
        "drafts": 10.0,
        "draft_tokens": 30.0,
        "accepted_tokens": 12.0,
        "accepted_pos_0": 6.0,
        "accepted_pos_1": 4.0,
        "accepted_pos_2": 2.0,
    }


def test_spec_counters_sum_over_engines() -> None:
    text = (
        'vllm:spec_decode_num_drafts_total{engine="0"} 3\n'
        'vllm:spec_decode_num_drafts_total{engine="1"} 4\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 1\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",position="0"} 2\n'
    )
    assert VLLMEngine().spec_counters(text) == {"drafts": 7.0, "accepted_pos_0": 3.0}


def test_spec_counters_absent_without_speculative_decoding() -> None:
    text = 'vllm:generation_tokens_total{engine="0",model_name="tiny"} 500.0\n'
    assert VLLMEngine().spec_counters(text) == {}


def test_acceptance_diffed_over_the_window() -> None:
    eng = VLLMEngine()
    acc = acceptance_from_counters(eng.spec_counters(METRICS_BEFORE), eng.spec_counters(METRICS_AFTER))
    # window: 100 drafts, 300 draft tokens, 250 accepted; per position 90, 80, 70 accepted
    assert acc["accept_length"] == pytest.approx(3.5)
    assert acc["acceptance_rate"] == pytest.approx(250 / 300)
    assert acc["accept_rate_pos_0"] == pytest.approx(0.9)
    assert acc["accept_rate_pos_1"] == pytest.approx(0.8)
    assert acc["accept_rate_pos_2"] == pytest.approx(0.7)
    assert set(acc) == {"accept_length", "acceptance_rate", "accept_rate_pos_0", "accept_rate_pos_1", "accept_rate_pos_2"}


def test_acceptance_from_a_fresh_server() -> None:
    after = {"drafts": 4.0, "draft_tokens": 12.0, "accepted_tokens": 0.0}
    assert acceptance_from_counters({}, after) == {"accept_length": 1.0, "acceptance_rate": 0.0}


def test_acceptance_empty_without_drafts_in_window() -> None:
    c = {"drafts": 5.0, "draft_tokens": 15.0, "accepted_tokens": 3.0}
    assert acceptance_from_counters(c, dict(c)) == {}
    assert acceptance_from_counters({}, {}) == {}


@pytest.mark.parametrize("name, doc, says", [
    ("models", {"data": "x"}, "/models.data: expected a list"),
    ("models", {"data": [{"id": 1}]}, "/models.data[0].id: expected a string"),
    ("models", {"data": [{"id": "m", "max_model_len": "4096"}]}, "/models.data[0].max_model_len: expected a non-neg"),
    ("version", {"version": 0.8}, "/version.version: expected a string"),
    ("version", "0.8", "/version: expected an object"),
])
def test_vllm_info_of_the_wrong_types_is_a_malformed_answer(name: str, doc: Any, says: str) -> None:
    from cluster.engines.answer_fields import MalformedAnswerError

    with pytest.raises(MalformedAnswerError, match=re.escape(says)):
        VLLMEngine().parse_info(name, doc)
    good = {"models": {"data": [{"id": "m", "root": "/m", "max_model_len": 4096}]}, "version": {"version": "0.8"}}
    assert VLLMEngine().parse_info(name, good[name]) == good[name]
