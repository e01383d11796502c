"""The tuning stage's GPU probe (distributed/tuning_stage.py probe_gpu_facts): typed facts from nvidia-smi and the
engine interpreter's package versions; missing tools give empty facts, never an exception."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from cluster.distributed import tuning_stage
from cluster.engines.tuning_contract import GpuFacts


def test_facts_from_nvidia_smi_and_the_engine_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    def run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        seen.append(argv)
        if argv[0] == "nvidia-smi":  # two GPUs: the first one's name, driver and capability, the count of lines
            out = "NVIDIA H200, 570.86, 9.0\nNVIDIA H200, 570.86, 9.0\n"
        else:
            out = "a warning line\n" + json.dumps({"sglang": "0.5.23", "flashinfer": "0.6.12", "triton": "3.4.0",
                                                   "torch": "2.9.1"}) + "\n"
        return subprocess.CompletedProcess(argv, 0, out, "")

    monkeypatch.setattr(tuning_stage.subprocess, "run", run)
    facts = tuning_stage.probe_gpu_facts("/opt/sglang/bin/python")
    assert facts == GpuFacts(gpu_name="NVIDIA H200", compute_capability="9.0", driver_version="570.86", gpu_count=2,
                             sglang_version="0.5.23", flashinfer_version="0.6.12", triton_version="3.4.0",
                             torch_version="2.9.1")
    assert facts.sm == "sm90" and seen[1][0] == "/opt/sglang/bin/python"


def test_no_tools_give_empty_facts(monkeypatch: pytest.MonkeyPatch) -> None:
    def run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        raise FileNotFoundError(argv[0])

    monkeypatch.setattr(tuning_stage.subprocess, "run", run)
    assert tuning_stage.probe_gpu_facts(None) == GpuFacts(gpu_name="")
