"""Environment capture: optional parts absent rather than failing; nvidia-smi CSV parsed when present."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from cluster.engines.environment import NVIDIA_SMI_FIELDS, capture_environment, engine_packages, nvidia_smi_gpus


def test_capture_without_gpus_or_engine_never_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    env = capture_environment(python=str(tmp_path / "no-python"), timeout_s=5)
    assert env["hostname"] and env["packages"] == {} and "gpus" not in env


def test_engine_interpreter_versions_are_read() -> None:
    env = capture_environment(python=sys.executable, timeout_s=60)
    assert "sglang" not in env["packages"] or env["packages"]["sglang"]
    if "torch" in env["packages"]:
        assert env["packages"]["torch"][0].isdigit()


def test_fake_nvidia_smi_is_parsed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    row = "0, NVIDIA RTX PRO 6000 Blackwell Server Edition, 97887, 2617, 14001, 580.95, 00000000:01:00.0, 600.00"
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\nif [ -n "$1" ]; then echo "{row}"; echo "{row.replace("0,", "1,", 1)}"; '
                   'else echo "| NVIDIA-SMI 580.95   Driver Version: 580.95   CUDA Version: 13.0 |"; fi\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    gpus = nvidia_smi_gpus()
    assert len(gpus) == 2 and set(gpus[0]) == set(NVIDIA_SMI_FIELDS)
    assert gpus[1]["index"] == "1" and gpus[0]["memory.total"] == "97887"
    env = capture_environment(python=None)
    assert env["driver_version"] == "580.95" and env["cuda_driver"] == "13.0" and len(env["gpus"]) == 2


@pytest.mark.parametrize("answer", ["[" * 100000 + "]" * 100000, "1" * 5000, "not json", ""])
def test_an_interpreter_answer_of_any_shape_is_no_packages(tmp_path: Path, answer: str) -> None:
    """The engine's interpreter is the user's: whatever its last line holds (nested past the decoder's recursion
    limit, an integer past the digit limit, junk), capture_environment 'never raises' keeps its word (a deeply
    nested line once escaped as RecursionError, the class doctor's interpreter check already guarded)."""
    fake = tmp_path / "python"
    (tmp_path / "answer.txt").write_text(answer + "\n")
    fake.write_text(f"#!/bin/sh\ncat {tmp_path / 'answer.txt'}\n")
    fake.chmod(0o755)
    assert engine_packages(str(fake), timeout_s=10) == {}
