"""One refusal path: every non-zero exit of a command goes through the error tree (cluster/errors.py), which prints
one `error:` line naming file, field and cause. An AST scan of cluster/commands/ and cluster/cli.py finds the ad hoc
ones (a line printed, then `typer.Exit(2)` / `sys.exit(n)`); the refusals it once found are checked to print one line."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator, Optional

import pytest
from typer.testing import CliRunner

from cluster.cli import app

REPO = Path(__file__).resolve().parents[3]
SCANNED = sorted((REPO / "cluster" / "commands").glob("*.py")) + [REPO / "cluster" / "cli.py"]

EXIT_CALLS = {"Exit", "exit", "SystemExit", "_exit", "Abort"}
"""typer.Exit(n), sys.exit(n), raise SystemExit(n), os._exit(n), ctx.exit(n), typer.Abort() (exit 1)."""

ALLOWED: dict[tuple[str, str], str] = {
    # the error tree's own rendering path: the code comes from report_error / exit_code_of
    ("cli.py", "_Group.main"): "re-raises click's and rich's exits, a closed pipe as 141",
    ("cli.py", "_Group.invoke"): "report_error(e) renders the one `error:` line and gives the tree's exit code",
    ("cli.py", "main"): "the console script passes on the app's code",
    ("job.py", "<module>"): "the Ray job's main() returns report_error's code (or 0/1 from the run counts)",
    ("sim_server.py", "register.sim_server"): "the simulated server's own exit status, passed through",
    # verdicts: the command ran and reports what it found line by line; exit 1 (or doctor's 3) says so
    ("doctor.py", "doctor_command"): "exit_code(results): 0 / 1 warnings / 3 a run cannot work here, every check "
                                     "printed as a row",
    ("run.py", "run"): "exit 1: some runs failed (each is in the dataset and the summary)",
    ("results.py", "regress_cmd"): "exit 1: a regression was found (each printed as a REGRESSION line)",
    ("submit.py", "submit"): "exit 1: the followed job did not succeed (its status printed)",
}
"""(file, enclosing function) -> why a non-zero exit there is not a refusal. A verdict's exit is limited to 1."""

VERDICT_CODES = {("run.py", "run"): {1}, ("results.py", "regress_cmd"): {1}, ("submit.py", "submit"): {1}}


def _code(call: ast.Call) -> Optional[ast.expr]:
    """The exit status expression of an exit call (None: no argument, exit 0; Abort: the constant 1)."""
    name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
    if name == "Abort":
        return ast.Constant(1)
    if call.args:
        return call.args[0]
    for kw in call.keywords:
        if kw.arg in ("code", "status"):
            return kw.value
    return None


def _exits(tree: ast.AST) -> Iterator[tuple[str, int, Optional[ast.expr]]]:
    """(enclosing function's dotted name, line, status expression) of every exit call in a module."""

    def walk(node: ast.AST, scope: list[str]) -> Iterator[tuple[str, int, Optional[ast.expr]]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                yield from walk(child, scope + [child.name])
                continue
            if isinstance(child, ast.Call):
                f = child.func
                name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
                if name in EXIT_CALLS:
                    yield ".".join(scope) or "<module>", child.lineno, _code(child)
            yield from walk(child, scope)

    yield from walk(tree, [])


def ad_hoc_refusals(path: Path, source: Optional[str] = None) -> list[str]:
    """Each non-zero exit in `path` that is neither the error tree's rendering nor an allowed verdict."""
    tree = ast.parse(source if source is not None else path.read_text())
    found = []
    for scope, line, code in _exits(tree):
        if code is None or (isinstance(code, ast.Constant) and code.value == 0):
            continue
        key = (path.name, scope)
        if key in ALLOWED:
            codes = VERDICT_CODES.get(key)
            if codes is None or (isinstance(code, ast.Constant) and code.value in codes):
                continue
        found.append(f"{path.name}:{line} in {scope}: exit {ast.unparse(code)} outside the error tree")
    return found


def test_no_command_exits_non_zero_outside_the_error_tree() -> None:
    """Before: result_tables.py table_or_exit, results.py print_compare_by_position / print_compare / list_cmd,
    recommend_output.py and run.py (fairness, no run recorded) each printed a line and raised typer.Exit(2)."""
    found = [f for path in SCANNED for f in ad_hoc_refusals(path)]
    assert found == [], "\n".join(found)


def test_every_allowed_exit_still_exists() -> None:
    """An allowance whose exit is gone is stale (and would hide a new one there)."""
    seen = {(p.name, scope) for p in SCANNED for scope, _, code in _exits(ast.parse(p.read_text()))
            if code is not None}
    assert set(ALLOWED) - seen == set()


@pytest.mark.parametrize("source, caught", [
    ("import typer\ndef f():\n    print('no runs')\n    raise typer.Exit(2)\n", True),
    ("import sys\ndef f():\n    sys.exit(3)\n", True),
    ("def f(code):\n    raise SystemExit(code)\n", True),
    ("import typer\ndef f():\n    raise typer.Exit(code=4)\n", True),
    ("import typer\ndef f():\n    raise typer.Abort()\n", True),
    ("def f(ctx):\n    ctx.exit(2)\n", True),
    ("import typer\ndef f():\n    raise typer.Exit()\n", False),
    ("import typer\ndef f():\n    raise typer.Exit(0)\n", False),
    ("from cluster.errors import UserError\ndef f():\n    raise UserError('x', field='--y')\n", False),
])
def test_the_scan_catches_each_spelling(source: str, caught: bool) -> None:
    assert bool(ad_hoc_refusals(Path("results.py"), source)) is caught


def test_a_verdict_exit_other_than_one_is_caught() -> None:
    source = "import typer\ndef regress_cmd():\n    raise typer.Exit(2)\n"
    assert ad_hoc_refusals(Path("results.py"), source)


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    from tests.unit.analysis.test_comparison import build_dataset

    full = str(tmp_path_factory.mktemp("full"))
    build_dataset(full, "one", steps=[1], repeats=1, conc=(1,), n_requests=4, out_tokens=4)
    empty = tmp_path_factory.mktemp("empty")
    (empty / "bare" / "runs").mkdir(parents=True)  # an experiment whose runs all failed before writing
    return {"full": full, "empty": str(empty)}


@pytest.mark.parametrize("argv, root, says", [
    (["list"], "nothing", "no experiments under"),
    (["compare", "bare"], "empty", "no runs recorded for experiment 'bare'"),
    (["compare", "bare", "--ci", "--n-boot", "100"], "empty", "no runs recorded for experiment 'bare'"),
    (["compare", "bare", "--by", "category", "--n-boot", "100"], "empty", "no ok runs recorded"),
    (["recommend", "bare"], "empty", "no runs recorded for experiment 'bare'"),
    (["capacity", "one"], "full", "has no capacity search runs"),
])
def test_results_refusals_are_one_error_line(roots: dict[str, str], tmp_path: Path, argv: list[str], root: str,
                                             says: str) -> None:
    """Before: a bare line ("no experiments under 'x'") and exit 2, no `error:`, nothing naming the option."""
    where = roots.get(root, str(tmp_path))
    res = CliRunner().invoke(app, ["results", *argv, "--root", where], env={"COLUMNS": "200"})
    assert res.exit_code == 2, res.output
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], res.stderr
    assert where in lines[0]


@pytest.mark.parametrize("argv", [["compare", "one", "--ci"], ["compare", "one", "--by", "category"], ["capacity", "one"],
                                  ["report", "one"], ["recommend", "one"], ["regress", "one", "one"]])
def test_a_negative_seed_is_one_error_line_naming_the_option(roots: dict[str, str], argv: list[str]) -> None:
    """Before: numpy's "expected non-negative integer" traceback and exit 70 (a bug in sglbench)."""
    res = CliRunner().invoke(app, ["results", *argv, "--seed", "-1", "--root", roots["full"]])
    assert res.exit_code == 2, res.output
    assert res.stderr.splitlines() == ["error: --seed -1: expected a non-negative integer (the bootstrap's random "
                                       "generator takes seeds from 0 up)"]


SPEC = """version: 1
name: loop
output: {output}
model: {{path: sim://tiny, engine: sim, tp: 1}}
variants:
  - name: baseline
workloads:
  - {{name: w, input_tokens: 16, output_tokens: 16, num_requests: 4}}
load: {{concurrency: [1]}}
"""


@pytest.fixture
def loop(tmp_path: Path) -> Path:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    return tmp_path / "a"


@pytest.mark.parametrize("under", [False, True], ids=["the-loop", "a-path-under-it"])
def test_an_output_root_in_a_symlink_loop_is_one_error_line_naming_it(loop: Path, under: bool,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: pathlib's "Symlink loop from ..." RuntimeError traceback, exit 70 (a relative root), or accepted as
    creatable (an absolute one: exists() is False inside a loop, the walk up found a writable parent)."""
    monkeypatch.chdir(loop.parent)
    output = "a/results" if under else "a"
    spec = loop.parent / "spec.yaml"
    spec.write_text(SPEC.format(output=output))
    for argv in (["validate", str(spec)], ["run", str(spec), "--output", str(loop.parent / output)]):
        res = CliRunner().invoke(app, argv)
        assert res.exit_code == 2, (argv, res.output)
        errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
        said = "lies under " + str(loop) + ", a symlink loop" if under else "is a symlink loop"
        assert len(errors) == 1 and said in errors[0] and "output" in errors[0], res.stderr


def test_doctor_fails_the_disk_check_of_an_output_root_in_a_symlink_loop(loop: Path) -> None:
    """Before: a traceback for a relative root; an absolute one measured its parent's free space and said ok."""
    from cluster.node.collect import disk_fact

    fact = disk_fact(str(loop / "results"))
    assert fact.reason == f"{loop} is a symlink loop, so the directory can never be reached"


@pytest.mark.parametrize("port", ["99999", "0", "-1"])
def test_plan_refuses_a_port_no_server_can_listen_on(tmp_path: Path, port: str) -> None:
    """Before: `plan --port 99999` printed `--port 99999` in each variant's command line, exit 0."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(output=str(tmp_path / "results")))
    res = CliRunner().invoke(app, ["plan", str(spec), "--port", port])
    assert res.exit_code == 2 and res.stdout == "", res.output
    assert res.stderr.splitlines() == [f"error: --port {port}: expected a TCP port from 1 to 65535"]


def test_plan_prints_a_valid_port_as_given(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(output=str(tmp_path / "results")))
    res = CliRunner().invoke(app, ["plan", str(spec), "--port", "65535"])
    assert res.exit_code == 0 and "--port 65535" in res.stdout, res.output


def test_two_runs_claiming_one_repeat_are_refused_naming_both_keys() -> None:
    """Before: compare averaged them as two repeats of one point (the corpus case two_runs_claim_one_repeat)."""
    import pandas as pd

    from cluster.analysis.results import one_run_per_repeat
    from cluster.dataset.root import StoreError

    row = {"variant": "base", "workload": "w", "load_kind": "concurrency", "load_value": 4.0, "repeat": 0}
    runs = pd.DataFrame([{**row, "run_key": "a1", "status": "ok"}, {**row, "repeat": 1, "run_key": "b2", "status": "ok"},
                         {**row, "load_value": 8.0, "run_key": "c3", "status": "ok"}])
    one_run_per_repeat(runs, "root/exp/runs")  # distinct repeats and points: nothing to refuse
    runs.loc[len(runs)] = {**row, "run_key": "d4", "status": "failed"}
    with pytest.raises(StoreError) as e:
        one_run_per_repeat(runs, "root/exp/runs")
    assert str(e.value).startswith("root/exp/runs: runs a1 (ok) and d4 (failed) claim the same repeat 0 of variant "
                                   "'base', workload 'w', concurrency 4: their run keys differ")
    assert e.value.field == "repeat"


def test_sim_server_refuses_a_port_out_of_range(capsys: pytest.CaptureFixture[str]) -> None:
    """Before: `sglbench sim-server --port 99999` ended in bind()'s OverflowError traceback (exit 70)."""
    from cluster.sim.server import main

    assert main(["--model-path", "sim://m", "--port", "99999"]) == 1
    assert capsys.readouterr().err.splitlines()[-1] == "error: --port 99999: expected a TCP port from 1 to 65535"
