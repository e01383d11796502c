"""`sglbench smoke URL`: check a live SGLang server against every assumption sglbench makes; exit 1 on any miss."""

from __future__ import annotations

import typer

from cluster.errors import UserError


def register(app: typer.Typer) -> None:
    @app.command("smoke")
    def smoke(
        url: str = typer.Argument(..., help="Base URL of an idle SGLang server, e.g. http://127.0.0.1:30000"),
        timeout: float = typer.Option(30.0, "--timeout", help="Seconds per HTTP call"),
    ) -> None:
        """Endpoints, /server_info keys, stream framing, meta_info, spec_verify_ct, /flush_cache: expected vs found."""
        from rich.console import Console

        from cluster.commands.terminal import print_table

        from cluster.engines.smoke import run_smoke

        if not url.startswith(("http://", "https://")):
            raise UserError(f"smoke: URL: expected http://host:port, got {url!r}", field="URL",
                            expected="http://host:port")
        checks = run_smoke(url, timeout)
        console = Console()
        # cells fold instead of being cut at 80 columns (server_info.specula… was unreadable in a pipe)
        print_table(console, ("check", "result", "expected", "found"),
                    [(c.name, "[green]ok[/green]" if c.ok else "[red]FAIL[/red]", c.expected, c.found)
                     for c in checks], title=f"sglbench smoke {url}")
        from cluster.engines.interconnect import collect_interconnect

        for line in collect_interconnect().width_warnings():  # the GPUs of this machine, where it has any
            console.print(f"warning: interconnect: {line}", style="yellow", markup=False, soft_wrap=True)
        failed = [c for c in checks if not c.ok]
        console.print(f"{len(checks) - len(failed)} passed, {len(failed)} failed")
        if failed:
            raise typer.Exit(1)
