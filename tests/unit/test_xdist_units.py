"""The suite's two xdist workers never run two real engine servers (or two GPU tests) at once: every test of the
real-engine tiers is one work unit; any other module is a unit of its own (tests/conftest.py)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from tests.conftest import REAL_ENGINE_GROUP, _scope

REPO = Path(__file__).resolve().parents[2]


def test_real_engine_and_gpu_tests_are_one_unit_and_other_modules_their_own() -> None:
    assert {_scope(n) for n in ("tests/sglang_cpu/test_pipeline.py::test_a", "tests/sglang_cpu/test_x.py::t[p]",
                                "tests/e2e/test_vllm_e2e.py::test_b", "tests/gpu/test_gpu_tuning.py::test_c")} \
        == {REAL_ENGINE_GROUP}
    assert _scope("tests/integration/test_faults.py::test_a") == "tests/integration/test_faults.py"
    assert _scope("tests/unit/loadgen/test_runner.py::test_b[x]") == "tests/unit/loadgen/test_runner.py"
    # every directory under tests/ that starts a real server or needs the GPU is in the unit
    for d in ("sglang_cpu", "e2e", "gpu"):
        for f in (REPO / "tests" / d).glob("test_*.py"):
            assert _scope(f"tests/{d}/{f.name}::t") == REAL_ENGINE_GROUP, f


def test_the_suite_runs_on_two_workers_by_unit() -> None:
    opts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    # loadscope is the scheduler the conftest hook subclasses; loadgroup marks do nothing under pytest 9
    assert "-n 2" in opts and "--dist loadscope" in opts and "--no-loadscope-reorder" in opts


def test_no_two_test_modules_share_a_name() -> None:
    # without __init__.py files pytest imports test modules by their basename: a second test_capacity.py made the
    # collector drop one of the two modules (CI at 66a7865 collected 1164 items instead of 1184, with no error line)
    from collections import Counter
    from pathlib import Path

    tests = Path(__file__).resolve().parents[1]
    names = Counter(p.name for p in tests.rglob("test_*.py"))
    assert [n for n, k in names.items() if k > 1] == []
