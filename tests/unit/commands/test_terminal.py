"""At 80 columns (a pipe, CI) every results table stays readable: no cell is cut with '…', no line is wider than
the terminal, one precision per column, 'ok/f/i' explained, repeated warnings said once."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from cluster.cli import app
from cluster.commands.terminal import print_table
from tests.unit.analysis.test_comparison import build_dataset


def _console(width: int) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=width, color_system=None), buf


def test_a_wide_table_prints_one_block_per_row_and_cuts_nothing() -> None:
    con, buf = _console(80)
    cols = [f"column number {i}" for i in range(10)]
    rows = [[f"row{r}-value-{i}-" + "x" * 12 for i in range(10)] for r in range(2)]
    print_table(con, cols, rows, title="wide")
    out = buf.getvalue()
    assert "…" not in out and max(map(len, out.splitlines())) <= 80
    for row in rows:
        assert all(cell in out for cell in row)
    assert "── row0-value-0-" in out  # the vertical layout's heading


def test_a_wide_table_passed_with_its_title_keeps_the_title_when_printed_vertically() -> None:
    """compare passes a Table titled per workload (`EXP / chat-thinking: ...`); printed vertically the title was
    dropped, so the tables of two workloads (two chat template settings) could not be told apart."""
    from rich.table import Table

    con, buf = _console(80)
    cols = [f"column number {i}" for i in range(10)]
    print_table(con, cols, [[f"value-{i}-" + "x" * 12 for i in range(10)]], table=Table(title="exp / chat-thinking"))
    out = buf.getvalue()
    assert "── value-0-" in out and out.splitlines()[0] == "exp / chat-thinking"


def test_a_table_that_fits_stays_a_table_and_long_words_fold() -> None:
    con, buf = _console(40)
    print_table(con, ["check", "found"], [["server_info.speculative_num_steps", "x" * 50]])
    out = buf.getvalue()
    assert "…" not in out and max(map(len, out.splitlines())) <= 40
    assert "server_info" in out and "┃ check" in out


@pytest.fixture(scope="module")
def one_repeat(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = str(tmp_path_factory.mktemp("one"))
    build_dataset(root, "one", steps=[1, 2], conc=(1, 4), repeats=1, n_requests=12, out_tokens=16)
    return root


@pytest.mark.parametrize("args", [["compare", "one"], ["compare", "one", "--ci", "--n-boot", "200"],
                                  ["show", "one"], ["list"]])
def test_results_tables_fit_80_columns(one_repeat: str, args: list[str]) -> None:
    res = CliRunner().invoke(app, ["results", *args, "--root", one_repeat], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    assert "…" not in res.output and max(map(len, res.output.splitlines())) <= 80, res.output


def test_plain_compare_explains_its_columns_with_one_precision_each(one_repeat: str) -> None:
    res = CliRunner().invoke(app, ["results", "compare", "one", "--root", one_repeat], env={"COLUMNS": "80"})
    assert "ok/f/i = ok / failed / invalid repeats" in res.output
    assert "TTFT99" in res.output and "TTFT50" not in res.output  # the same TTFT statistic as --ci shows
    tpot = [line.split()[6] for line in res.output.splitlines() if line.startswith(" c")]
    assert tpot and len({len(t.split(".")[1]) for t in tpot}) == 1  # two decimals in every TPOT cell


def test_repeated_warnings_are_said_once(one_repeat: str) -> None:
    res = CliRunner().invoke(app, ["results", "compare", "one", "--ci", "--n-boot", "200", "--root", one_repeat])
    text = " ".join(res.output.split())
    assert text.count("warning ") == 3, res.output  # short windows, one repeat, few requests for a p99
    assert text.count("(all 6 points)") == 3 and text.count("1 repeat: run-to-run variance") == 1


@pytest.mark.parametrize("environ, after", [
    ({"COLUMNS": "0"}, {}), ({"TERMINAL_WIDTH": "-5"}, {}), ({"TERMINAL_WIDTH": "abc"}, {}), ({"COLUMNS": ""}, {}),
    ({"LINES": "0", "COLUMNS": "120"}, {"COLUMNS": "120"}), ({"COLUMNS": "5"}, {"COLUMNS": "20"}),
    ({"COLUMNS": "10000000", "TERMINAL_WIDTH": "1000"}, {"COLUMNS": "1000", "TERMINAL_WIDTH": "1000"}),
    ({"COLUMNS": "80", "LINES": "24", "OTHER": "0"}, {"COLUMNS": "80", "LINES": "24", "OTHER": "0"}),
])
def test_terminal_sizes_that_make_no_sense_fall_back(environ: dict[str, str], after: dict[str, str]) -> None:
    from cluster.commands.terminal import sane_terminal_size

    sane_terminal_size(environ)
    assert environ == after


def _sglbench(argv: list[str], **env: str) -> "subprocess.CompletedProcess[str]":
    import os
    import subprocess
    import sys

    clean = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "TERMINAL_WIDTH")}
    return subprocess.run([sys.executable, "-m", "cluster.cli", *argv], capture_output=True, text=True,
                          env={**clean, **env}, cwd=Path(__file__).resolve().parents[3], timeout=120)


@pytest.mark.parametrize("env", [{"COLUMNS": "0"}, {"TERMINAL_WIDTH": "-5"}, {"TERMINAL_WIDTH": "0"},
                                 {"COLUMNS": "10000000"}], ids=lambda e: "=".join(*e.items()))
@pytest.mark.parametrize("command", ["help", "list"])
def test_results_list_and_help_print_at_a_sane_width(one_repeat: str, env: dict[str, str], command: str) -> None:
    """Before: COLUMNS=0 or TERMINAL_WIDTH<=0 printed nothing and exited 0 (rich drew at width 0); COLUMNS=10^7
    padded every help line to ten million columns (340 MB of --help)."""
    argv = ["--help"] if command == "help" else ["results", "list", "--root", one_repeat]
    res = _sglbench(argv, **env)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    lines = res.stdout.splitlines()
    assert ("Usage:" if command == "help" else "one") in res.stdout
    assert 20 <= max(map(len, lines)) <= 1000, max(map(len, lines))
