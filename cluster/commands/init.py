"""`sglbench init MODEL_DIR [-o FILE]`: probe a checkpoint and write a commented starter experiment that plans clean.

The starter pins every flag the fairness rules (cluster/plan/fairness.py, model_rules.py) ask for, at the value the
probe and the SGLang release imply, and is checked before it is written: parsed as a spec, then run through those
rules with the probe's facts; anything left is printed and written into the file as a TODO, never hidden.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import typer

from cluster.errors import UserError, one_line
from cluster.config.fields import SpecError
from cluster.config.locations import check_word
from cluster.plan.model_rules import ModelFacts
from cluster.probe.checkpoint import ProbeReport

BUNDLED_DATASET = Path(__file__).resolve().parents[2] / "datasets" / "categories-sharegpt.json"
"""The ShareGPT prompt set shipped in the repository (datasets/README.md); absent in a wheel-only install."""
SCHEMA = Path(__file__).resolve().parents[2] / "schema" / "experiment.schema.json"
"""The committed JSON schema (`sglbench schema`), named for editors that validate YAML while it is typed."""
MAX_RUNNING_REQUESTS = 64
CONCURRENCY = (1, 4, 16, 64)
SEED = 20261204


@dataclass(frozen=True)
class Interpreter:
    """The SGLang interpreter found for engines.sglang.python (path None: none found, `note` says where we looked)."""

    path: Optional[str]
    version: Optional[str]
    note: str
    warning: Optional[str] = None
    """Said when --python names what cannot be SGLang's interpreter here (printed, and a TODO in the starter)."""


def find_interpreter(explicit: Optional[str] = None) -> Interpreter:
    """--python, else $SGLBENCH_SGLANG_VENV/bin/python, else `python`/`python3` on PATH: the first in which `import
    sglang` finds the package and its metadata gives the version (asked in a subprocess; sglang is never imported,
    here or there)."""
    from cluster.node.collect import interpreter_fact

    if explicit:
        if not os.path.lexists(explicit):
            return Interpreter(explicit, None, "given with --python", f"--python {explicit} does not exist on this "
                               "machine: written as given; if it is the GPU node's path, `sglbench doctor` checks it "
                               "there, else give the interpreter of SGLang's venv")
        fact = interpreter_fact(explicit)
        why: Optional[str] = None
        if not fact.runs:
            why = fact.reason or "it does not run"
        elif not (fact.sglang_version and fact.sglang_importable):
            why = "it runs but has no importable sglang"
        return Interpreter(explicit, fact.sglang_version, "given with --python",
                           f"--python {explicit}: {why}: written as given" if why else None)
    venv = os.environ.get("SGLBENCH_SGLANG_VENV")
    candidates = [(str(Path(venv) / "bin" / "python"), "$SGLBENCH_SGLANG_VENV")] if venv else []
    candidates += [(p, f"`{name}` on PATH") for name in ("python", "python3") if (p := shutil.which(name))]
    for path, where in candidates:
        fact = interpreter_fact(path)
        if fact.sglang_version and fact.sglang_importable:
            return Interpreter(os.path.abspath(path), fact.sglang_version,
                               f"{where} has sglang {fact.sglang_version}")
    looked = ", ".join(p for p, _ in candidates) or "no interpreter on PATH"
    return Interpreter(None, None, f"no interpreter with sglang found (looked at {looked})")


def _slug(model_dir: Path) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", model_dir.name).strip("-._")[:64]
    return name if name and name[0].isalnum() else "experiment"


def _q(s: str) -> str:
    """A YAML double-quoted scalar in printable ASCII: every other character escaped the way YAML reads it back
    (\\uXXXX, or \\UXXXXXXXX past the BMP: JSON's surrogate pairs would read back as two lone surrogates)."""
    out = []
    for c in s:
        if c in '"\\':
            out.append("\\" + c)
        elif " " <= c <= "~":
            out.append(c)
        else:
            out.append(f"\\u{ord(c):04x}" if ord(c) < 0x10000 else f"\\U{ord(c):08x}")
    return '"' + "".join(out) + '"'


def _backends(facts: ModelFacts, gpu_sm: Optional[int], speculative: bool) -> list[tuple[str, str, str]]:
    """(flag, value, why) for the back ends the model rules need pinned: what SGLang 0.5.23's `auto` resolves to on
    this GPU (sglang-0.5.23 reference: fp4_utils.py, arg_groups/overrides.py), made explicit."""
    where = f"SM{gpu_sm}" if gpu_sm else "the GPU (not known here: SM120 and SM100+ assumed)"
    out: list[tuple[str, str, str]] = []
    if facts.moe and speculative:
        if facts.routed_nvfp4:
            moe = "marlin" if gpu_sm is not None and gpu_sm < 100 else "flashinfer_cutlass"
        else:
            moe = "triton"
        out.append(("moe-runner-backend", moe, f"what auto picks for this MoE on {where}; pinned because the draft "
                    "inherits it and auto has raised NotImplementedError on SM120 (sglang PR #39807)"))
    if facts.dense_nvfp4_families:
        fp4 = "marlin" if gpu_sm is not None and gpu_sm < 100 else \
            "flashinfer_cutedsl" if gpu_sm is not None and 100 <= gpu_sm < 110 else "flashinfer_cutlass"
        out.append(("fp4-gemm-backend", fp4, f"0.5.23's auto on {where}; auto has flipped across releases "
                    "(sglang PRs #20047, #38170)"))
    return out


def _launch_notes(facts: ModelFacts, gpu_sm: Optional[int], version: str, tp: int) -> dict[str, tuple[str, str]]:
    """flag → (value, why) for each per-release launch note (cluster/plan/launch_notes.py) this release needs where
    the node may be SM120 (not known here counts as may be), as its rules decide that it applies."""
    from cluster.engines.sglang import parse_version
    from cluster.plan.launch_notes import LAUNCH_NOTES

    if gpu_sm is not None and gpu_sm != 120:
        return {}
    out: dict[str, tuple[str, str]] = {}
    for note in LAUNCH_NOTES:
        applies = {"sm120": True, "sm120_nvfp4_moe": facts.nvfp4 is not False and facts.moe is not False,
                   "sm120_multi_gpu": tp > 1}[note.condition]
        if parse_version(version) < note.fixed_in and applies:
            out[note.flag] = (note.value or "true", f"SGLang {version} on SM120 needs it (docs/launch-notes.md)")
    return out


def render_starter(report: ProbeReport, python: Interpreter, version: str, gpu_sm: Optional[int] = None,
                   dataset: Optional[Path] = BUNDLED_DATASET, todo: tuple[str, ...] = ()) -> str:
    """The starter experiment's YAML text (pure: everything it depends on is an argument)."""
    from cluster.engines.sglang import mamba_strategy_flag

    facts = ModelFacts.from_report(report)
    m, kv = report.mtp, report.quant.kv_cache_quant_algo
    model_dir = Path(report.model_dir).absolute()
    refused = report.nextn_refused
    nextn = refused is None and "NEXTN" in report.speculative_supported
    arch = ", ".join(report.config.architectures) or report.config.model_type or "unknown architecture"
    lines = [f"# yaml-language-server: $schema={SCHEMA}"] if SCHEMA.is_file() else []
    lines += [
        f"# Starter experiment written by `sglbench init` for {model_dir}",
        f"# probe: {arch}; MTP {m.verdict}; quantization {report.quant.quant_algo or 'none declared'}"
        + (f", KV {kv}" if kv else ""),
        "# Next: `sglbench plan <this file>` (every server command, the fairness rules), `sglbench doctor <this file>`",
        "# on the GPU node, then `sglbench run <this file>`.",
    ]
    lines += [f"# TODO: probe: {w.message}" for w in report.warnings]
    lines += [f"# TODO: {python.warning}"] * bool(python.warning)
    lines += [f"# TODO: {t}" for t in todo]
    lines += ["version: 1", f"name: {_q(_slug(model_dir))}", "model:", f"  path: {_q(str(model_dir))}",
              "  engine: sglang",
              "  tp: 1   # GPUs per server (tensor parallel): raise it to what the model needs on your node",
              "engines:", "  sglang:"]
    if python.path:
        why = "not SGLang's interpreter here: see the TODO above" if python.warning else f"detected: {python.note}"
        lines.append(f"    python: {_q(python.path)}   # {why}; the GPU node's own path if it differs")
    else:
        lines.append(f"    # TODO python: /path/to/sglang-venv/bin/python   ({python.note}; SGLang runs from its "
                     "own environment)")
    lines.append(f"    version: {_q(version)}   # the release the flags are built for; checked against the interpreter")
    kv_value = "fp8_e4m3" if kv and "FP8" in kv.upper() else "bf16"
    kv_why = (f"the checkpoint declares kv_cache_quant_algo {kv}, so auto would be FP8: pinned to that (bf16 to "
              "compare without it)" if kv_value != "bf16" else "explicit: auto follows the checkpoint")
    notes = _launch_notes(facts, gpu_sm, version, tp=1)
    attention = "triton" if gpu_sm == 120 or "attention-backend" in notes else "flashinfer"
    lines += [
        "server:", "  args:",
        f"    max-running-requests: {MAX_RUNNING_REQUESTS}   # explicit and equal on every variant: SGLang silently "
        "caps speculative runs at 48",
        f"    kv-cache-dtype: {kv_value}   # {kv_why}",
        f"    attention-backend: {attention}   # pinned: enabling NEXTN has switched it silently (SGLang #39515); "
        "triton on SM120",
    ]
    if facts.hybrid:
        lines.append(f"    {mamba_strategy_flag(version).lstrip('-')}: extra_buffer   # hybrid model: auto resolves "
                     "per variant (1,278 vs 1,977 tok/s in sglang PR #27220)")
    lines += [f"    {flag}: {value}   # {why}" for flag, value, why in _backends(facts, gpu_sm, nextn)]
    lines += [f"    {flag}: {value}   # {why}" for flag, (value, why) in notes.items() if flag != "attention-backend"]
    lines += ["    enable-metrics: true   # the scraped running/queued counts let each run vouch for its concurrency",
              "variants:", "  - name: baseline", "    baseline: true"]
    variant = ["  - name: nextn"]
    if facts.moe:
        variant += ["    args:", "      speculative-moe-runner-backend: triton   # the MTP head is BF16: SGLang's own "
                    "pick for a BF16 NextN MoE layer"]
    variant.append(f"    speculative: {{algorithm: NEXTN, num_steps: [1, 2, 3], eagle_topk: 1}}   # the checkpoint's "
                   f"own {m.kind or 'MTP'} head, {len(m.layers_found)} layer(s): 1, 2 and 3 draft tokens")
    if nextn:
        lines += variant
    elif m.weights_present or m.declared:
        lines.append(f"# no NEXTN variants: {refused} (`sglbench probe {model_dir}` shows the layouts); once config "
                     "and weights agree, rerun `sglbench init`. The variant it would add:")
        lines += ["#" + ln for ln in variant]
    else:
        lines.append(f"# no NEXTN variants: {refused}; NEXTN needs them (`sglbench probe {model_dir}` shows the "
                     "layouts)")
    if dataset is not None and dataset.is_file():
        lines += ["workloads:", "  - name: categories   # 144 bundled prompts in six categories (datasets/README.md)",
                  "    input_tokens: dataset", "    output_tokens: 256", "    num_requests: 144",
                  f"    prompts: {{source: sharegpt, path: {_q(str(dataset))}}}",
                  "    temperature: 0.0", "    api: chat   # SGLang applies the model's own chat template"]
    else:
        lines += ["workloads:", "  - name: random-1k-256   # the bundled datasets/ are not installed here",
                  "    input_tokens: 1024", "    output_tokens: 256", "    num_requests: 128",
                  f"    prompts: {{source: random_ids, vocab_size: {report.config.vocab_size or 32000}}}"]
    lines += [
        "load:", f"  concurrency: [{', '.join(map(str, CONCURRENCY))}]   # closed-loop users; the top one equals "
        "max-running-requests",
        "repeats: 3   # three independent windows per point: enough for a confidence interval, a difference "
        "inside it is reported as noise",
        "slo: {ttft_ms: 2000, tpot_ms: 100}   # goodput counts requests within both; set them to your product's "
        "latency budget",
        f"seed: {SEED}   # the same prompts and arrival schedule for every variant",
        "output: results",
    ]
    return "\n".join(one_line(ln) for ln in lines) + "\n"


def residual_findings(text: str, report: ProbeReport, file: str, gpu_sm: Optional[int] = None) -> list[str]:
    """Parse the starter as a spec and run the fairness rules with the probe's facts: the lines left (none, when
    the starter pins what it should)."""
    from cluster.plan.fairness import check_fairness, format_findings
    from cluster.plan.runs import expand_variants
    from cluster.config.loader import parse_spec_text

    spec = parse_spec_text(text, file)
    launcher = spec.engines.get("sglang")
    return format_findings(check_fairness(
        expand_variants(spec), {spec.model.path: report.quant.kv_cache_quant_algo},
        facts={spec.model.path: ModelFacts.from_report(report)}, gpu_sm=gpu_sm,
        version=launcher.version if launcher else None))


def refuse_inside_checkpoint(path: Path, model_dir: str) -> None:
    """The starter never goes into the checkpoint directory, --force or not: there it would sit among, or replace
    (config.json), the files the probe just read and the fingerprint covers. Links are resolved on both sides."""
    where = os.path.realpath(path.parent)
    checkpoint = os.path.realpath(model_dir)
    if os.path.commonpath([where, checkpoint]) == checkpoint:
        raise UserError(f"{path} is inside the checkpoint directory {model_dir}: init never writes there (with "
                        "--force it would replace the checkpoint's own files); give -o a path outside it",
                        file=str(path), field="-o", expected="a file outside the checkpoint directory")


def write_new(path: Path, text: str, force: bool) -> None:
    """Write through a temporary file beside it: a link that refuses an existing file, or a replace with --force."""
    from cluster.dataset.atomic import WriteError

    if path.is_dir() or not path.parent.is_dir():
        what = "is a directory" if path.is_dir() else f"is in {path.parent}, which is not a directory"
        raise UserError(f"{path} {what}: -o names the experiment file to write", file=str(path), field="-o",
                        expected="a file path in an existing directory")
    if path.exists() and not force:
        raise UserError(f"{path} exists; pass --force to overwrite it", file=str(path), field="-o",
                        expected="a file that does not exist yet")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".sglbench-init-", dir=path.parent)
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp's 0600 would hide the experiment from the Ray job's other users
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        try:
            os.replace(tmp, path) if force else os.link(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except FileExistsError:
        raise UserError(f"{path} exists; pass --force to overwrite it", file=str(path), field="-o",
                        expected="a file that does not exist yet") from None
    except OSError as e:
        raise WriteError(f"{path}: cannot write the starter experiment: {e.strerror or e}") from None


def init_command(
    model_dir: str = typer.Argument(..., help="Checkpoint directory (config.json + safetensors)."),
    output: Optional[str] = typer.Option(None, "-o", "--output", help="File to write (default: <model name>.yaml "
                                         "here; '-' prints it)."),
    force: bool = typer.Option(False, "--force", help="Overwrite the file if it exists."),
    python: Optional[str] = typer.Option(None, help="SGLang's interpreter (default: detected)."),
) -> None:
    """Probe a checkpoint and write a commented starter experiment that `validate` and `plan` accept.

    Example: sglbench init /models/Qwen3.5-397B-A17B-NVFP4 -o qwen.yaml && sglbench plan qwen.yaml
    """
    from cluster.engines.interconnect import collect_interconnect
    from cluster.engines.sglang import DEFAULT_VERSION
    from cluster.probe.checkpoint import probe_checkpoint

    for option, value in (("--python", python), ("-o", output)):
        try:
            check_word(value or "", option)
        except ValueError as e:  # before the probe: a path no shell shows as written, or a line `next:` breaks
            raise UserError(str(e), field=option, expected="a path on one line without control characters") from None
    report = probe_checkpoint(model_dir)  # a CheckpointError: one line, exit 2
    target = Path(output) if output and output != "-" else Path.cwd() / f"{_slug(Path(report.model_dir))}.yaml"
    if output != "-":
        refuse_inside_checkpoint(target, report.model_dir)
    interp = find_interpreter(python)
    version = interp.version or DEFAULT_VERSION
    gpu_sm = collect_interconnect().compute_sm()
    text = render_starter(report, interp, version, gpu_sm)
    try:
        left = residual_findings(text, report, str(target), gpu_sm)
    except SpecError as e:  # only an input the experiment format refuses (a control character in the path)
        raise UserError(f"{model_dir}: an experiment cannot name this checkpoint: {e.field}: {e.message}",
                        file=model_dir, field="MODEL_DIR", expected=e.message) from None
    if left:
        text = render_starter(report, interp, version, gpu_sm, todo=tuple(left))
    for said in [f"probe: {w.message}" for w in report.warnings] + [interp.warning] * bool(interp.warning):
        print(f"warning: {said} (a TODO in the starter)", file=sys.stderr)
    for line in left:
        print(f"warning: the starter still has: {line}", file=sys.stderr)
    if output == "-":
        sys.stdout.write(text)
        return
    write_new(target, text, force)
    python_line = interp.path or f"TODO ({interp.note})"
    print(f"wrote {target}\n  engines.sglang.python: {python_line}\nnext: sglbench plan {shlex.quote(str(target))}",
          file=sys.stderr)


def register(app: typer.Typer) -> None:
    app.command("init")(init_command)
