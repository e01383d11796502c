"""CLI hygiene, for every command the app has (walked from the click tree, so a new command is covered unasked):
a closed pipe ends quietly with 141 (128 + SIGPIPE), help paragraphs are never broken mid-sentence, and every help
has an example that parses against the command's own parameters.

"Broken mid-sentence" is detected at a terminal 1000 columns wide, where rich wraps nothing: every paragraph of a
command's docstring (and every parameter's help) must then sit whole on one rendered line, in the command's own help
and in its group's command table. A docstring line break that survives rendering splits a paragraph over two lines
and fails the check."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
import typer
from typer.testing import CliRunner

from cluster.cli import EXAMPLES, app, reflow, with_example
from cluster.commands.standard_output import EXIT_PIPE_CLOSED

REPO = Path(__file__).resolve().parents[3]
ARGPARSE_HELP = {"sim-server"}
"""Commands whose --help is their own argparse parser's (filled at 78 columns by design, not docstring breaks)."""


def _tree(cmd: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    yield path, cmd
    for name, sub in (getattr(cmd, "commands", None) or {}).items():
        yield from _tree(sub, f"{path} {name}".strip())


RAW = dict(_tree(typer.main.get_command(app)))
"""Every command path ("" is the top level) and its click command as the modules declare it (help not reflowed)."""
PATHS = sorted(RAW)


def _words(text: str) -> str:
    return " ".join(text.split())


def _help(path: str) -> str:
    res = CliRunner().invoke(app, [*path.split(), "--help"], env={"COLUMNS": "1000", "TERMINAL_WIDTH": "1000"})
    assert res.exit_code == 0, res.output
    return res.output


def _on_one_line(text: str, rendered: str) -> bool:
    return any(_words(text) in _words(line) for line in rendered.splitlines())


def test_the_walk_sees_the_known_commands() -> None:
    assert {"", "run", "validate", "plan", "results", "results compare", "schema", "sim-server"} <= set(PATHS)


@pytest.mark.parametrize("path", PATHS)
def test_every_paragraph_renders_on_one_line(path: str) -> None:
    raw = RAW[path]
    if path:  # the first paragraph is the command's line in its group's table
        parent = _help(path.rsplit(" ", 1)[0] if " " in path else "")
        first = reflow(raw.help or "").split("\n\n")[0]
        assert _on_one_line(first, parent), f"{path!r} in its group's table:\n{parent}"
    if path in ARGPARSE_HELP:
        return
    out = _help(path)
    for para in reflow(raw.help or "").split("\n\n"):
        assert _on_one_line(para, out), f"{path!r}: a paragraph is split over lines:\n{para}\n---\n{out}"
    for p in raw.params:
        if getattr(p, "help", None):
            assert _on_one_line(p.help, out), f"{path!r} {p.name}: help split over lines:\n{out}"


def test_reflow_joins_a_docstrings_lines_and_keeps_paragraphs_and_verbatim_blocks() -> None:
    doc = """First sentence goes
        on here.

        Second paragraph
        too.

        \b
        kept
          as is"""
    assert reflow(doc) == "First sentence goes on here.\n\nSecond paragraph too.\n\n\b\nkept\n  as is"
    assert with_example("Does it.\n\nExample: sglbench x", "run").count("Example:") == 1  # a docstring's own wins


@pytest.mark.parametrize("path", PATHS)
def test_every_help_has_an_example(path: str) -> None:
    if path in ARGPARSE_HELP:
        res = subprocess.run([sys.executable, "-m", "cluster.cli", *path.split(), "--help"], capture_output=True,
                             text=True, cwd=REPO, timeout=60)
        out = res.stdout
    else:
        out = _help(path)
    assert "Example:" in out or "example:" in out, out


@pytest.mark.parametrize("path", PATHS)
def test_each_example_parses_as_its_own_command(path: str) -> None:
    """The example a help shows (cluster/cli.py EXAMPLES, or the docstring's own) names that command, or one under
    it for a group, and parses against its parameters: no unknown option, no missing argument."""
    shown = [p for p in with_example(RAW[path].help or "", path).split("\n\n") if p.startswith("Example:")]
    assert shown, f"command {path!r} has no example (add one to cluster/cli.py EXAMPLES)"
    line = shown[0].removeprefix("Example:")
    argv = shlex.split(line.split(" && ")[0].split(" > ")[0].split(" | ")[0])
    assert argv[0] == "sglbench", line
    cmd: Any = typer.main.get_command(app)
    names: list[str] = []
    args = argv[1:]
    ctx = None
    while hasattr(cmd, "commands"):
        ctx = cmd.make_context(" ".join(["sglbench", *names]), [], parent=ctx, resilient_parsing=True)
        names.append(args[0])
        cmd, args = cmd.commands[args[0]], args[1:]
    assert " ".join(names).startswith(path), (path, line)
    cmd.make_context(names[-1], list(args), parent=ctx)  # raises click's UsageError for a bad option or argument


def _closed_stdout_run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run the console script's main with its stdout a pipe whose reader has already gone."""
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run([sys.executable, "-c", "import sys; from cluster.cli import main; "
                               f"sys.argv = ['sglbench', *{argv!r}]; main()"],
                              stdout=w, stderr=subprocess.PIPE, text=True, cwd=REPO, timeout=60)
    finally:
        os.close(w)


@pytest.mark.parametrize("path", PATHS)
def test_help_into_a_closed_pipe_ends_quietly_with_141(path: str) -> None:
    res = _closed_stdout_run([*path.split(), "--help"])
    assert res.stderr == ""
    # argparse's help (sim-server) ignores write errors itself and exits 0; nothing is printed either way
    assert res.returncode == (0 if path in ARGPARSE_HELP else EXIT_PIPE_CLOSED)


def test_a_bare_sglbench_into_a_closed_pipe_ends_quietly() -> None:
    res = _closed_stdout_run([])
    assert (res.returncode, res.stderr) == (EXIT_PIPE_CLOSED, "")


def test_long_output_through_head_ends_with_141_and_no_traceback(tmp_path: Path) -> None:
    """A real `| head -1` (bash, pipefail): `plan` of a 301-variant experiment prints ~350 KB in one print per line,
    far past the pipe's 64 KiB buffer, so its writes meet the pipe head closed after reading its line. Before, rich's
    console turned the EPIPE into exit 1 ("some runs failed")."""
    import yaml

    spec = yaml.safe_load((REPO / "experiments" / "demo-sim.yaml").read_text())
    base = {k: v for k, v in spec["variants"][0].items() if k != "profile"}
    spec["variants"] = [base] + [{"name": f"v{i}", "speculative": {"algorithm": "NEXTN", "num_steps": 1}}
                                 for i in range(300)]
    exp = tmp_path / "many.yaml"
    exp.write_text(yaml.safe_dump(spec))
    cli = f"{shlex.quote(sys.executable)} -m cluster.cli plan {shlex.quote(str(exp))}"
    full = subprocess.run(["bash", "-c", f"{cli} | wc -c"], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert int(full.stdout) > 4 * 65536, full
    res = subprocess.run(["bash", "-c", f"set -o pipefail; {cli} | head -1"], capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    assert res.stdout.startswith("# baseline"), res.stdout
    assert res.returncode == EXIT_PIPE_CLOSED, res
    assert "Traceback" not in res.stderr and "bug" not in res.stderr, res.stderr


def test_a_query_into_a_closed_pipe_ends_with_141(tmp_path: Path) -> None:
    from tests.unit.analysis.test_comparison import build_dataset

    build_dataset(str(tmp_path), "q", steps=[1], conc=(1,), repeats=1, n_requests=4, out_tokens=4)
    res = _closed_stdout_run(["results", "query", "q", "SELECT * FROM chunks", "--root", str(tmp_path), "--format",
                              "csv"])
    assert (res.returncode, res.stderr) == (EXIT_PIPE_CLOSED, "")


def test_an_epipe_that_is_not_stdout_is_still_a_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    """A BrokenPipeError from a socket (a server that went away) is not a closed output: reported, not silenced."""
    import cluster.commands.run as run_cmd

    def boom(_: Path) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(run_cmd, "load_spec", boom)
    res = CliRunner().invoke(app, ["validate", "x.yaml"])
    assert res.exit_code == 70
    assert "BrokenPipeError escaped" in res.output


@pytest.mark.parametrize("argv", [["--help"], ["schema"], ["run", "--help"]])
def test_output_that_cannot_be_written_is_an_environment_error_in_one_line(argv: list[str]) -> None:
    """/dev/full refuses every write (ENOSPC), as a full disk under `> out.csv` does: exit 3 and one line naming
    standard output; before, a traceback and 'this is a bug in sglbench (OSError escaped)', exit 70 (or 1)."""
    with open("/dev/full", "w") as full:
        res = subprocess.run([sys.executable, "-c", "import sys; from cluster.cli import main; "
                              f"sys.argv = ['sglbench', *{argv!r}]; main()"],
                             stdout=full, stderr=subprocess.PIPE, text=True, cwd=REPO, timeout=60)
    assert res.returncode == 3, res.stderr
    assert res.stderr == "error: cannot write standard output: No space left on device (errno 28)\n"


def test_a_closed_stdout_fd_is_not_an_error() -> None:
    """`sglbench schema >&-`: Python starts with sys.stdout None and writes nothing; nothing to report either."""
    res = subprocess.run(["bash", "-c", f"{shlex.quote(sys.executable)} -m cluster.cli schema >&-"],
                         capture_output=True, text=True, cwd=REPO, timeout=60)
    assert (res.returncode, res.stderr) == (0, "")


def test_checked_stdout_writes_what_it_is_given() -> None:
    res = subprocess.run([sys.executable, "-c", "import sys; from cluster.cli import main; "
                          "sys.argv = ['sglbench', 'schema']; main()"], capture_output=True, text=True, cwd=REPO,
                         timeout=60)
    from cluster.commands.schema import experiment_json_schema
    import json

    assert res.returncode == 0 and json.loads(res.stdout) == experiment_json_schema()


@pytest.mark.parametrize("argv", [["--help"], ["results", "list", "--bogus"]])
def test_a_terminal_width_typer_cannot_read_falls_back(argv: list[str]) -> None:
    """typer's rich help int()s TERMINAL_WIDTH unguarded: once a traceback (exit 1) for any help or usage text, then
    a refusal (exit 2); now a width setting that makes no sense falls back (tests/unit/commands/test_terminal.py)."""
    env = {**os.environ, "TERMINAL_WIDTH": "abc"}
    res = subprocess.run([sys.executable, "-m", "cluster.cli", *argv], capture_output=True, text=True, cwd=REPO,
                         env=env, timeout=60)
    assert "Traceback" not in res.stderr and "Usage:" in res.stdout + res.stderr, res.stderr
    assert res.returncode == (0 if argv == ["--help"] else 2)
