"""The command line's boundary: any argv a user can type, to any command that neither starts servers, Ray nor network
calls, ends as a usage error, one of the error tree's exits or success; never a traceback reported as a bug (70).

Tokens are drawn from the command's own option names (and their --no- forms), values of each kind (numbers, odd
text, paths to a results root, an experiment, a directory, /dev/null, a missing file) and free text; the working
directory is a temporary one, so whatever a command writes lands there. Commands left out, and why: run, doctor
(Ray), submit, smoke (network), sim-server (starts a server), init (probes and writes a starter file; its own
target is test_fuzz_init_starter.py), results report (a few seconds of plotting per example)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cluster.cli import app
from tests.fuzz.fuzzing import FUZZ, budget

REPO = Path(__file__).resolve().parents[2]
LEFT_OUT = {"run", "doctor", "submit", "smoke", "sim-server", "init", "results report"}


def _leaves(cmd: Any, path: str = "") -> dict[str, Any]:
    subs = getattr(cmd, "commands", None)
    if not subs:
        return {path: cmd}
    out: dict[str, Any] = {}
    for name, sub in subs.items():
        out.update(_leaves(sub, f"{path} {name}".strip()))
    return out


COMMANDS = {p: c for p, c in _leaves(typer.main.get_command(app)).items() if p not in LEFT_OUT}


def _options(cmd: Any) -> list[str]:
    names = [o for p in cmd.params for o in (*p.opts, *p.secondary_opts) if o.startswith("-")]
    return names + ["--help"]


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    from tests.unit.analysis.test_comparison import build_dataset

    root = tmp_path_factory.mktemp("fuzzroot")
    build_dataset(str(root), "exp", steps=[1], conc=(1, 4), repeats=2, n_requests=8, out_tokens=8)
    bad = root / "bad.yaml"
    bad.write_text("version: 1\nname: [unclosed\n")
    return {"root": str(root), "experiment": str(REPO / "experiments" / "demo-sim.yaml"), "bad": str(bad),
            "dir": str(root / "exp"), "devnull": "/dev/null", "missing": str(root / "missing.yaml"),
            "name": "exp"}


def _token(cmd: Any, places: dict[str, str]) -> st.SearchStrategy[str]:
    argv_text = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=["Cs"]), max_size=12)
    return st.one_of(
        st.sampled_from(_options(cmd)),
        st.sampled_from(sorted(places.values())),
        st.sampled_from(["0", "-1", "1e309", "nan", "5%", "101%", "2", "csv", "json", "category", "turn", ""]),
        st.integers(-10**20, 10**20).map(str),
        argv_text,
    )


def _shaped(cmd: Any, places: dict[str, str]) -> st.SearchStrategy[list[str]]:
    """Argv of the command's own shape: a value for each positional argument, then options each with a value, so
    examples get past the parser into the command itself."""
    n_args = sum(1 for p in cmd.params if p.param_type_name == "argument")
    value = _token(cmd, places)
    positional = st.lists(st.sampled_from(sorted(places.values())) | value, min_size=n_args, max_size=n_args)
    options = st.lists(st.tuples(st.sampled_from(_options(cmd)[:-1] or ["--help"]), value), max_size=3)
    return st.builds(lambda a, o: a + [t for pair in o for t in pair], positional, options)


@settings(FUZZ, max_examples=budget(120))
@given(data=st.data())
def test_any_argv_ends_without_a_bug(data: st.DataObject, places: dict[str, str], tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = data.draw(st.sampled_from(sorted(COMMANDS)), label="command")
    cmd = COMMANDS[path]
    args = data.draw(_shaped(cmd, places) | st.lists(_token(cmd, places), max_size=6), label="args")
    res = CliRunner().invoke(app, [*path.split(), *args])
    assert "this is a bug in sglbench" not in res.output, res.output
    assert res.exit_code in (0, 1, 2, 3, 4), (res.exit_code, res.output, res.exception)
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
