"""The node preflight's flag check with SGLang 0.5.23's own parser, and the simulator's copy of its flag list."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from cluster.engines.flagcheck import PROBE_SOURCE, check_launch_flags
from cluster.plan.preflight import PreflightError
from cluster.plan.runs import expand_variants
from cluster.sim.launch_args import SGLANG_FLAGS
from cluster.spec.models import ExperimentSpec


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


def _check(spec: ExperimentSpec) -> list[str]:
    return check_launch_flags(spec, expand_variants(spec), "python", on_node=True)


def test_a_valid_spec_passes_sglangs_parser(sglang_venv_python: Path) -> None:
    assert _check(_spec(sglang_venv_python)) == []


def test_a_misspelled_flag_is_refused_with_the_real_one(sglang_venv_python: Path) -> None:
    variants = [{"name": "baseline"}, {"name": "nextn", "speculative": {"algorithm": "NEXTN", "num_steps": 2},
                                       "args": {"max-prefil-tokens": 4096}}]
    with pytest.raises(PreflightError) as info:
        _check(_spec(sglang_venv_python, variants=variants))
    msg = str(info.value)
    assert info.value.field == "variants.1.args.max-prefil-tokens"
    assert "variant 'nextn'" in msg and "--max-prefil-tokens is not a flag of SGLang" in msg
    assert "did you mean max-prefill-tokens?" in msg


def test_an_invented_flag_and_an_abbreviation_are_refused(sglang_venv_python: Path) -> None:
    with pytest.raises(PreflightError, match="--enable-warp-drive is not a flag of SGLang"):
        _check(_spec(sglang_venv_python, variants=[{"name": "b", "args": {"enable-warp-drive": True}}]))
    # argparse takes this prefix silently; SGLang's parser would start the server with it
    with pytest.raises(PreflightError, match="write the full name max-prefill-tokens"):
        _check(_spec(sglang_venv_python, variants=[{"name": "b", "args": {"max-prefill-tok": 8}}]))


def test_a_value_sglang_refuses_is_refused(sglang_venv_python: Path) -> None:
    with pytest.raises(PreflightError, match="invalid choice: 'fp9'") as info:
        _check(_spec(sglang_venv_python, variants=[{"name": "b", "args": {"kv-cache-dtype": "fp9"}}]))
    assert info.value.field == "variants.0.args.kv-cache-dtype"


def test_the_simulators_flag_list_is_sglangs(sglang_venv_python: Path, tmp_path: Path) -> None:
    """cluster/sim/launch_args.py SGLANG_FLAGS must equal the real 0.5.23 parser's long options."""
    job = json.dumps({"engine": "sglang", "argvs": {}})
    done = subprocess.run([str(sglang_venv_python), "-c", PROBE_SOURCE.read_text()], input=job, capture_output=True,
                          text=True, timeout=300, cwd=tmp_path, check=True)
    options = json.loads(done.stdout.strip().splitlines()[-1])["options"]
    real = {o for o in options if o.startswith("--")}
    assert sorted(real - SGLANG_FLAGS) == [] and sorted(SGLANG_FLAGS - real) == []
