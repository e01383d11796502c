"""The node preflight's flag check with SGLang 0.5.23's own parser, and the simulator's copy of its flag list."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cluster.engines import flagcheck
from cluster.engines.flagcheck import ParserAnswer, check_launch_flags, launch_argvs, probe_answer
from cluster.errors import PreflightError
from cluster.plan.runs import expand_variants
from cluster.engines.sglang_flags import SGLANG_FLAGS
from cluster.config.experiment import ExperimentSpec


def _spec(py: Path, **over: Any) -> ExperimentSpec:
    doc: dict[str, Any] = {
        "name": "flags",
        "model": {"path": "/models/Qwen3.5-397B-A17B-NVFP4", "engine": "sglang", "tp": 8},
        "engines": {"sglang": {"python": str(py)}},
        "server": {"args": {"max-running-requests": 64, "kv-cache-dtype": "bf16", "attention-backend": "triton",
                            "cuda-graph-max-bs": 64, "enable-metrics": True}},
        "variants": [{"name": "baseline"},
                     {"name": "nextn", "speculative": {"algorithm": "NEXTN", "num_steps": [1, 3]}}],
        "workloads": [{"name": "w", "input_tokens": 16, "output_tokens": 8, "num_requests": 2}],
        "load": {"concurrency": [1]},
    }
    doc.update(over)
    return ExperimentSpec.model_validate(doc)


CASES: dict[str, dict[str, Any]] = {
    "valid": {},
    "misspelled": {"variants": [{"name": "baseline"},
                                {"name": "nextn", "speculative": {"algorithm": "NEXTN", "num_steps": 2},
                                 "args": {"max-prefil-tokens": 4096}}]},
    "invented": {"variants": [{"name": "b", "args": {"enable-warp-drive": True}}]},
    "abbreviated": {"variants": [{"name": "b", "args": {"max-prefill-tok": 8}}]},
    "bad-value": {"variants": [{"name": "b", "args": {"kv-cache-dtype": "fp9"}}]},
}
"""Every spec these tests check: their argvs go to SGLang's parser in one interpreter start (~12 s each here)."""


@pytest.fixture(scope="module")
def parser(sglang_venv_python: Path) -> ParserAnswer:
    """The real 0.5.23 parser's answer for every case's argvs at once, through the preflight's own probe."""
    argvs = {f"{case}/{name}": argv for case, over in CASES.items()
             for name, argv in launch_argvs(_spec(sglang_venv_python, **over),
                                            expand_variants(_spec(sglang_venv_python, **over)), "python").items()}
    answer = probe_answer(str(sglang_venv_python), "sglang", argvs)
    assert isinstance(answer, ParserAnswer), answer
    assert set(answer.errors) == set(argvs)
    return answer


def _check(case: str, py: Path, parser: ParserAnswer, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """check_launch_flags on one case, the parser's answers taken from the batch (the same argvs it was asked)."""
    spec = _spec(py, **CASES[case])
    variants = expand_variants(spec)
    asked = launch_argvs(spec, variants, "python")

    def answer(python: str, engine: str, argvs: dict[str, list[str]], timeout_s: float = 0.0) -> ParserAnswer:
        assert (python, engine) == (str(py), "sglang") and argvs == asked
        return ParserAnswer(parser.options, {name: parser.errors[f"{case}/{name}"] for name in argvs})

    monkeypatch.setattr(flagcheck, "probe_answer", answer)
    return check_launch_flags(spec, variants, "python", on_node=True)


def test_a_valid_spec_passes_sglangs_parser(sglang_venv_python: Path, parser: ParserAnswer,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    assert _check("valid", sglang_venv_python, parser, monkeypatch) == []


def test_a_misspelled_flag_is_refused_with_the_real_one(sglang_venv_python: Path, parser: ParserAnswer,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(PreflightError) as info:
        _check("misspelled", sglang_venv_python, parser, monkeypatch)
    msg = str(info.value)
    assert info.value.field == "variants.1.args.max-prefil-tokens"
    assert "variant 'nextn'" in msg and "--max-prefil-tokens is not a flag of SGLang" in msg
    assert "did you mean max-prefill-tokens?" in msg


def test_an_invented_flag_and_an_abbreviation_are_refused(sglang_venv_python: Path, parser: ParserAnswer,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(PreflightError, match="--enable-warp-drive is not a flag of SGLang"):
        _check("invented", sglang_venv_python, parser, monkeypatch)
    # argparse takes this prefix silently; SGLang's parser would start the server with it
    with pytest.raises(PreflightError, match="write the full name max-prefill-tokens"):
        _check("abbreviated", sglang_venv_python, parser, monkeypatch)


def test_a_value_sglang_refuses_is_refused(sglang_venv_python: Path, parser: ParserAnswer,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(PreflightError, match="invalid choice: 'fp9'") as info:
        _check("bad-value", sglang_venv_python, parser, monkeypatch)
    assert info.value.field == "variants.0.args.kv-cache-dtype"


def test_the_simulators_flag_list_is_sglangs(parser: ParserAnswer) -> None:
    """cluster/engines/sglang_flags.py SGLANG_FLAGS must equal the real 0.5.23 parser's long options."""
    real = {o for o in parser.options if o.startswith("--")}
    assert sorted(real - SGLANG_FLAGS) == [] and sorted(SGLANG_FLAGS - real) == []
