"""Tests whose verdicts rest on wall-clock steps say what machine load they tolerate (issue 37): each one listed here
states it in its module docstring after "Machine load tolerated:", and a test file that drives the simulator's (or
the runner's) clock and asserts on a timed figure is either listed or says here why it is not. The demo-based ones
run beside two CPU burners with scripts/cpu_burners.sh."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MARK = "Machine load tolerated:"

WALL_CLOCK_TESTS = (
    "tests/integration/test_demo.py",
    "tests/integration/test_recommend_demo.py",
    "tests/integration/test_capacity_search.py",
    "tests/integration/test_stop_when_saturated.py",
    "tests/integration/test_repeats_until.py",
    "tests/integration/test_repeats_until_sim_yaml.py",
    "tests/integration/test_tuning_experiment.py",
    "tests/integration/test_accuracy_under_load.py",
    "tests/contract/test_sim_capacity.py",
    "tests/contract/test_sim_steady_state.py",
    "tests/contract/test_sim_fixed_latency.py",
    "tests/unit/loadgen/test_runner.py",
)
NOT_WALL_CLOCK = {
    "tests/integration/test_progress_events.py": "its figures are compared with the runs table's own, not a bound",
    "tests/unit/loadgen/test_batches.py": "orders the lag percentiles (max >= p99 >= p50 > 0), whatever their size",
}

_CLOCK = re.compile(r"time_scale|decode_base_ms|decode_per_req_ms|fixed_itl_ms|fixed_ttft_ms|LoadPoint\(\"rate\"")
_TIMED = re.compile(r"output_tok_s|output_tps|tpot_ms|ttft_ms|speedup|saturat|capacity|lag_p50_ns|gaps_ms|\"counted\"")


def test_each_wall_clock_test_says_what_load_it_tolerates() -> None:
    silent = [t for t in WALL_CLOCK_TESTS if MARK not in (ast.get_docstring(ast.parse((REPO / t).read_text())) or "")]
    assert not silent, f"no '{MARK}' in the module docstring of {silent}"


def test_every_test_that_times_its_server_is_listed() -> None:
    found = []
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        text = path.read_text()
        timed = [ln for ln in text.splitlines() if ln.strip().startswith("assert") and _TIMED.search(ln)]
        if _CLOCK.search(text) and timed:
            found.append(str(path.relative_to(REPO)))
    unlisted = sorted(set(found) - set(WALL_CLOCK_TESTS) - set(NOT_WALL_CLOCK))
    assert not unlisted, f"asserts on figures timed by the wall clock: list them in WALL_CLOCK_TESTS with a '{MARK}' " \
                         f"statement, or in NOT_WALL_CLOCK with why not: {unlisted}"
    assert "tests/integration/test_demo.py" in found, "the scan finds the demo test"
