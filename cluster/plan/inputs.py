"""What a run's inputs must hold before any server starts: prompt sources within the model's limits, the output
path, fixed ports, and an engine interpreter that can import its engine.

Each check is pure (files, sockets, one subprocess) and Ray-free; preflight (cluster/node/preflight.py) calls the ones
this machine can answer (`check_inputs`) for `validate`/`plan`/`run`, and again with the node's files, ports and
interpreters (`check_on_node`) in the driver's task on a GPU node. Every refusal is a PreflightError naming the
file, the field and what was expected — minutes before a server would have loaded the model and then failed.
"""

from __future__ import annotations

import os
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence

from cluster.loadgen.source_files import row_error
from cluster.plan.source_parses import SourceParses
from cluster.engines.registry import is_simulated
from cluster.errors import PreflightError
from cluster.input_files import symlink_loop_above
from cluster.kernel.runs import ResolvedVariant
from cluster.probe.checkpoint import ProbeReport
from cluster.probe.safetensors_header import describe_non_file
from cluster.config.experiment import ExperimentSpec
from cluster.config.workload import WorkloadSpec
from cluster.config.template_settings import expand_workload
from cluster.config.prompts import ConversationPrompts, RandomIdsPrompts, SourceOptions, TextPrompts, TracePrompts
from cluster.config.engines import EngineLauncher, EngineName

RAY_PORTS: dict[int, str] = {6379: "Ray's GCS server", 8265: "Ray's dashboard", 10001: "Ray's client server",
                             8076: "Ray's object manager", 52365: "Ray's dashboard agent"}
"""Ports Ray listens on by default (`ray start` defaults); a server told to take one fights the cluster."""
IMPORT_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class ModelLimits:
    """What a prompt must fit: the model's context (prompt + output tokens) and its vocabulary (ids below it)."""

    context_tokens: Optional[int]
    vocab_size: Optional[int]
    source: str
    """Where the limits were read (the checkpoint's config.json, the simulator's knobs)."""


def limits_for(v: ResolvedVariant, reports: Mapping[str, ProbeReport]) -> ModelLimits:
    """The limits of the model a variant serves: the simulator's declared ones, else the probed config.json."""
    if is_simulated(v.engine):
        return ModelLimits(v.sim.context_length, None, "the simulator's context_length knob")
    report = reports.get(v.model_path)
    if report is None:
        return ModelLimits(None, None, "unknown (checkpoint not readable here)")
    cfg = report.config
    return ModelLimits(cfg.max_position_embeddings, cfg.vocab_size, f"{v.model_path}/config.json")


def _resolve(path: str, base_dir: Path) -> Path:
    p = Path(path)
    return p if p.is_absolute() else base_dir / p


def check_prompts(spec: ExperimentSpec, variants: Sequence[ResolvedVariant], reports: Mapping[str, ProbeReport],
                  base_dir: Path, *, absent_ok: bool = False) -> list[str]:
    """Every workload's prompts exist, parse, and fit every variant's model. `absent_ok`: an absolute prompt path
    missing here may exist on the GPU node (checked again there). Returns one note per conversation dataset: its
    rows read, used (per category) and filtered by reason. Each file is parsed once (SourceParses), however many
    variants and workloads check it."""
    notes: dict[str, str] = {}
    parses = SourceParses()
    for i, w in enumerate(spec.workloads):
        for x in expand_workload(w):  # each chat template setting renders its own prompts
            for v in variants:
                limits = limits_for(v, reports)
                note = _check_workload(spec.model.path, i, x, limits, base_dir, absent_ok,
                                       spec.load.arrival == "trace", parses)
                if note is not None:
                    notes.setdefault(x.name, note)
    task = spec.correctness.eval
    if task is not None and not (absent_ok and Path(task.path).is_absolute() and not Path(task.path).exists()):
        from cluster.loadgen.eval import EvalFileError, read_eval_items

        try:
            read_eval_items(task, base_dir)
        except EvalFileError as e:
            raise PreflightError(str(e), file=e.file, field=e.field, expected=e.expected) from None
    return [f"workload {name!r}: {note}" for name, note in notes.items()]


# A prompt source's error names the row's own field (input_ids, timestamp_s) in its message; what preflight reports
# as the field is the spec's (workloads.N.prompts.path), so the error points at the experiment's line too.


def _check_workload(model_path: str, i: int, w: WorkloadSpec, limits: ModelLimits, base_dir: Path,
                    absent_ok: bool, replay_times: bool = False,
                    parses: Optional[SourceParses] = None) -> Optional[str]:
    parses = SourceParses() if parses is None else parses
    field = f"workloads.{i}"
    ctx = limits.context_tokens
    n_in, n_out = w.prompt_tokens_max(), w.output_tokens_max()
    if ctx is not None and n_in is not None and n_out is not None and n_in + n_out > ctx:
        # a distribution's max is what the longest request asks for: long-context load points fail here, not on
        # the GPU node after the model has loaded
        which = "input + output tokens" if isinstance(w.input_tokens, int) and isinstance(w.output_tokens, int) \
            else "input + output tokens at the distributions' max"
        if w.sessions is not None:
            which += (f" of a session's last turn (its prompt holds {w.sessions.turns} turns' input and "
                      f"{w.sessions.turns - 1} answers)")
        raise PreflightError(f"{field}.input_tokens: {n_in} + {n_out} {which} do not fit the model's context of "
                             f"{ctx} tokens ({limits.source})", field=f"{field}.input_tokens",
                             expected=f"input_tokens + output_tokens <= {ctx}")
    src = w.prompts
    if isinstance(src, RandomIdsPrompts):
        _check_vocab(field, src.vocab_size, limits)
        return None
    if isinstance(src, SourceOptions):  # a source registered beside config/prompts.py's own
        from cluster.loadgen.prompt_sources import source_of

        return source_of(w).check(w, base_dir, model_path)
    assert src.path is not None  # the spec requires a path for file sources
    path = _resolve(src.path, base_dir)
    what = describe_non_file(str(path))
    if what == "does not exist" and absent_ok and Path(src.path).is_absolute():
        return None
    if what is not None:
        raise PreflightError(f"{path}: {field}.prompts.path {what}", file=str(path), field=f"{field}.prompts.path",
                             expected=f"a readable {src.source} file")
    if isinstance(src, TextPrompts):
        _check_text(model_path, field, src, path, limits, base_dir, absent_ok, parses)
        return None
    if isinstance(src, ConversationPrompts):
        return _check_conversations(model_path, field, w, src, limits, base_dir, absent_ok, parses)
    if isinstance(src, TracePrompts):
        return _check_trace(field, w, src, path, limits, replay_times, parses)
    from cluster.loadgen.datasets import DatasetError, load_jsonl_rows

    try:
        rows = parses.get("jsonl prompts", path, lambda: load_jsonl_rows(path))
    except DatasetError as e:
        raise PreflightError(f"{field}.prompts.path: {e}", file=e.file, field=f"{field}.prompts.path",
                             expected=e.expected) from None
    out = n_out or 0
    for row, (line, prompt) in enumerate(rows):  # every row is returned, in order: its index is its ordinal
        ids = prompt.input_ids
        if ids is None:
            continue
        if ctx is not None and len(ids) + out > ctx:
            raise row_error(PreflightError, path, line, row, f"input_ids: a {len(ids)}-token prompt plus {out} "
                            f"output tokens does not fit the model's context of {ctx} tokens ({limits.source})",
                            f"{field}.prompts.path", f"at most {ctx - out} tokens")
        if limits.vocab_size is not None and max(ids) >= limits.vocab_size:
            raise row_error(PreflightError, path, line, row, f"input_ids: id {max(ids)} is outside the model's "
                            f"vocabulary of {limits.vocab_size} ({limits.source})",
                            f"{field}.prompts.path", f"ids below {limits.vocab_size}")
    return None


def _check_text(model_path: str, field: str, src: TextPrompts, path: Path, limits: ModelLimits, base_dir: Path,
                absent_ok: bool, parses: SourceParses) -> None:
    """The corpus parses (a .jsonl corpus row by row) and the tokenizer loads and fits the model's vocabulary."""
    from cluster.errors import PromptSourceError
    from cluster.loadgen.text_prompts import corpus_text

    try:  # the corpus is here whatever the tokenizer: read it first, so it is checked even when that is not
        parses.get("corpus", path, lambda: corpus_text(path))
    except PromptSourceError as e:
        raise PreflightError(f"{field}.prompts.path: {e}", file=e.file, field=f"{field}.prompts.path",
                             expected=e.expected) from None
    if src.tokenizer is None and not Path(model_path).exists() and absent_ok:
        return  # the model directory (and its tokenizer) lives on the GPU node: checked there
    _check_tokenizer(model_path, field, src.tokenizer, limits, base_dir, parses)


def _check_tokenizer(model_path: str, field: str, tokenizer: Optional[str], limits: ModelLimits,
                     base_dir: Path, parses: SourceParses) -> None:
    """The tokenizer a text or conversation workload encodes with loads, and every id it can emit is inside the
    model's vocabulary (a tokenizer of another model would send ids the server cannot embed)."""
    from cluster.errors import PromptSourceError
    from cluster.loadgen.text_prompts import load_tokenizer, tokenizer_file

    where = f"{field}.prompts.tokenizer" if tokenizer else "model.path"
    try:
        f = tokenizer_file(tokenizer, model_path, base_dir)
        top = parses.get("tokenizer's top id", f,
                         lambda: max(load_tokenizer(f).get_vocab(with_added_tokens=True).values(), default=-1))
    except PromptSourceError as e:
        raise PreflightError(f"{where}: {e}", file=e.file, field=where, expected=e.expected) from None
    if limits.vocab_size is not None and top >= limits.vocab_size:
        raise PreflightError(f"{where}: {f}: the tokenizer has ids up to {top}, outside the model's vocabulary of "
                             f"{limits.vocab_size} ({limits.source}); it is not this model's tokenizer",
                             file=str(f), field=where, expected=f"a tokenizer whose ids are below {limits.vocab_size}")


def _check_vocab(field: str, vocab_size: int, limits: ModelLimits) -> None:
    """Random ids (random_ids, trace) are drawn below prompts.vocab_size: it must not exceed the model's vocabulary."""
    if limits.vocab_size is not None and vocab_size > limits.vocab_size:
        raise PreflightError(f"{field}.prompts.vocab_size: {vocab_size} draws ids outside the model's vocabulary "
                             f"of {limits.vocab_size} ({limits.source})", field=f"{field}.prompts.vocab_size",
                             expected=f"at most {limits.vocab_size}")


def _check_trace(field: str, w: WorkloadSpec, src: TracePrompts, path: Path, limits: ModelLimits,
                 replay_times: bool, parses: SourceParses) -> str:
    """Every row parses and, of the rows a window replays, each fits the context and the vocabulary; returns the
    replayed stretch's note (rows, span, recorded mean rate)."""
    from cluster.kernel.arrivals import recorded_rate_per_s
    from cluster.loadgen.traces import TraceError, load_trace, replayed_rows

    try:
        rows = replayed_rows(parses.get("trace", path, lambda: load_trace(path)), w.num_requests, path)
    except TraceError as e:
        raise PreflightError(f"{field}.prompts.path: {e}", file=e.file,
                             field=f"{field}.num_requests" if e.field == "num_requests"
                             else f"{field}.prompts.path", expected=e.expected) from None
    ctx = limits.context_tokens
    for r in rows:
        if ctx is not None and r.input_tokens + r.output_tokens > ctx:
            raise row_error(PreflightError, path, r.line, r.row, f"a {r.input_tokens}-token prompt plus "
                            f"{r.output_tokens} output tokens does not fit the model's context of {ctx} tokens "
                            f"({limits.source})", f"{field}.prompts.path", f"prompt + output <= {ctx}")
    _check_vocab(field, src.vocab_size, limits)
    times = [r.timestamp_s - rows[0].timestamp_s for r in rows]
    try:
        rate = f", recorded mean rate {recorded_rate_per_s(times):.3g} req/s"
    except ValueError:
        if replay_times:
            raise PreflightError(f"{path}: the {len(rows)} replayed rows have no rate to rescale (fewer than two "
                                 "distinct times); load.arrival: trace needs one", file=str(path),
                                 field=f"{field}.num_requests", expected="two or more rows at different times") \
                from None
        rate = ", no recorded rate (fewer than two distinct times)"
    return f"{path}: {len(rows)} trace rows replayed over {times[-1]:.3g} s{rate}"


def _check_conversations(model_path: str, field: str, w: WorkloadSpec, src: ConversationPrompts,
                         limits: ModelLimits, base_dir: Path, absent_ok: bool,
                         parses: SourceParses) -> Optional[str]:
    """Every row parses (file:line at the first that does not); with a tokenizer every used row fits the context
    with its output budget. Returns the rows read / used / filtered note."""
    from cluster.errors import PromptSourceError
    from cluster.loadgen.conversations import load_selection, needs_tokenizer

    if needs_tokenizer(w) and src.tokenizer is None and not Path(model_path).exists() and absent_ok:
        return None  # counted with the model's own tokenizer, which lives on the GPU node: checked there
    if needs_tokenizer(w):
        _check_tokenizer(model_path, field, src.tokenizer, limits, base_dir, parses)
    try:  # what the selection reads besides the file: the workload's fields and the model's tokenizer
        sel = parses.get("conversations", _resolve(src.path or "", base_dir),
                         lambda: load_selection(w, base_dir, model_path)[0], w.model_dump_json(), model_path)
    except PromptSourceError as e:
        raise PreflightError(f"{field}.prompts.path: {e}", file=e.file, field=f"{field}.prompts.path",
                             expected=e.expected) from None
    if not sel.rows:
        raise PreflightError(f"{field}.prompts: every row was filtered ({sel.summary()})", file=str(sel.path),
                             field=f"{field}.prompts", expected="at least one usable row")
    ctx = limits.context_tokens
    fixed_out = w.output_tokens_max()
    for r in sel.rows:
        n_in = sel.input_tokens.get(r.row)
        n_out = sel.output_tokens.get(r.row, fixed_out)
        if ctx is not None and n_in is not None and n_out is not None and n_in + n_out > ctx:
            raise row_error(PreflightError, sel.path, r.line, r.row, f"a {n_in}-token prompt plus {n_out} output "
                            f"tokens does not fit the model's context of {ctx} tokens ({limits.source}); set "
                            f"{field}.prompts.max_input_tokens to leave such rows out (they are then counted)",
                            f"{field}.prompts.max_input_tokens", f"prompt + output <= {ctx} tokens")
    return str(sel.summary())


def resolve_output_root(output: str, base_dir: Path) -> str:
    """A URI (scheme://...) stays as is; a relative local path is taken relative to the experiment's base dir."""
    if "://" in output:
        return output
    p = Path(output)
    if p.is_absolute():
        return str(p)
    try:
        return str((base_dir / p).resolve())
    except (RuntimeError, OSError):  # a symlink loop (RuntimeError before Python 3.13): check_output_root names it
        return str(base_dir / p)


def check_output_root(root: str, field: str = "output") -> None:
    """A local dataset root must be a directory (or creatable) and writable; nothing is created here."""
    if "://" in root:
        return
    p = Path(root)
    loop = symlink_loop_above(p)
    if loop is not None:
        where = "is a symlink loop" if loop == p else f"lies under {loop}, a symlink loop"
        raise PreflightError(f"{p}: {field}: {where}, so the dataset root can never be reached", file=str(p),
                             field=field, expected="a directory or a path that can be created")
    if p.exists() and not p.is_dir():
        raise PreflightError(f"{p}: {field} is a file, not a directory (the dataset root holds one directory per "
                             "experiment)", file=str(p), field=field, expected="a directory or a path that can be created")
    probe = p
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise PreflightError(f"{p}: {field}: {probe} is a file, so the directory cannot be created", file=str(p),
                             field=field, expected="a directory or a path that can be created")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise PreflightError(f"{p}: {field}: {probe} is not writable (read-only filesystem or no permission)",
                             file=str(p), field=field, expected="a writable directory")


def fixed_port(v: ResolvedVariant) -> Optional[int]:
    """The port a variant fixes through its `port` arg, or None (a free port is picked on the node)."""
    port = v.args.get("port")
    if isinstance(port, bool):
        return None
    if isinstance(port, int):
        return port
    if isinstance(port, str) and port.isdigit():
        return int(port)
    return None


def check_ports(variants: Sequence[ResolvedVariant], ray_ports: Mapping[int, str] = RAY_PORTS,
                bind_host: Optional[str] = None) -> None:
    """A fixed port is in range and not one of Ray's; with `bind_host` (on the node) it must also be free there."""
    for v in variants:
        port = fixed_port(v)
        if port is None:
            continue
        field = f"variant {v.name!r} args.port"
        if not 1 <= port <= 65535:
            raise PreflightError(f"{field}: {port} is not a TCP port", field="args.port", expected="1-65535")
        if port in ray_ports:
            raise PreflightError(f"{field}: {port} is {ray_ports[port]}'s port; pick another or leave port unset",
                                 field="args.port", expected=f"a port other than {sorted(ray_ports)}")
        if bind_host is not None:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind((bind_host, port))
                except OSError as e:
                    raise PreflightError(f"{field}: port {port} is already taken on {socket.gethostname()} "
                                         f"({e.strerror or e}); free it or leave port unset", field="args.port",
                                         expected="a free port") from None


def check_engine_import(engine: str, module: str, launcher: Optional[EngineLauncher], default_python: str,
                        timeout_s: float = IMPORT_TIMEOUT_S) -> None:
    """The engine's interpreter can find its server module (a launcher command is the user's to vouch for)."""
    if launcher is not None and launcher.launcher:
        return
    python = launcher.python if launcher is not None and launcher.python else default_python
    field = f"engines.{engine}.python"
    top = module.split(".")[0]
    code = (f"import importlib.util, sys; import {top}; "
            f"sys.exit(0 if importlib.util.find_spec({module!r}) else 3)")
    try:
        done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=timeout_s, check=False)
    except FileNotFoundError:
        raise PreflightError(f"{field}: {python} does not exist", file=python, field=field,
                             expected=f"an interpreter that has {top} installed") from None
    except (OSError, subprocess.SubprocessError) as e:
        raise PreflightError(f"{field}: {python} could not be run: {e}", file=python, field=field,
                             expected=f"an interpreter that has {top} installed") from None
    if done.returncode != 0:
        lines = [ln for ln in (done.stderr or "").splitlines() if ln.strip()]
        why = lines[-1] if lines else f"{module} not found (exit code {done.returncode})"
        raise PreflightError(f"{field}: {python} cannot import {module}: {why}", file=python, field=field,
                             expected=f"an interpreter that has {top} installed")


def check_inputs(spec: ExperimentSpec, variants: Sequence[ResolvedVariant], reports: Mapping[str, ProbeReport],
                 base_dir: Path, output_root: Optional[str] = None) -> list[str]:
    """What this machine can check (validate/plan/run): prompts readable here, the output root, Ray's ports.
    Returns the notes to print (conversation datasets' rows read, used and filtered)."""
    notes = check_prompts(spec, variants, reports, base_dir, absent_ok=True)
    if output_root is not None:
        check_output_root(output_root)
    check_ports(variants)
    return notes


def check_on_node(spec: ExperimentSpec, variants: Sequence[ResolvedVariant], reports: Mapping[str, ProbeReport],
                  base_dir: Path, engine_modules: Mapping[EngineName, str], default_python: str,
                  ray_ports: Mapping[int, str] = RAY_PORTS) -> None:
    """What only the GPU node can answer: its prompt files, its free ports, its engine interpreters."""
    check_prompts(spec, variants, reports, base_dir)
    check_ports(variants, ray_ports, bind_host="127.0.0.1")
    for engine in sorted({v.engine for v in variants if v.launched}):  # an endpoint's engine runs elsewhere
        check_engine_import(engine, engine_modules[engine], spec.engines.get(engine), default_python)
