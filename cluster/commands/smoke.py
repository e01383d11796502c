"""`sglbench smoke URL`: check a live SGLang server against every assumption sglbench makes; against SGLang's gateway,
the gateway's own contract and then every worker it lists (cluster/engines/gateway_smoke.py), one table each.

Exit 0 when every check passed, 1 when an assumption missed (one `error:` line names the answer invariants
broken), 2 for a URL that cannot be used (checked before any connection, a /v1 suffix included), 3 when the host's
name does not resolve, 4 when the server is at fault (refused, timed out, a malformed answer);
cluster/engines/smoke.py says which failure is which."""

from __future__ import annotations

import math

import typer

from cluster.errors import UserError

MIN_TIMEOUT_S = 0.001
MAX_TIMEOUT_S = 86400.0


def register(app: typer.Typer) -> None:
    @app.command("smoke")
    def smoke(
        url: str = typer.Argument(..., help="Base URL of an idle SGLang server, or of SGLang's gateway (smg) in front "
                                  "of its workers, e.g. http://127.0.0.1:30000"),
        timeout: float = typer.Option(30.0, "--timeout", help=f"Seconds each HTTP call may take in all (a deadline, "
                                      f"not per read), {MIN_TIMEOUT_S:g} to {MAX_TIMEOUT_S:g}"),
        rank_url: list[str] = typer.Option([], "--rank-url", help="A server across nodes: the URL (--port) of a rank "
                                           "≥ 1, whose health server must answer; repeat per rank (URL is rank 0)"),
    ) -> None:
        """Endpoints, /server_info keys, stream framing, meta_info, the answer invariants, /flush_cache: expected vs
        found. Against SGLang's gateway: its own contract (/readiness, /liveness, /workers, /v1/models, the routed
        worker header), then every worker it lists, one table each."""
        from rich.console import Console

        from cluster.commands.terminal import print_table

        from cluster.engines.gateway_smoke import deployment_failure, smoke_deployment

        # the range is checked here, not by typer's min/max: NaN compares false both ways, and typer then named a
        # bound it was not past ("should be less than or equal to 86400" for nan)
        if not (math.isfinite(timeout) and MIN_TIMEOUT_S <= timeout <= MAX_TIMEOUT_S):
            expected = f"a finite number of seconds from {MIN_TIMEOUT_S:g} to {MAX_TIMEOUT_S:g}"
            raise UserError(f"smoke: --timeout: expected {expected}, got {timeout}", field="--timeout",
                            expected=expected)
        targets = smoke_deployment(url, timeout, rank_url)
        console = Console()
        for t in targets:
            title = f"sglbench smoke {url}" if t.target == "server" else f"sglbench smoke {t.target} {t.url}"
            # cells fold instead of being cut at 80 columns (server_info.specula… was unreadable in a pipe)
            print_table(console, ("check", "result", "expected", "found"),
                        [(c.name, "[green]ok[/green]" if c.ok else "[red]FAIL[/red]", c.expected, c.found)
                         for c in t.checks], title=title)
        from cluster.engines.interconnect import collect_interconnect

        for line in collect_interconnect().width_warnings():  # the GPUs of this machine, where it has any
            console.print(f"warning: interconnect: {line}", style="yellow", markup=False, soft_wrap=True)
        checks = [c for t in targets for c in t.checks]
        failed = [c for c in checks if not c.ok]
        console.print(f"{len(checks) - len(failed)} passed, {len(failed)} failed" +
                      (f" over {len(targets)} targets" if len(targets) > 1 else ""))
        error = deployment_failure(targets)
        if error is not None:
            raise error
