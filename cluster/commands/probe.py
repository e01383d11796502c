"""`sglbench probe MODEL_DIR [--json]`: is MTP in the checkpoint, how is it quantized, what does a decode step read."""

from __future__ import annotations

import json
import sys
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from cluster.probe.checkpoint import ProbeReport, probe_checkpoint
from cluster.errors import one_line


def _num(n: float) -> str:
    for unit, div in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.2f}{unit}"
    return f"{n:g}"


def _bytes(n: float) -> str:
    for unit, div in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.2f} {unit}"
    return f"{n:g} B"


_VERDICT_STYLE = {
    "present": "bold green",
    "not_declared_but_present": "bold green",
    "declared_but_absent": "bold red",
    "absent": "yellow",
}


def _text(value: object) -> str:
    """A value from the checkpoint or its path as literal text: Rich markup escaped (a directory named `[/x]` is
    not a closing tag), non-printable characters and undecodable path bytes as escapes (one line; stdout is strict
    UTF-8)."""
    return escape(one_line(str(value)))


def render(report: ProbeReport, console: Console) -> None:
    c, m, p, q = report.config, report.mtp, report.params, report.quant
    arch = _text(", ".join(c.architectures) or c.model_type or "?")
    console.print(f"[bold]{_text(report.model_dir)}[/bold]")
    console.print(
        f"  model     {arch} ({c.layout}); hidden {c.hidden_size}, {c.num_hidden_layers} layers"
        + (f" {_text(dict(c.layer_types))}" if c.layer_types else "")
        + (f"; experts {c.num_experts} (top-{c.num_experts_per_tok})" if c.num_experts else "")
        + f"; vocab {c.vocab_size}"
    )
    console.print(
        f"  weights   {report.tensor_count} tensors in {len(report.shards)} shard(s), {_bytes(report.file_bytes)}; "
        + _text(", ".join(f"{k} {v}" for k, v in report.tensors_by_dtype.items()))
    )
    style = _VERDICT_STYLE.get(m.verdict, "bold")
    declared = (f"declared in {_text(m.declared_in)} = {m.declared_layers}" if m.declared
                else "not declared in config.json")
    index = "" if m.index_tensors is None else f", {m.index_tensors} in index"
    console.print(f"  MTP       [{style}]{m.verdict}[/{style}]: {declared}; {m.header_tensors} {m.kind or 'MTP/NextN'} "
                  f"tensors in headers{index}")
    if m.weights_present:
        console.print(f"            {_text(m.fc_tensor or 'fc')} {m.fc_dtype}; weights {m.weight_format}; "
                      f"layers {_text(m.layers_found)}; excluded from quantization: {m.excluded_in_quant_config}")
    if q.source:
        console.print(f"  quant     {_text(q.quant_algo)} ({q.source}), group {q.group_size}, "
                      f"KV {_text(q.kv_cache_quant_algo)}; "
                      f"{sum(report.quantized_families.values())} quantized / "
                      f"{sum(report.unquantized_families.values())} unquantized linear modules")
    else:
        console.print("  quant     none declared")
    console.print(f"  params    total {_num(p.total)} (target {_num(p.target)}, MTP {_num(p.mtp)}, vision "
                  f"{_num(p.vision)}); active/token {_num(p.active_per_token)}")
    console.print(f"  decode    {_bytes(p.decode_bytes_per_token)} of weights per batch-1 step "
                  f"(routed experts {_bytes(p.decode_routed_expert_bytes_per_token)})")
    console.print(f"  spec      runs alone: {', '.join(report.speculative_supported)}; needs a draft model: "
                  f"{', '.join(report.speculative_needs_draft_model) or '-'}")
    for w in report.warnings:
        console.print(f"  [yellow]warning[/yellow]  {_text(w.message)}")


def probe_command(
    model_dir: str = typer.Argument(..., help="Checkpoint directory (config.json + safetensors)."),
    as_json: bool = typer.Option(False, "--json", help="Print the stable JSON report (schema 1) instead."),
) -> None:
    """Probe a checkpoint without loading tensor data: MTP presence, quantization, params, decode bytes."""
    report = probe_checkpoint(model_dir)  # a CheckpointError reaches the CLI's handler: one line, exit code 2
    if as_json:
        out: dict[str, Any] = report.to_json()
        sys.stdout.write(json.dumps(out, indent=2, sort_keys=False) + "\n")
    else:
        render(report, Console(highlight=False, soft_wrap=True))


def register(app: typer.Typer) -> None:
    app.command("probe")(probe_command)
