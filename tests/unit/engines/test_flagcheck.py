"""Launch flags checked by the engine's own parser: the checker's logic over a stub parser, the probe script, the sim."""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cluster.engines import flag_probe
from cluster.engines.sglang import SGLangEngine
from cluster.engines.flagcheck import (PROBE_SOURCE, ParserAnswer, check_launch_flags, closest_flag, launch_argvs,
                                       probe_answer, problems_in)
from cluster.errors import PreflightError
from cluster.plan.runs import expand_variants
from cluster.engines.sglang_flags import unrecognized
from cluster.sim.server import main as sim_main
from cluster.config.experiment import ExperimentSpec


def _stub_parser() -> argparse.ArgumentParser:
    """A parser shaped like SGLang's: prefixes allowed (argparse's default), typed values, a choice."""
    p = argparse.ArgumentParser(prog="stub")
    p.add_argument("--model-path", required=True)
    p.add_argument("--max-prefill-tokens", type=int)
    p.add_argument("--max-running-requests", type=int)
    p.add_argument("--enable-metrics", action="store_true")
    p.add_argument("--enable-metrics-for-all-schedulers", action="store_true")
    p.add_argument("--kv-cache-dtype", choices=["auto", "bf16", "fp8_e4m3"])
    return p


def _check(argv: list[str]) -> list[Any]:
    parser = _stub_parser()
    options = frozenset(flag_probe.option_strings(parser))
    return problems_in("v", argv, options, flag_probe.parse_error(parser, argv))


def test_a_valid_argv_has_no_problems() -> None:
    assert _check(["--model-path", "m", "--max-prefill-tokens", "4096", "--enable-metrics"]) == []


def test_a_misspelled_flag_is_unknown_with_the_closest_real_one() -> None:
    [p] = _check(["--model-path", "m", "--max-prefil-tokens", "4096"])
    assert (p.flag, p.kind, p.suggestion) == ("--max-prefil-tokens", "unknown", "--max-prefill-tokens")
    assert "did you mean max-prefill-tokens?" in p.message("SGLang")


def test_an_invented_flag_is_unknown_without_a_suggestion() -> None:
    [p] = _check(["--model-path", "m", "--enable-warp-drive"])
    assert (p.flag, p.kind, p.suggestion) == ("--enable-warp-drive", "unknown", None)
    assert "not a flag of SGLang" in p.message("SGLang")


def test_a_prefix_the_parser_takes_silently_is_refused_with_the_full_name() -> None:
    parser = _stub_parser()
    assert flag_probe.parse_error(parser, ["--model-path", "m", "--max-prefill", "8"]) is None  # argparse takes it
    [p] = _check(["--model-path", "m", "--max-prefill", "8"])
    assert (p.kind, p.suggestion) == ("abbreviated", "--max-prefill-tokens")
    assert "write the full name max-prefill-tokens" in p.message("SGLang")


def test_an_ambiguous_prefix_is_unknown_naming_the_candidates() -> None:
    [p] = _check(["--model-path", "m", "--enable-metric"])
    assert p.kind == "unknown" and "--enable-metrics, --enable-metrics-for-all-schedulers" in p.detail


def test_a_bad_value_is_the_parsers_own_error() -> None:
    [p] = _check(["--model-path", "m", "--kv-cache-dtype", "fp9"])
    assert p.kind == "invalid" and p.flag == "--kv-cache-dtype" and "invalid choice: 'fp9'" in p.detail
    [p] = _check(["--model-path", "m", "--max-running-requests", "many"])
    assert p.kind == "invalid" and "invalid int value: 'many'" in p.detail


def test_flag_equals_value_form_is_checked_by_name() -> None:
    [p] = _check(["--model-path", "m", "--max-prefil-tokens=8"])
    assert p.flag == "--max-prefil-tokens"


def test_closest_flag_ignores_far_words() -> None:
    assert closest_flag("--zzz", ["--max-prefill-tokens"]) is None
    assert closest_flag("--tp-sise", ["--tp-size", "--pp-size"]) == "--tp-size"


def test_the_probe_script_runs_without_sglbench(tmp_path: Path) -> None:
    """The probe needs only the standard library: run with -I (no site-packages of the main venv's path setup
    matter, no sglbench import) it answers, and says the parser is unreachable when the engine is absent."""
    job = json.dumps({"engine": "sglang", "parser": dataclasses.asdict(SGLangEngine.flag_parser),
                      "argvs": {"b": ["--model-path", "m"]}})
    done = subprocess.run([sys.executable, "-I", "-c", PROBE_SOURCE.read_text()], input=job, capture_output=True,
                          text=True, timeout=60, cwd=tmp_path, check=False)
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    assert "unreachable" in doc and "sglang" in doc["unreachable"]


def test_probe_answer_reports_an_interpreter_without_the_engine() -> None:
    answer = probe_answer(sys.executable, "sglang", {"b": ["--model-path", "m"]})
    assert isinstance(answer, str) and "parser cannot be built" in answer and "ModuleNotFoundError" in answer


def test_probe_answer_reports_a_missing_interpreter(tmp_path: Path) -> None:
    answer = probe_answer(str(tmp_path / "no-python"), "sglang", {"b": []})
    assert isinstance(answer, str) and "could not be run" in answer


SPEC: dict[str, Any] = {
    "name": "flags",
    "model": {"path": "/models/m", "engine": "sim", "tp": 1},
    "variants": [{"name": "baseline"},
                 {"name": "nextn", "speculative": {"algorithm": "NEXTN", "num_steps": [1, 2]}}],
    "workloads": [{"name": "w", "input_tokens": 16, "output_tokens": 8, "num_requests": 2}],
    "load": {"concurrency": [1]},
}


def _spec(**over: Any) -> ExperimentSpec:
    return ExperimentSpec.model_validate({**SPEC, **over})


def test_sim_flags_checked_here_by_its_own_parser() -> None:
    spec = _spec(variants=[{"name": "baseline"}, {"name": "nextn", "speculative": {"algorithm": "NEXTN",
                                                                                   "num_steps": [1, 2]},
                                                  "args": {"max-prefil-tokens": 4096}}])
    with pytest.raises(PreflightError) as info:
        check_launch_flags(spec, expand_variants(spec), sys.executable, on_node=False)
    assert info.value.field == "variants.1.args.max-prefil-tokens"
    assert "variant 'nextn-1'" in str(info.value) and "did you mean max-prefill-tokens?" in str(info.value)
    assert info.value.expected == "max-prefill-tokens"


def test_sim_flag_from_server_args_names_server_args() -> None:
    spec = _spec(server={"args": {"enable-warp-drive": True}})
    with pytest.raises(PreflightError) as info:
        check_launch_flags(spec, expand_variants(spec), sys.executable, on_node=False)
    assert info.value.field == "server.args.enable-warp-drive"


def test_sim_resolve_args_refusal_is_an_invalid_argv() -> None:
    spec = _spec(server={"args": {"stream-interval": 0}})
    with pytest.raises(PreflightError, match="--stream-interval must be >= 1"):
        check_launch_flags(spec, expand_variants(spec), sys.executable, on_node=False)


def test_valid_sim_spec_passes_without_warnings() -> None:
    spec = _spec(server={"args": {"max-prefill-tokens": 4096, "enable-metrics": True, "mem-fraction-static": 0.8}})
    assert check_launch_flags(spec, expand_variants(spec), sys.executable, on_node=False) == []


def test_sglang_flags_wait_for_the_node_and_a_launcher_is_a_warning() -> None:
    spec = _spec(model={"path": "/models/m", "engine": "sglang", "tp": 1},
                 server={"args": {"enable-warp-drive": True}})
    assert check_launch_flags(spec, expand_variants(spec), sys.executable, on_node=False) == []
    spec = _spec(model={"path": "/models/m", "engine": "sglang", "tp": 1},
                 engines={"sglang": {"launcher": ["/opt/run-sglang.sh"]}})
    [w] = check_launch_flags(spec, expand_variants(spec), sys.executable, on_node=True)
    assert w.startswith("warning: flags not checked for baseline, nextn-1, nextn-2 (engine sglang)")
    assert "launcher" in w


def test_on_the_node_an_interpreter_without_the_parser_is_a_warning() -> None:
    spec = _spec(model={"path": "/models/m", "engine": "vllm", "tp": 1}, variants=[{"name": "baseline"}])
    [w] = check_launch_flags(spec, expand_variants(spec), sys.executable, on_node=True)
    assert "flags not checked for baseline (engine vllm)" in w and "ModuleNotFoundError" in w


def test_launch_argvs_are_the_words_after_the_program() -> None:
    spec = _spec()
    argvs = launch_argvs(spec, expand_variants(spec), "python")
    assert argvs["baseline"][:2] == ["--model-path", "/models/m"]
    assert "--speculative-num-steps" in argvs["nextn-2"]


def test_the_simulator_refuses_a_flag_sglang_does_not_have(capsys: pytest.CaptureFixture[str]) -> None:
    assert sim_main(["--model-path", "m", "--port", "1", "--enable-warp-drive"]) == 2
    assert "error: unrecognized arguments: --enable-warp-drive" in capsys.readouterr().err
    assert unrecognized(["--mem-fraction-static", "0.8", "--tp", "8", "--cuda-graph-max-bs-decode", "4"]) == []
    assert unrecognized(["--quant", "fp8", "--speculative-draft", "x"]) == ["--quant", "--speculative-draft"]


def test_probe_answer_runs_a_relative_interpreter_path_from_the_callers_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative `engines.<e>.python` (the CPU demo's `.ci/venvs/sglang/bin/python`) names the same interpreter for
    the parser probe as for the import check and the server launch; the probe's own empty working directory made it
    "could not be run" and the demo's flags went unchecked."""
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "python").symlink_to(sys.executable)
    monkeypatch.chdir(tmp_path)
    answer = probe_answer("venv/bin/python", "sglang", {"b": ["--model-path", "m"]})
    assert isinstance(answer, str) and "could not be run" not in answer, answer
    assert answer.startswith(f"sglang's parser cannot be built in {tmp_path / 'venv' / 'bin' / 'python'}"), answer
