"""Version-aware SGLang argv: full flag names, CUDA-graph spelling, info paths, SPEC_V2 env, version detection."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from cluster.engines.sglang import (DEFAULT_VERSION, SGLangEngine, canonical_key, detect_version, parse_version,
                                    VersionMismatchError, resolve_version, version_adjusted_args)
from cluster.engines.sglang_dialect import flag_name
from cluster.engines.sglang_server_info import server_info_summary
from cluster.kernel.runs import ResolvedVariant, SpecDecode
from cluster.config.engines import EngineLauncher

MODEL = "/models/q"


def variant(args: dict | None = None, spec: SpecDecode | None = None, env: dict | None = None) -> ResolvedVariant:
    return ResolvedVariant(name="v", engine="sglang", tp=8, model_path=MODEL, args=args or {}, env=env or {},
                           speculative=spec)


def flags(argv: list[str]) -> list[str]:
    return [a for a in argv if a.startswith("--")]


def test_parse_version() -> None:
    assert parse_version("0.5.23") == (0, 5, 23)
    assert parse_version("0.5.10.post1") == (0, 5, 10)
    assert parse_version("0.5.15rc2+cu130") == (0, 5, 15)
    assert parse_version(None) == parse_version(DEFAULT_VERSION)
    assert flag_name("cuda_graph_max_bs") == "--cuda-graph-max-bs"


@pytest.mark.parametrize("given", ["cuda-graph-max-bs", "cuda_graph_max_bs", "cuda-graph-max-bs-decode"])
def test_cuda_graph_flag_follows_the_version(given: str) -> None:
    eng = SGLangEngine()
    new = eng.server_args(variant({given: 32}), "h", 1, "0.5.23")
    old = eng.server_args(variant({given: 32}), "h", 1, "0.5.12")
    assert new[new.index("--cuda-graph-max-bs-decode") + 1] == "32" and "--cuda-graph-max-bs" not in new
    assert old[old.index("--cuda-graph-max-bs") + 1] == "32" and "--cuda-graph-max-bs-decode" not in old


def test_cuda_graph_bs_list_is_renamed_too() -> None:
    argv = SGLangEngine().server_args(variant({"cuda-graph-bs": [1, 2, 4]}), "h", 1, "0.5.23")
    i = argv.index("--cuda-graph-bs-decode")
    assert argv[i + 1 : i + 4] == ["1", "2", "4"]


def test_recipe_abbreviations_become_full_names() -> None:
    args = {"speculative-algo": "NEXTN", "mem-frac": 0.8, "speculative-draft-model": MODEL, "disable-radix": True}
    out = version_adjusted_args(args, (0, 5, 23))
    assert set(out) == {"speculative-algorithm", "mem-fraction-static", "speculative-draft-model-path",
                        "disable-radix-cache"}


@pytest.mark.parametrize("short", ["speculative-draft", "quant", "attention"])
def test_ambiguous_abbreviations_are_refused(short: str) -> None:
    with pytest.raises(ValueError, match="ambiguous"):
        canonical_key(short)


def test_reserved_args_cannot_override_the_head() -> None:
    argv = SGLangEngine().server_args(variant({"tp": 2, "model": "/x", "port": 1}), "127.0.0.1", 30000, "0.5.23")
    assert argv[:8] == ["--model-path", MODEL, "--host", "127.0.0.1", "--port", "30000", "--tp-size", "8"]
    assert argv.count("--tp-size") == 1 and "/x" not in argv and argv.count("--port") == 1


def test_speculative_always_passes_all_three() -> None:
    sp = SpecDecode("NEXTN", num_steps=2, eagle_topk=1, num_draft_tokens=3)
    argv = SGLangEngine().server_args(variant({"speculative-num-steps": 9}, sp), "h", 1, "0.5.23")
    got = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--speculative")}
    assert got == {"--speculative-algorithm": "NEXTN", "--speculative-num-steps": "2",
                   "--speculative-eagle-topk": "1", "--speculative-num-draft-tokens": "3"}


# (last release with the old behaviour, first with the new), read from the wheels (scripts/sglang_release_facts.py)
BOUNDARIES = {"decode CUDA-graph flags": ("0.5.13.post1", "0.5.14"), "mamba strategy": ("0.5.13.post1", "0.5.14"),
              "/server_info": ("0.5.5.post3", "0.5.6"), "SPEC_V2 default": ("0.5.10", "0.5.11")}


def test_each_release_boundary_is_where_the_wheels_put_it() -> None:
    eng = SGLangEngine()
    old, new = BOUNDARIES["decode CUDA-graph flags"]
    assert "--cuda-graph-max-bs" in eng.server_args(variant({"cuda-graph-max-bs": 8}), "h", 1, old)
    assert "--cuda-graph-max-bs-decode" in eng.server_args(variant({"cuda-graph-max-bs": 8}), "h", 1, new)
    old, new = BOUNDARIES["mamba strategy"]
    arg = {"mamba-radix-cache-strategy": "extra_buffer"}
    assert "--mamba-scheduler-strategy" in eng.server_args(variant(arg), "h", 1, old)
    assert "--mamba-radix-cache-strategy" in eng.server_args(variant(arg), "h", 1, new)
    old, new = BOUNDARIES["/server_info"]
    assert (eng.info_paths(old)["server_info"], eng.info_paths(new)["server_info"]) == ("/get_server_info",
                                                                                      "/server_info")
    assert (eng.info_paths(old)["model_info"], eng.info_paths(new)["model_info"]) == ("/get_model_info",
                                                                                    "/model_info")
    old, new = BOUNDARIES["SPEC_V2 default"]
    sp = SpecDecode("NEXTN", 3, 1, 4)
    assert eng.server_env(variant(spec=sp), old) == {"SGLANG_ENABLE_SPEC_V2": "1"}
    assert eng.server_env(variant(spec=sp), new) == {}


def test_old_images_get_the_draft_path_and_spec_v2() -> None:
    sp = SpecDecode("NEXTN", 3, 1, 4)
    eng = SGLangEngine()
    old = eng.server_args(variant(spec=sp), "h", 1, "0.5.10.post1")
    assert old[old.index("--speculative-draft-model-path") + 1] == MODEL
    assert "--speculative-draft-model-path" not in eng.server_args(variant(spec=sp), "h", 1, "0.5.23")
    assert eng.server_env(variant(spec=sp), "0.5.10") == {"SGLANG_ENABLE_SPEC_V2": "1"}
    assert eng.server_env(variant(spec=sp, env={"SGLANG_ENABLE_SPEC_V2": "1"}), "0.5.23") == {}
    assert eng.server_env(variant(), "0.5.12") == {}


def test_info_paths_follow_the_version() -> None:
    eng = SGLangEngine()
    assert eng.info_paths("0.5.23")["server_info"] == "/server_info"
    assert eng.info_paths("0.5.5")["server_info"] == "/get_server_info"
    assert eng.info_paths("0.5.5")["model_info"] == "/get_model_info"


def _fake_python(tmp_path: Path, body: str) -> str:
    exe = tmp_path / "python"
    exe.write_text(f"#!/bin/sh\n{body}\n")
    exe.chmod(0o755)
    return str(exe)


def test_detect_version_reads_the_engine_interpreter(tmp_path: Path) -> None:
    detect_version.cache_clear()
    assert detect_version(_fake_python(tmp_path, "echo 0.5.12")) == "0.5.12"
    detect_version.cache_clear()
    assert detect_version(str(tmp_path / "missing")) is None
    # the dev interpreter has no sglang installed: PackageNotFoundError → None
    assert detect_version(sys.executable) is None or parse_version(detect_version(sys.executable)) > (0,)


def test_resolve_version_order(tmp_path: Path) -> None:
    """Issue 15 item 5: the installed version wins; the declared one only where detection is impossible; a
    mismatch is an error (before, a declared 0.5.20 silently overrode an installed 0.5.9)."""
    detect_version.cache_clear()
    py = _fake_python(tmp_path, "echo 0.5.9")
    with pytest.raises(VersionMismatchError, match="declares '0.5.20'.*'0.5.9'") as e:
        resolve_version("0.5.20", py)
    assert e.value.field == "engines.sglang.version"
    assert resolve_version("0.5.9", py) == "0.5.9"
    assert resolve_version(None, py) == "0.5.9"
    detect_version.cache_clear()
    post = _fake_python(tmp_path, "echo 0.5.23.post1")
    assert resolve_version("0.5.23", post) == "0.5.23.post1"
    detect_version.cache_clear()
    assert resolve_version(None, _fake_python(tmp_path, "exit 1")) == DEFAULT_VERSION
    detect_version.cache_clear()
    assert resolve_version("0.5.12", _fake_python(tmp_path, "exit 1")) == "0.5.12"
    assert resolve_version("0.5.12", str(tmp_path / "no-such-python")) == "0.5.12"


def test_launch_detects_the_installed_version(tmp_path: Path) -> None:
    detect_version.cache_clear()
    py = _fake_python(tmp_path, "echo 0.5.12")
    cmd = SGLangEngine().launch(variant({"cuda-graph-max-bs-decode": 16}), "h", 1, EngineLauncher(python=py), "python")
    assert cmd.argv[:3] == (py, "-m", "sglang.launch_server")
    assert "--cuda-graph-max-bs" in cmd.argv
    with pytest.raises(VersionMismatchError):
        SGLangEngine().launch(variant({"cuda-graph-max-bs": 16}), "h", 1,
                              EngineLauncher(python=py, version="0.5.23"), "python")
    remote = SGLangEngine().launch(variant({"cuda-graph-max-bs": 16}), "h", 1,
                                   EngineLauncher(launcher=["sglang", "serve"], version="0.5.23"), "python")
    assert "--cuda-graph-max-bs-decode" in remote.argv
    assert SGLangEngine().version_for(EngineLauncher(python=py), "python") == "0.5.12"


def test_server_info_summary() -> None:
    doc = {"version": "0.5.23", "max_running_requests": 48, "speculative_algorithm": "EAGLE",
           "internal_states": [{"avg_spec_accept_length": 2.7, "effective_max_running_requests_per_dp": 48}]}
    s = server_info_summary(doc)
    assert (s["max_running_requests"], s["speculative_algorithm"], s["avg_spec_accept_length"]) == (48, "EAGLE", 2.7)
    assert server_info_summary({})["avg_spec_accept_length"] is None


@pytest.mark.parametrize("doc, says", [
    ([], "/server_info: expected an object, got a list"),
    ({"version": 5}, "/server_info.version: expected a string, got an integer 5"),
    ({"max_running_requests": "64"}, "/server_info.max_running_requests: expected a non-negative integer"),
    ({"max_running_requests": -1}, "/server_info.max_running_requests: expected a non-negative integer"),
    ({"speculative_num_steps": [2]}, "/server_info.speculative_num_steps: expected a non-negative integer"),
    ({"speculative_algorithm": 1}, "/server_info.speculative_algorithm: expected a string"),
    ({"internal_states": {"a": 1}}, "/server_info.internal_states: expected a list"),
    ({"internal_states": ["x"]}, "/server_info.internal_states[0]: expected an object"),
    ({"internal_states": [{"effective_max_running_requests_per_dp": "8"}]},
     "/server_info.internal_states[0].effective_max_running_requests_per_dp: expected a non-negative integer"),
])
def test_a_server_info_of_the_wrong_types_is_a_malformed_answer(doc: Any, says: str) -> None:
    from cluster.engines.answer_fields import MalformedAnswerError

    with pytest.raises(MalformedAnswerError, match=re.escape(says)):
        SGLangEngine().parse_info("server_info", doc)


def test_the_recorded_server_infos_pass_the_type_check() -> None:
    from pathlib import Path

    paths = sorted((Path(__file__).resolve().parents[2] / "data" / "sglang_0.5.23_cpu").glob("server_info_*.json"))
    assert len(paths) == 3
    for p in paths:
        doc = json.loads(p.read_text())
        assert SGLangEngine().parse_info("server_info", doc) == doc
    with pytest.raises(Exception, match="/model_info: expected an object"):
        SGLangEngine().parse_info("model_info", "x")
