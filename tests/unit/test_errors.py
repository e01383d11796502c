"""One exception tree: every exception class in `cluster` derives from SglbenchError; the CLI maps it to exit codes."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import cluster
from cluster.errors import (EXIT_BUG, EXIT_ENGINE, EXIT_ENVIRONMENT, EXIT_USER_ERROR, EngineFault, EnvironmentFault,
                            SglbenchError, UserError)

REPO = Path(__file__).resolve().parents[2]
OPTIONAL_DEPS = {"torch", "triton"}
"""Modules that need these (the Triton MoE kernel) are checked by an AST walk where they are not installed."""


def _package_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(cluster.__path__, "cluster."))


def _exception_classes() -> dict[str, type[BaseException]]:
    out: dict[str, type[BaseException]] = {}
    for name in _package_modules():
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name not in OPTIONAL_DEPS:
                raise
            path = REPO / (name.replace(".", "/") + ".py")
            classes = [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ClassDef)]
            assert not [c.name for c in classes if c.bases], f"{name}: classes with bases, not importable here"
            continue
        for attr, obj in vars(mod).items():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == name:
                out[f"{name}.{attr}"] = obj
    return out


def test_every_exception_class_in_the_package_derives_from_sglbench_error() -> None:
    classes = _exception_classes()
    assert len(classes) >= 17  # the 17 classes the issue counted, at least, are found by this walk
    strays = sorted(n for n, c in classes.items() if not issubclass(c, SglbenchError))
    assert strays == []


def test_the_tree_docstring_names_only_classes_that_exist() -> None:
    import cluster.errors as errors

    names = {c.__name__ for c in _exception_classes().values()}
    tree = errors.__doc__.split("Anything else")[0]
    documented = {w for w in tree.replace("├──", " ").replace("└──", " ").replace("│", " ").split()
                  if w[:1].isupper() and w.isidentifier() and (w.endswith(("Error", "Fault", "NotFound", "Problem")))}
    assert documented - names == set()
    assert {"UserError", "EnvironmentFault", "EngineFault", "SpecError", "ServerStartError"} <= documented


@pytest.mark.parametrize("cls, code", [(UserError, EXIT_USER_ERROR), (EnvironmentFault, EXIT_ENVIRONMENT),
                                       (EngineFault, EXIT_ENGINE)])
def test_each_branch_has_its_exit_code(cls: type[SglbenchError], code: int) -> None:
    assert cls.exit_code == code


def test_user_errors_carry_file_field_expected() -> None:
    from cluster.probe.safetensors_header import CheckpointError
    from cluster.config.fields import SpecError

    e = SpecError("exp.yaml", 3, "model.tp", "expected an integer")
    assert (e.file, e.line, e.field, e.expected) == ("exp.yaml", 3, "model.tp", "expected an integer")
    assert str(e) == "exp.yaml:3: model.tp: expected an integer"
    c = CheckpointError("/m/config.json", "not JSON")
    assert c.file == "/m/config.json" and str(c) == "/m/config.json: not JSON"


def test_server_start_error_keeps_its_signature_and_the_cli_code() -> None:
    from cluster.server.process import ServerStartError

    e = ServerStartError("server exited with code 1 before becoming healthy", "tail...", 1)
    assert isinstance(e, EngineFault) and e.log_tail == "tail..." and e.server_exit_code == 1
    assert type(e).exit_code == EXIT_ENGINE


def test_cli_exits_with_the_user_error_code_and_one_line(tmp_path: Path) -> None:
    from cluster.cli import app

    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nname: x\nmodel: {path: /m, tp: zero}\n")
    res = CliRunner().invoke(app, ["validate", str(bad)])
    assert res.exit_code == EXIT_USER_ERROR, res.output
    assert f"error: {bad}:3: model.tp" in res.output
    assert "Traceback" not in res.output and "bug" not in res.output


def test_cli_maps_an_environment_fault(monkeypatch: pytest.MonkeyPatch) -> None:
    import cluster.commands.run as run_cmd
    from cluster.cli import app

    def no_room(path: object) -> None:
        raise EnvironmentFault("no node has 8 free GPUs")

    monkeypatch.setattr(run_cmd, "load_spec", no_room)
    res = CliRunner().invoke(app, ["validate", "x.yaml"])
    assert res.exit_code == EXIT_ENVIRONMENT and "error: no node has 8 free GPUs" in res.output


def test_an_internal_bug_prints_its_traceback_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    import cluster.commands.run as run_cmd
    from cluster.cli import app

    def broken(path: object) -> None:
        raise KeyError("num_hidden_layers")

    monkeypatch.setattr(run_cmd, "load_spec", broken)
    res = CliRunner().invoke(app, ["validate", "x.yaml"])
    assert res.exit_code == EXIT_BUG == 70
    assert "Traceback (most recent call last)" in res.output and "KeyError: 'num_hidden_layers'" in res.output
    assert "bug in sglbench" in res.output


def test_a_missing_command_module_is_an_import_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import cluster.cli as cli

    monkeypatch.setattr(cli, "COMMAND_MODULES", ("run", "tune"))
    with pytest.raises(ModuleNotFoundError, match="cluster.commands.tune"):
        cli._register()


def test_driver_main_maps_errors_like_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from cluster.commands.job import main

    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nname: x\nmodel: {path: /m, tp: zero}\n")
    assert main([str(bad)]) == EXIT_USER_ERROR
    assert f"error: {bad}:3: model.tp" in capsys.readouterr().err


def test_guide_documents_the_exit_codes() -> None:
    readme = (REPO / "docs" / "guide.md").read_text()
    section = readme.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    for code in (0, 1, EXIT_USER_ERROR, EXIT_ENVIRONMENT, EXIT_ENGINE, EXIT_BUG):
        assert f"| {code} |" in section


def test_the_help_epilog_names_every_exit_code() -> None:
    from cluster.cli import app
    from cluster.commands.standard_output import EXIT_PIPE_CLOSED
    from cluster.errors import EXIT_CODES

    out = " ".join(CliRunner().invoke(app, ["--help"], env={"COLUMNS": "1000"}).output.split())
    for code in [*EXIT_CODES.values(), EXIT_PIPE_CLOSED]:
        assert f" {code} " in out.split("Exit codes:", 1)[1], code
