"""Results loaded once: every `sglbench results` command path opens the experiment's store once (one per side for
a two-experiment comparison), and the analysis it runs reads through that one Results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cluster.cli import app
from cluster.dataset.reading import StoreReader
from tests.unit.analysis.test_comparison import build_dataset


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The experiments a store was built for, in order (DatasetStore is a StoreReader)."""
    seen: list[str] = []
    init = StoreReader.__init__

    def counting(self: StoreReader, root: str, experiment: str) -> None:
        seen.append(experiment)
        init(self, root, experiment)

    monkeypatch.setattr(StoreReader, "__init__", counting)
    return seen


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> str:
    r = str(tmp_path_factory.mktemp("results"))
    build_dataset(r, "one", steps=[1, 2], repeats=2, conc=(1, 4), n_requests=8, out_tokens=8, device="cpu")
    build_dataset(r, "two", steps=[1, 2], repeats=2, conc=(1, 4), n_requests=8, out_tokens=8, seed=3)
    return r


# the stores each built before Results (acf842b): compare 4 (compare_table, served_devices, unintended_differences,
# resolved_cap_problems), --ci 2 (compare_with_ci, its request arrays' connect), --by 3, report 9, compare EXP_B and
# regress 2 per side, the run summary 4
@pytest.mark.parametrize("argv", [
    ["compare", "one"],
    ["compare", "one", "--ci", "--n-boot", "100"],
    ["compare", "one", "--by", "category", "--n-boot", "100"],
    ["capacity", "one"],
    ["query", "one", "SELECT count(*) AS n FROM runs"],
    ["show", "one"],
])
def test_one_store_per_command(root: str, opened: list[str], argv: list[str]) -> None:
    res = CliRunner().invoke(app, ["results", *argv, "--root", root])
    assert res.exit_code in (0, 2), res.output  # capacity: no search in this experiment (exit 2, said)
    assert opened == ["one"], opened


def test_report_opens_one_store(root: str, opened: list[str], tmp_path: Path) -> None:
    """Before: 9 (build_report, compare_with_ci and its connect, request_arrays, two category tables and their
    connects, capacity)."""
    res = CliRunner().invoke(app, ["results", "report", "one", "--root", root, "--out", str(tmp_path / "r"),
                                   "--n-boot", "100"])
    assert res.exit_code == 0, res.output
    assert opened == ["one"], opened


@pytest.mark.parametrize("cmd", [["compare", "one", "two"], ["regress", "one", "two"]])
def test_two_experiments_one_store_each(root: str, opened: list[str], cmd: list[str]) -> None:
    res = CliRunner().invoke(app, ["results", *cmd, "--root", root, "--n-boot", "100"])
    assert res.exit_code in (0, 1), res.output
    assert opened == ["one", "two"], opened


def test_run_summary_opens_one_store(root: str, opened: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """What `sglbench run` and the Ray job end with: compare and the tables after it read one Results."""
    from cluster.commands.results import print_run_summary
    from cluster.config.loader import parse_spec_text
    from tests.unit.analysis.test_comparison import SPEC

    spec: Any = parse_spec_text(SPEC.format(name="one", other="nextn", steps=[1, 2], out=8, n=8, conc=[1, 4],
                                            repeats=2))
    print_run_summary(root, spec, {"ok": 16})
    assert opened == ["one"], opened
