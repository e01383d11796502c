"""Adaptive speculation judged by SGLang 0.5.23's own launch pipeline: `plan` refuses what SGLang would refuse or
silently turn off, in SGLang's words, and lets a supported NEXTN configuration through.

The pipeline reads the checkpoint's config, so the tier builds the CPU tier's tiny MiMo model (seeded, local, ~5 s)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from cluster.engines import flagcheck
from cluster.engines.adaptive_check import resolve_envs
from cluster.engines.flagcheck import ParserAnswer, check_launch_flags, launch_argvs, probe_answer
from cluster.errors import PreflightError
from cluster.plan.runs import expand_variants
from cluster.config.experiment import ExperimentSpec

BUILDER = Path(__file__).resolve().parents[1] / "sglang_cpu" / "build_mimo_model.py"


@pytest.fixture(scope="module")
def model_and_config(sglang_venv_python: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("adaptive")
    done = subprocess.run([str(sglang_venv_python), str(BUILDER), str(out), "--variants", "mix", "--seed", "0"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    config = out / "adaptive.json"
    config.write_text(json.dumps({"1": {"candidate_steps": [1]}, "4": {"candidate_steps": [2]}}))
    return out / "mix", config


def _spec(py: Path, model: Path, config: Path, **speculative: Any) -> ExperimentSpec:
    return ExperimentSpec.model_validate({
        "name": "adaptive",
        "model": {"path": str(model), "engine": "sglang", "tp": 1},
        "engines": {"sglang": {"python": str(py)}},
        "server": {"args": {"device": "cpu", "attention-backend": "intel_amx", "disable-cuda-graph": True,
                            "max-running-requests": 8, "kv-cache-dtype": "bf16"},
                   "env": {"SGLANG_USE_CPU_ENGINE": "1", "SGLBENCH_CPU_STANDINS": "1"}},
        "variants": [{"name": "baseline"},
                     {"name": "adaptive", "speculative": {"algorithm": "NEXTN", "adaptive": {"file": str(config)},
                                                          **speculative}}],
        "workloads": [{"name": "w", "input_tokens": 16, "output_tokens": 8, "num_requests": 2}],
        "load": {"concurrency": [1]},
    })


CASES: dict[str, dict[str, Any]] = {
    "supported": {"num_steps": 1},
    "topk-2": {"num_steps": 1, "eagle_topk": 2},
    "outside-candidates": {"num_steps": 3},
}


@pytest.fixture(scope="module")
def answer(sglang_venv_python: Path, model_and_config: tuple[Path, Path]) -> ParserAnswer:
    """SGLang's own resolution of every case's adaptive argv, in one interpreter start."""
    argvs: dict[str, list[str]] = {}
    envs: dict[str, dict[str, str]] = {}
    for case, over in CASES.items():
        spec = _spec(sglang_venv_python, *model_and_config, **over)
        variants = [v for v in expand_variants(spec) if v.name == "adaptive"]
        argvs[case] = launch_argvs(spec, variants, "python")["adaptive"]
        envs[case] = resolve_envs(variants)["adaptive"]
    got = probe_answer(str(sglang_venv_python), "sglang", argvs, resolve=envs)
    assert isinstance(got, ParserAnswer), got
    return got


def _plan_check(case: str, py: Path, model_and_config: tuple[Path, Path], answer: ParserAnswer,
                monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """check_launch_flags as `plan` runs it (on_node False: SGLang and the model are on this machine)."""
    spec = _spec(py, *model_and_config, **CASES[case])

    def from_batch(python: str, engine: str, argvs: dict[str, list[str]], timeout_s: float = 0.0,
                   resolve: dict[str, dict[str, str]] = {}) -> ParserAnswer:
        assert (python, engine, sorted(argvs), sorted(resolve)) == (str(py), "sglang", ["adaptive"], ["adaptive"])
        return ParserAnswer(answer.options, {"adaptive": answer.errors[case]}, {"adaptive": answer.adaptive[case]})

    monkeypatch.setattr(flagcheck, "probe_answer", from_batch)
    return check_launch_flags(spec, expand_variants(spec), "python", on_node=False)


def test_sglang_resolves_each_case_as_its_own_code_says(answer: ParserAnswer) -> None:
    assert answer.adaptive["supported"].on and answer.adaptive["supported"].reason is None
    refused = answer.adaptive["topk-2"]
    assert refused.reached and not refused.on and refused.error is None
    assert refused.reason == "speculative_eagle_topk=2 (only topk=1 is supported)"
    outside = answer.adaptive["outside-candidates"]
    assert outside.error is not None and outside.reason == (
        "ValueError: --speculative-num-steps=3 is not in the adaptive config candidate_steps [1, 2]. Pass one of "
        "those values.")


def test_plan_accepts_a_supported_nextn_adaptive_variant(sglang_venv_python: Path, model_and_config: tuple[Path, Path],
                                                        answer: ParserAnswer, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _plan_check("supported", sglang_venv_python, model_and_config, answer, monkeypatch) == []


def test_plan_refuses_topk_2_in_sglangs_words(sglang_venv_python: Path, model_and_config: tuple[Path, Path],
                                             answer: ParserAnswer, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(PreflightError) as info:
        _plan_check("topk-2", sglang_venv_python, model_and_config, answer, monkeypatch)
    assert info.value.field == "variants.1.speculative.adaptive"
    msg = str(info.value)
    assert "would silently turn --speculative-adaptive off" in msg
    assert "adaptive_unsupported_reason: speculative_eagle_topk=2 (only topk=1 is supported)" in msg


def test_plan_refuses_a_start_depth_outside_the_candidates(sglang_venv_python: Path,
                                                          model_and_config: tuple[Path, Path], answer: ParserAnswer,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(PreflightError, match=r"refuses the adaptive configuration: ValueError: "
                                             r"--speculative-num-steps=3 is not in the adaptive config"):
        _plan_check("outside-candidates", sglang_venv_python, model_and_config, answer, monkeypatch)
