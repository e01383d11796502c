"""The real-SGLang-on-CPU tier: runs only where scripts/setup_sglang_venv.sh built SGLang 0.5.23's venv with the CPU test stand-ins.

SGLBENCH_SGLANG_VENV names the venv (default <repo>/.ci/venvs/sglang). When SGLBENCH_REQUIRE_TIERS contains
"sglang", a missing venv (or one without the stand-ins) fails the tier instead of skipping it (CI sets this).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILDER = Path(__file__).with_name("build_mimo_model.py")
PROBE_TIMEOUT_S = 300
MODEL_BUILD_TIMEOUT_S = 300


def sglang_venv() -> Path:
    return Path(os.environ.get("SGLBENCH_SGLANG_VENV") or REPO / ".ci" / "venvs" / "sglang")


def _required() -> bool:
    return "sglang" in os.environ.get("SGLBENCH_REQUIRE_TIERS", "")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for it in items:
        if here in Path(str(it.fspath)).parents:
            it.add_marker(pytest.mark.sglang_cpu)


@pytest.fixture(scope="session")
def sglang_cpu_python() -> Path:
    """The SGLang venv's interpreter, checked to import sglang and the stand-ins; skips (or fails when required)."""
    venv = sglang_venv()
    py = venv / "bin" / "python"
    problem = None
    if not py.exists():
        problem = f"SGLang venv not found at {venv} (build it with scripts/setup_sglang_venv.sh)"
    else:
        probe = subprocess.run([str(py), "-c", "import sglang, sgl_kernel, torchvision, sglbench_cpu_standins"],
                               capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
        if probe.returncode != 0:
            last = (probe.stderr.strip().splitlines() or ["?"])[-1]
            problem = f"SGLang venv at {venv} lacks sglang or the CPU stand-ins (rerun scripts/setup_sglang_venv.sh): {last}"
    if problem:
        if _required():
            pytest.fail(problem + "; SGLBENCH_REQUIRE_TIERS requires this tier", pytrace=False)
        pytest.skip(problem)
    return py


@pytest.fixture(scope="session")
def mimo_models(sglang_cpu_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """echo/, mix/ and rand/ tiny MiMo models built locally (seeded, nothing downloaded), shared by the tier."""
    out = tmp_path_factory.mktemp("tiny-mimo")
    t0 = time.monotonic()
    proc = subprocess.run([str(sglang_cpu_python), str(BUILDER), str(out), "--seed", "0"], capture_output=True,
                          text=True, timeout=MODEL_BUILD_TIMEOUT_S)
    assert proc.returncode == 0, f"tiny MiMo build failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    print(f"[sglang_cpu] tiny MiMo models built in {time.monotonic() - t0:.1f} s")
    for variant in ("echo", "mix", "rand"):
        assert (out / variant / "config.json").exists() and (out / variant / "model.safetensors").exists()
    return out


ORACLE_PROFILE_STEPS = 4


@pytest.fixture(scope="session")
def oracle_baseline(sglang_cpu_python: Path, mimo_models: Path,
                    tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """SGLang's own torch_native attention on the echo model, started directly (no driver, no stand-in attention in
    the path): the oracle for greedy outputs. One start serves its greedy outputs, /server_info, its transcript and
    a kernel profile (taken last); the server is stopped before the fixture returns (one server at a time)."""
    from record_transcripts import record_running, redaction_paths
    from sglang_cpu_server import ORACLE_MAX_NEW_TOKENS, SGLangCPUServer, baseline_args

    log_dir = tmp_path_factory.mktemp("oracle")
    server = SGLangCPUServer(python=sglang_cpu_python, model=mimo_models / "echo", extra_args=baseline_args(),
                             log_path=log_dir / "baseline.log")
    got: dict[str, Any] = {}
    try:
        server.start()
        print(f"[sglang_cpu] oracle baseline: healthy after {server.start_s:.1f} s")
        got["outputs"] = server.greedy_outputs(ORACLE_MAX_NEW_TOKENS)
        status, body = server.request("/server_info")
        assert status == 200, body[:500]
        got["server_info"] = json.loads(body)
        got["transcript"] = record_running(server, "baseline", redaction_paths(sglang_cpu_python, mimo_models,
                                                                                log_dir))
        got["profile"] = _profile(server, log_dir / "profile")
    finally:
        server.stop()
    got["log_tail"] = server.log_tail()
    return got


def _profile(server: Any, out: Path) -> dict[str, Any]:
    """sglbench's own /start_profile body, two short requests, then the traces and /stop_profile's answer."""
    from sglang_cpu_server import PROMPTS

    from cluster.engines.sglang import SGLangEngine
    from cluster.telemetry.profile import wait_for_traces

    req = SGLangEngine().profile_request(str(out), ORACLE_PROFILE_STEPS, "sglbench-real", cpu=True)
    assert req is not None
    status, text = server.request(req.path, json.loads(req.body))
    assert status == 200, text
    for p in PROMPTS[:2]:
        assert server.generate(p, max_new_tokens=8)[0] == 200
    files = wait_for_traces(out, 1, timeout_s=120)
    return {"out": out, "files": files, "stop": server.request("/stop_profile", {})}
