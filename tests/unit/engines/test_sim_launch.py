"""`sglbench sim-server --help`: names the command as the user typed it, helps on every modelled flag and lists
every simulator knob with its description."""

from __future__ import annotations

from typer.testing import CliRunner

from cluster.cli import app
from cluster.engines.sim_launch import build_parser
from cluster.config.sim_knobs import Knobs


def test_sim_server_help_names_the_command_flags_and_knobs() -> None:
    res = CliRunner().invoke(app, ["sim-server", "--help"])
    assert res.exit_code == 0, res.output
    assert res.output.startswith("usage: sglbench sim-server")
    assert "SGLBENCH_SIM" in res.output and "never GPU numbers" in res.output
    for knob in Knobs.model_fields:
        assert f"  {knob}: " in res.output
    assert "Wall seconds per model second" in res.output  # a knob's own docstring


def test_every_modelled_flag_has_help() -> None:
    undocumented = [a.option_strings for a in build_parser()._actions if not a.help]
    assert not undocumented
