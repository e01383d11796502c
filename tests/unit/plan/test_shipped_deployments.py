"""The shipped reference-node deployment study (experiments/qwen35-397b-nvfp4-deployments.yaml) planned: `plan` prints
every server process's command (TP8, two TP4 replicas, a TP4 prefill and a TP4 decode), each valid shell under its
GPUs comment; every deployment holds the node's 8 GPUs; the per-server caps its header decides are what is launched;
and, where SGLang 0.5.23's environment is here, SGLang's own parser accepts every process's argv."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cluster.config.loader import load_spec
from cluster.plan.deployment import processes_of, variant_reservation
from cluster.plan.runs import expand_variants
from tests.unit.test_plan_study_pins import PINS

REPO = Path(__file__).resolve().parents[3]
STUDY = REPO / "experiments" / "qwen35-397b-nvfp4-deployments.yaml"
PROCESSES = {  # the comment's head -> (tp, the role flags its command carries)
    "# tp8 (baseline) ": (8, {}),
    "# 2xtp4 replica-0: ": (4, {}),
    "# 2xtp4 replica-1: ": (4, {}),
    "# 4p4d prefill-0: ": (4, {"--disaggregation-mode": "prefill", "--disaggregation-transfer-backend": "mooncake",
                               "--disaggregation-bootstrap-port": "8998"}),
    "# 4p4d decode-0: ": (4, {"--disaggregation-mode": "decode", "--disaggregation-transfer-backend": "mooncake"}),
}


def _flag(argv: list[str], flag: str) -> str:
    assert argv.count(flag) == 1, (flag, argv)
    return argv[argv.index(flag) + 1]


def test_plan_prints_every_process_command_under_its_gpus() -> None:
    from cluster.cli import app

    res = CliRunner().invoke(app, ["plan", str(STUDY)])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    launches = [line for line in lines if "sglang.launch_server" in line]
    assert len(launches) == 5, launches  # 1 + 2 + 2 servers; the gateway is no launch_server
    ports = set()
    for head, (tp, role) in PROCESSES.items():
        at = next(i for i, line in enumerate(lines) if line.startswith(head))
        assert f"{tp} GPU(s)" in lines[at] or f"tp={tp}" in lines[at], lines[at]
        cmd = next(line for line in lines[at + 1:] if not line.startswith("#"))
        assert cmd in launches
        words = shlex.split(cmd)  # valid shell: env assignments, then the argv
        env = [w for w in words[:words.index("-m")] if "=" in w]
        argv = words[len(env):]
        assert argv[:3] == ["/opt/sglang/bin/python", "-m", "sglang.launch_server"]
        assert _flag(argv, "--tp-size") == str(tp)
        for flag, value in role.items():
            assert _flag(argv, flag) == value
        if not role:
            assert not any(w.startswith("--disaggregation") for w in argv) and env == []
        else:  # the header's decision: mooncake over TCP (no NVLink on SM120, no RDMA NIC recorded)
            assert env == ["MC_FORCE_TCP=1"]
        # the header's cap decision: 64 per server, the highest load point, so no server's cap binds
        assert _flag(argv, "--max-running-requests") == "64" and _flag(argv, "--cuda-graph-max-bs-decode") == "64"
        ports.add(_flag(argv, "--port"))
    assert len(ports) == 2  # a deployment's processes print distinct ports (a free one each at start)


def test_every_process_carries_the_studies_pins_and_plan_finds_nothing_unfair() -> None:
    from cluster.cli import app

    out = CliRunner().invoke(app, ["plan", str(STUDY)], terminal_width=400)
    assert out.exit_code == 0, out.output
    argv_lines = [ln for ln in out.output.splitlines() if "sglang.launch_server" in ln]
    pins = PINS + ("--chunked-prefill-size 8192",)
    assert len(argv_lines) == 5 and all(pin in ln for ln in argv_lines for pin in pins)
    assert "warning:" not in out.output and "error:" not in out.output
    assert "fairness: no findings" in out.output


def test_every_deployment_holds_the_node_and_no_cap_binds() -> None:
    spec = load_spec(STUDY)
    variants = {v.name: v for v in expand_variants(spec)}
    assert list(variants) == ["tp8", "2xtp4", "4p4d"]
    assert spec.isolation == "node" and spec.cluster.gpus_per_node == 8 and spec.cluster.nodes == 1
    top = max(spec.load.concurrency or [])
    for v in variants.values():
        assert v.gpus == 8, v.name  # equal GPUs: totals compare directly
        r = variant_reservation(v, spec.isolation, spec.cluster.gpus_per_node)
        assert r.gpus == 8 and r.strategy == "STRICT_PACK", (v.name, r)
        for pv in processes_of(v):
            assert pv.args["max-running-requests"] == top, pv.name


def _sglang_python() -> Path:
    venv = Path(os.environ.get("SGLBENCH_SGLANG_VENV", REPO / ".ci" / "venvs" / "sglang"))
    return venv / "bin" / "python"


@pytest.mark.skipif(not _sglang_python().exists(), reason="no SGLang venv (SGLBENCH_SGLANG_VENV or .ci/venvs/sglang)")
def test_sglang_own_parser_accepts_every_process_argv() -> None:
    from cluster.engines.flagcheck import check_launch_flags

    spec = load_spec(STUDY)
    here = spec.engines["sglang"].model_copy(update={"python": str(_sglang_python())})
    spec = spec.model_copy(update={"engines": {"sglang": here}})
    procs = [pv for v in expand_variants(spec) for pv in processes_of(v)]
    assert [p.name for p in procs] == ["tp8", "2xtp4.replica-0", "2xtp4.replica-1", "4p4d.prefill-0",
                                       "4p4d.decode-0"]
    assert check_launch_flags(spec, procs, sys.executable, on_node=True) == []
