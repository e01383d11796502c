"""`sglbench sim-server <SGLang argv>`: run the simulated SGLang 0.5.23 server in the foreground."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command(
        "sim-server",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
        add_help_option=False,
    )
    def sim_server(ctx: typer.Context) -> None:
        """Serve the simulated engine; every argument is SGLang's own server argv (knobs: env SGLBENCH_SIM).
        `sglbench sim-server --help` lists the flags it models and every knob."""
        from cluster.sim.server import main

        raise typer.Exit(main(list(ctx.args), prog="sglbench sim-server"))
