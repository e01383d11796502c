"""Every variant's launch argv checked by the engine's own parser: unknown, abbreviated or invalid flags are refused.

What is checked is the argv `engine.launch(...)` builds (the words after the program, as `plan` prints them); how,
the adapter says (cluster/engines/base.py: flags_parsed_here, flag_parser, adaptive_resolved):
- `sim`: in this process, by the simulator's own parser, SGLang 0.5.23's flag list and `resolve_args`;
- `sglang`, `vllm`: by the engine's interpreter (`[python, -c, <engines/flag_probe.py>]`, an argv list with a
  timeout, from a temporary working directory) feeding the argv to the engine's own argparse parser
  (`ServerArgs.add_cli_args`, vLLM's `make_arg_parser`). That interpreter lives on the GPU node, so this runs in the
  preflight task there (cluster/distributed/cluster_state.py), after the import check of the engine itself;
- a `launcher:` command, or a vLLM whose parser cannot be located: not checked, and a warning says why.
argparse takes an unambiguous prefix of a flag silently; this tool promises full flag names, so a prefix is refused
too, naming the full name. A refusal is a PreflightError naming the variant, the field, the flag and (difflib) the
closest real flag.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import io
import json
import logging
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Mapping, Optional, Sequence, Union

from cluster.engines.adaptive_check import AdaptiveVerdict, adaptive_here, check_adaptive, resolve_envs
from cluster.engines.registry import engine_class, get_engine
from cluster.errors import PreflightError
from cluster.kernel.runs import ResolvedVariant
from cluster.config.experiment import ExperimentSpec
from cluster.config.secrets import scrub_text, secret_values

PROBE_SOURCE = Path(__file__).with_name("flag_probe.py")
PROBE_TIMEOUT_S = 180.0
"""Importing SGLang's server args takes ~7 s on a CPU, vLLM's parser ~11 s; a cold node's disk is slower."""

ProblemKind = Literal["unknown", "abbreviated", "invalid"]


@dataclass(frozen=True)
class FlagProblem:
    """One flag of one variant's launch argv that the engine's parser refuses (or takes only as a prefix)."""

    variant: str
    flag: str
    kind: ProblemKind
    detail: str
    suggestion: Optional[str] = None

    def message(self, engine: str) -> str:
        hint = f"; did you mean {self.suggestion.removeprefix('--')}?" if self.suggestion else ""
        if self.kind == "unknown":
            return f"variant {self.variant!r}: {self.flag} is not a flag of {engine} ({self.detail}){hint}"
        if self.kind == "abbreviated":
            return (f"variant {self.variant!r}: {self.flag} is only an abbreviation of {self.suggestion} for {engine}'s "
                    f"parser; write the full name {(self.suggestion or '').removeprefix('--')}")
        return f"variant {self.variant!r}: {engine}'s parser refuses the argv: {self.detail}{hint}"


@dataclass(frozen=True)
class ParserAnswer:
    """What an engine's parser said about each variant's argv: its option strings and each argv's error (or None)."""

    options: frozenset[str]
    errors: dict[str, Optional[str]]
    adaptive: dict[str, AdaptiveVerdict] = field(default_factory=dict)
    """What SGLang's own launch pipeline did with each argv asked to resolve (--speculative-adaptive)."""


def closest_flag(flag: str, options: Sequence[str] | frozenset[str]) -> Optional[str]:
    """The real flag nearest to a misspelled one (difflib), or None when nothing is close."""
    longs = sorted(o for o in options if o.startswith("--"))
    found = difflib.get_close_matches(flag, longs, n=1, cutoff=0.75)
    return found[0] if found else None


def problems_in(variant: str, argv: Sequence[str], options: frozenset[str],
                parse_error: Optional[str]) -> list[FlagProblem]:
    """The flags of `argv` the parser does not know by their full name, else the parser's own error (a bad value)."""
    out: list[FlagProblem] = []
    for word in argv:
        if not word.startswith("--"):
            continue
        flag = word.split("=", 1)[0]
        if flag in options:
            continue
        completions = sorted(o for o in options if o.startswith(flag))
        if len(completions) == 1:
            out.append(FlagProblem(variant, flag, "abbreviated", "a prefix", completions[0]))
        else:
            what = f"ambiguous: {', '.join(completions[:4])}" if completions else "its own parser does not know it"
            out.append(FlagProblem(variant, flag, "unknown", what, closest_flag(flag, options)))
    if not out and parse_error:
        mentioned = next((w for w in parse_error.replace(":", " ").split() if w in options), None)
        out.append(FlagProblem(variant, mentioned or "argv", "invalid", parse_error))
    return out


def _declared_field(spec: ExperimentSpec, v: ResolvedVariant, flag: str) -> str:
    """Where the user wrote the flag: the variant's args, else server.args (a flag this tool adds: the variant)."""
    name = flag.removeprefix("--")
    index = next((i for i, sv in enumerate(spec.variants) if sv.name == (v.family or v.name)), None)
    blocks = ([(f"variants.{index}.args", spec.variants[index].args)] if index is not None else []) + [
        ("server.args", spec.server.args)]
    for where, args in blocks:
        for key in args:
            if key.replace("_", "-") == name:
                return f"{where}.{key}"
    return f"variants.{index}" if index is not None else "variants"


def launch_argvs(spec: ExperimentSpec, variants: Sequence[ResolvedVariant],
                 default_python: str) -> dict[str, list[str]]:
    """Each variant's server argv after the program, as `plan` prints it (port: the fixed one or 30000)."""
    out: dict[str, list[str]] = {}
    for v in variants:
        engine = get_engine(v.engine)
        launcher = spec.engines.get(v.engine)
        port = v.args.get("port")
        cmd = engine.launch(v, "127.0.0.1", port if isinstance(port, int) and not isinstance(port, bool) else 30000,
                            launcher, default_python)
        out[v.name] = list(cmd.argv[len(engine.program(launcher, default_python)):])
    return out


def sim_answer(variants: Sequence[ResolvedVariant], argvs: Mapping[str, list[str]]) -> ParserAnswer:
    """The simulator's own parser, SGLang 0.5.23's flag list and resolve_args over each sim variant's argv."""
    from cluster.engines.sglang_flags import SGLANG_FLAGS, unrecognized
    from cluster.engines.sim_launch import LaunchError, adaptive_unsupported, build_parser, resolve_args

    parser = build_parser()
    options = frozenset(SGLANG_FLAGS | {s for a in parser._actions for s in a.option_strings})
    errors: dict[str, Optional[str]] = {}
    adaptive: dict[str, AdaptiveVerdict] = {}
    sim_log = logging.getLogger("sglbench.sim")
    for v in variants:
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                ns, rest = parser.parse_known_args(argvs[v.name])
        except SystemExit:
            lines = [ln for ln in err.getvalue().splitlines() if "error:" in ln]
            errors[v.name] = lines[-1].split("error:", 1)[1].strip() if lines else "refused"
            continue
        refused = unrecognized(rest)
        if refused:
            errors[v.name] = f"unrecognized arguments: {' '.join(refused)}"
            continue
        was, sim_log.disabled = sim_log.disabled, True  # its launch-time warnings belong to the server's log
        try:
            resolved, spec = resolve_args(ns, v.sim)
            errors[v.name] = None
            if ns.speculative_adaptive:
                reason = None if resolved.get("speculative_adaptive") else adaptive_unsupported(
                    str(resolved["speculative_algorithm"]), int(resolved["speculative_eagle_topk"]))
                adaptive[v.name] = AdaptiveVerdict(True, bool(resolved.get("speculative_adaptive")), reason, None)
        except LaunchError as e:
            errors[v.name] = str(e)
        finally:
            sim_log.disabled = was
    return ParserAnswer(options, errors, adaptive)


def probe_answer(python: str, engine: str, argvs: Mapping[str, list[str]],
                 timeout_s: float = PROBE_TIMEOUT_S, resolve: Mapping[str, Mapping[str, str]] = {}
                 ) -> Union[ParserAnswer, str]:
    """Ask the engine's interpreter's own parser about each argv (and SGLang's launch pipeline about those named in
    `resolve`, with their environments); a string says why the parser was not reachable."""
    recipe = engine_class(engine).flag_parser
    if recipe is None:
        return f"{engine} declares no parser to ask"
    job = json.dumps({"engine": engine, "parser": dataclasses.asdict(recipe), "argvs": dict(argvs),
                      "resolve": {k: dict(v) for k, v in resolve.items()}})
    if "/" in python and not Path(python).is_absolute():
        # a relative path names the interpreter the import check and the server launch run, from this directory;
        # the probe itself runs in an empty one (no package there may shadow the engine's)
        python = str(Path(python).absolute())
    try:
        with tempfile.TemporaryDirectory(prefix="sglbench-flags-") as cwd:
            done = subprocess.run([python, "-c", PROBE_SOURCE.read_text()], input=job, capture_output=True,
                                  text=True, timeout=timeout_s, check=False, cwd=cwd)
    except subprocess.TimeoutExpired:
        return f"{python} did not answer within {timeout_s:.0f} s"
    except OSError as e:
        return f"{python} could not be run: {e}"
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    try:
        doc = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        doc = None
    if not isinstance(doc, dict):
        err = [ln for ln in done.stderr.splitlines() if ln.strip()]
        return f"the parser probe exited with code {done.returncode}: {err[-1] if err else 'no output'}"
    if "unreachable" in doc:
        return f"{engine}'s parser cannot be built in {python}: {doc['unreachable']}"
    verdicts = {name: AdaptiveVerdict(bool(v.get("reached")), bool(v.get("on")), v.get("reason"), v.get("error"))
                for name, v in (doc.get("adaptive") or {}).items() if isinstance(v, dict)}
    return ParserAnswer(frozenset(doc.get("options") or ()), dict(doc.get("errors") or {}), verdicts)


def check_launch_flags(spec: ExperimentSpec, variants: Sequence[ResolvedVariant], default_python: str, *,
                       on_node: bool) -> list[str]:
    """Refuse the first variant whose launch argv its engine's parser refuses (PreflightError); return warnings
    for the variants whose flags could not be checked here. `on_node`: the engine interpreters are reachable
    (the GPU node's preflight task); elsewhere the simulator's flags, and SGLang's adaptive variants where SGLang's
    interpreter and the checkpoint are both here (engines/adaptive_check.py)."""
    warnings: list[str] = []
    for engine in sorted({v.engine for v in variants}):
        group = [v for v in variants if v.engine == engine]
        launcher = spec.engines.get(engine)
        if launcher is not None and launcher.launcher:
            names = ", ".join(v.name for v in group)
            warnings.append(f"warning: flags not checked for {names} (engine {engine}): engines.{engine}.launcher is "
                            "a command of your own, so the engine's parser is not reachable")
            continue
        python = launcher.python if launcher is not None and launcher.python else default_python
        adapter = engine_class(engine)
        if adapter.adaptive_resolved and not on_node:
            group = adaptive_here(group, python)  # SGLang's adaptive rules, where its interpreter and model are here
        elif not adapter.flags_parsed_here and not (adapter.flag_parser is not None and on_node):
            continue  # checked by the engine's own parser in the GPU node's preflight
        if not group:
            continue
        argvs = launch_argvs(spec, group, default_python)
        answer: Union[ParserAnswer, str]
        if adapter.flags_parsed_here:
            answer = sim_answer(group, argvs)
        else:
            envs = resolve_envs(group)  # SGLang's pipeline resolves only the adaptive variants' argvs
            answer = probe_answer(python, engine, argvs, resolve=envs) if envs else probe_answer(python, engine, argvs)
        if isinstance(answer, str):
            names = ", ".join(v.name for v in group)
            warnings.append(f"warning: flags not checked for {names} (engine {engine}): {answer}")
            continue
        for v in group:
            found = problems_in(v.name, argvs[v.name], answer.options, answer.errors.get(v.name))
            if found:
                p = found[0]
                where = _declared_field(spec, v, p.flag)
                expected = p.suggestion.removeprefix("--") if p.suggestion else f"a flag {engine}'s parser knows"
                # the parser's line may quote a value: never a secret's
                detail = scrub_text(p.message(adapter.label or engine),
                                    secret_values(env=v.env, args=v.args))
                raise PreflightError(f"{where}: {detail}", field=where, expected=expected)
        warnings += check_adaptive(spec, group, answer.adaptive, adapter.label or engine)
    return warnings
