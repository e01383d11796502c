"""No behaviour change: on the stored dataset, every results output equals the one recorded at base a8528d0.

The dataset (tests/golden/data/golden-sim, Parquet as `sglbench run tests/golden/golden-sim.yaml` wrote it on the
simulator) is fixed, so every figure derived from it is too: `results show`, `compare` (plain, --ci, --by category,
--by position; table, JSON, CSV), `recommend` (table, JSON), the tables `sglbench run` ends with, and the report (its
HTML and the numbers each figure is drawn from). Bootstrap intervals use the commands' default seeds. The commands
read a relative root at a fixed COLUMNS=80, so no path or terminal width reaches an output; colour codes (present
only where the environment forces a terminal) are dropped; nothing else is normalised.
Recorded with Python 3.11.7, numpy 2.4.6, pandas 3.1.1, matplotlib 3.11.2, rich 15.0.0, duckdb 2.0.1, pyarrow 26.0.1:
a dependency upgrade that changes a rendering (a tick, a float's text) is a legitimate re-record, a refactor never.
A failure here means a change altered what a user sees; if that is intended, re-record with
tests/golden/regenerate.py (read its docstring first) and say which outputs changed and why.
"""

from __future__ import annotations

import difflib

import pytest

from tests.golden.golden_outputs import EXPECTED, dataset_copy, render_all

EXPECTED_FILES = sorted(p.name for p in EXPECTED.iterdir())


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    with dataset_copy(tmp_path_factory.mktemp("golden")):
        return render_all()


def test_the_outputs_are_the_recorded_ones(outputs: dict[str, str]) -> None:
    assert sorted(outputs) == EXPECTED_FILES, "an output was added or dropped: tests/golden/regenerate.py"


@pytest.mark.parametrize("name", EXPECTED_FILES)
def test_output_is_unchanged(outputs: dict[str, str], name: str) -> None:
    expected = (EXPECTED / name).read_text()
    got = outputs.get(name, "")
    if got != expected:
        lines = difflib.unified_diff(expected.splitlines(True), got.splitlines(True),
                                     f"expected/{name} (base a8528d0)", f"{name} now", n=1)
        diff = "".join(line if len(line) <= 400 else line[:400] + " [...]\n" for line in list(lines)[:80])
        pytest.fail(f"{name} changed on the stored dataset (issue 36: no behaviour change):\n{diff}")

