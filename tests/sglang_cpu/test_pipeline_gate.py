"""The correctness gate and partial acceptance on real SGLang 0.5.23 on the CPU, through the sglbench driver.

Random-weight models cannot answer the gate's tasks, so `correctness: {check_answers: false}` turns off only that
check: degeneracy, the baseline-prefix rule and the NEXTN acceptance floor still judge. The rand model's MTP layer
is random (the real "MTP head not effective" case): its NEXTN variant must be marked invalid for acceptance ~1.0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cpu_pipeline import assert_group_gone, facts, load, run, spec_text, table

pytestmark = pytest.mark.ray


def _experiment(name: str, model: Path, python: Path, tmp: Path, steps: int, baseline: bool,
                gate: str = "{enabled: true, check_answers: false, max_new_tokens: 32}") -> dict[str, Any]:
    variants = ("  - {name: baseline, baseline: true}\n" if baseline else "") + \
        f"  - {{name: nextn-{steps}, speculative: {{algorithm: NEXTN, num_steps: {steps}}}}}"
    spec = load(spec_text(name, model, python, tmp / "out", variants, gate=gate))
    # no node preflight: it imports SGLang's parser in the tier's interpreter (~23 s a run here) and only feeds the
    # sweep collapse and the experiment's metadata; the echo experiment and test_bad_model_path run it for real
    result = run(spec, tmp, preflight=False)
    return {"spec": spec, "result": result, "runs": table(result, spec, "runs").set_index("variant"),
            "correctness": table(result, spec, "correctness")}


@pytest.fixture(scope="module")
def mix_experiment(ray_local: None, sglang_cpu_python: Path, mimo_models: Path,
                   tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    # one server (no baseline: the echo experiment compares NEXTN with its baseline; the tier's time is tight)
    return _experiment("cpu-mix", mimo_models / "mix", sglang_cpu_python, tmp_path_factory.mktemp("mix"), 2, False)


@pytest.fixture(scope="module")
def rand_experiment(ray_local: None, sglang_cpu_python: Path, mimo_models: Path,
                    tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    # one server, as mix: the echo experiment already checks a NEXTN variant's prefix against its baseline; here
    # degeneracy passes, so acceptance alone fails the NEXTN variant
    # a random-weight model's window output is one token repeated: keep its output sample, do not judge it
    return _experiment("cpu-rand", mimo_models / "rand", sglang_cpu_python, tmp_path_factory.mktemp("rand"), 1, False,
                       gate="{enabled: true, check_answers: false, check_output_samples: false, max_new_tokens: 32}")


def test_mix_accepts_some_drafts_and_passes_the_gate(mix_experiment: dict[str, Any]) -> None:
    runs, result = mix_experiment["runs"], mix_experiment["result"]
    assert set(runs["status"]) == {"ok"}, runs[["status", "invalid_reasons", "failure_reason"]].to_dict("index")
    acc = float(runs.loc["nextn-2", "m_accept_length"])
    print(f"[sglang_cpu] mix NEXTN-2: accept length {acc:.3f}")
    assert 1.0 < acc < 3.0, f"mix should accept some drafts but not all: {acc:.3f}"
    assert acc > 1.2, "the mix model's MTP guess is right about 2 times in 3 (sglang-cpu-tier.md)"
    gate = result.servers["nextn-2"].segment.correctness
    assert gate.passed and not gate.skipped, gate.reasons
    assert gate.accept_length is not None and 1.05 < gate.accept_length < 3.0


def test_rand_nextn_is_invalid_for_acceptance_near_one(rand_experiment: dict[str, Any]) -> None:
    runs, result, corr = rand_experiment["runs"], rand_experiment["result"], rand_experiment["correctness"]
    assert list(runs.index) == ["nextn-1"]
    assert runs.loc["nextn-1", "status"] == "invalid"
    reason = str(runs.loc["nextn-1", "invalid_reasons"])
    assert "correctness gate failed" in reason and "acceptance length" in reason, reason
    gate = result.servers["nextn-1"].segment.correctness
    print(f"[sglang_cpu] rand NEXTN-1: gate accept length {gate.accept_length:.3f}; {gate.reasons}")
    assert gate.accept_length is not None and 0.99 <= gate.accept_length <= 1.05
    # the degeneracy rule passed, alone and under load: acceptance alone failed it
    assert [r for r in gate.reasons if not r.startswith("note:")] == [r for r in gate.reasons if "acceptance" in r]
    assert set(corr["variant"]) == {"nextn-1"} and set(corr["phase"]) == {"alone", "under_load"}
    assert corr["prompt_passed"].all() and not corr["variant_passed"].any()


def test_runs_carry_engine_and_cpu_device_evidence(mix_experiment: dict[str, Any]) -> None:
    """Numbers from this tier are CPU numbers: every runs row says engine=sglang and SGLang's resolved device=cpu."""
    import json

    runs = mix_experiment["runs"]
    for _, row in runs.iterrows():
        assert row["engine"] == "sglang"
        resolved = json.loads(row["resolved_args_json"])
        assert resolved["device"] == "cpu" and resolved["attention_backend"] == "intel_amx", resolved.get("device")
        assert "--device" in json.loads(row["launch_argv_json"])


def test_gate_servers_are_gone(mix_experiment: dict[str, Any], rand_experiment: dict[str, Any]) -> None:
    for exp in (mix_experiment, rand_experiment):
        for name in exp["result"].servers:
            assert_group_gone(facts(exp["result"], name).pgid, name)
