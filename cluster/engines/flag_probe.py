"""Run by an engine's own interpreter (`python -c <this file's source>`): parse launch argv with the engine's parser.

Standard library only (the engine's interpreter need not have sglbench installed): cluster/engines/flagcheck.py
sends this file's source with `-c` from a temporary working directory, so no module of this package (such as
engines/sglang.py) can shadow the engine's own. stdin: JSON {"engine": its name, "parser": its adapter's
FlagParser as an object, "argvs": {name: [argv words after the program]}, "resolve": {name: {env}} (optional, SGLang
only)}. stdout, last line: JSON {"options":
[every option string the parser knows], "errors": {name: the parser's error line or null}, "adaptive": {name:
verdict}}, or {"unreachable": why} when the parser cannot be built.

`resolve` names the argvs that ask for --speculative-adaptive: each is resolved by SGLang's own launch pipeline
(`ServerArgs.resolve_once`, under the variant's environment), and the verdict says what SGLang's adaptive code did
with it: `_maybe_disable_adaptive` (arg_groups/speculative_hook.py) turned it off with
`adaptive_unsupported_reason`'s reason (speculative/adaptive_spec_params.py), `_init_adaptive_speculative_params`
refused the config, or adaptive stayed on; or the pipeline stopped before reaching them (not judged).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import sys
from typing import Any, Optional

def _resolve(candidates: list[str]) -> Any:
    """The first importable `module:attr[.attr]` of the candidates (one candidate: its own import error)."""
    errors = []
    for name in candidates:
        module, _, path = name.partition(":")
        try:
            found: Any = importlib.import_module(module)
            for attr in path.split("."):
                found = getattr(found, attr)
            return found
        except (ImportError, AttributeError) as e:
            if len(candidates) == 1:
                raise
            errors.append(f"{module}.{path}: {type(e).__name__}: {e}")
    raise ImportError("; ".join(errors))


def engine_parser(prog: str, fill: list[str], parser_class: list[str]) -> argparse.ArgumentParser:
    """The argparse parser the engine's server builds for its own command line, from its adapter's FlagParser
    (cluster/engines/base.py): `fill` called with a new `parser_class` (argparse's when empty) named `prog`."""
    filler = _resolve(fill)
    cls = _resolve(parser_class) if parser_class else argparse.ArgumentParser
    parser = cls(prog=prog)
    filled = filler(parser)
    return filled if isinstance(filled, argparse.ArgumentParser) else parser


def option_strings(parser: argparse.ArgumentParser) -> list[str]:
    return sorted({s for action in parser._actions for s in action.option_strings})


def parse_error(parser: argparse.ArgumentParser, argv: list[str]) -> Optional[str]:
    """None when the parser takes `argv`, else its `error:` line (unknown flag, bad value, missing argument)."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(argv)
    except SystemExit:
        lines = [ln.strip() for ln in err.getvalue().splitlines() if "error:" in ln]
        return lines[-1].split("error:", 1)[1].strip() if lines else (err.getvalue().strip()[-300:] or "refused")
    except Exception as e:  # an action or type converter raising is a refusal too
        return f"{type(e).__name__}: {e}"
    return None


# free-form JSON stored as given: one verdict of the probe's answer, read back by flagcheck.probe_answer
def adaptive_verdict(parser: argparse.ArgumentParser, argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """{"reached": SGLang's adaptive checks ran, "on": adaptive survived resolution, "reason": adaptive_unsupported_reason
    or the error _init_adaptive_speculative_params raised, "error": where resolution stopped otherwise}."""
    from sglang.srt.arg_groups import speculative_hook as hook
    from sglang.srt.arg_groups.overrides import resolution_result
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.speculative.adaptive_spec_params import adaptive_unsupported_reason

    seen: dict[str, Any] = {"reached": False, "reason": None}
    disable, init = hook._maybe_disable_adaptive, hook._init_adaptive_speculative_params

    def spy_disable(server_args: Any) -> None:
        seen["reached"] = True
        seen["reason"] = adaptive_unsupported_reason(server_args)  # what _maybe_disable_adaptive logs and acts on
        disable(server_args)

    def spy_init(server_args: Any) -> None:
        try:
            init(server_args)
        except Exception as e:
            seen["reason"] = f"{type(e).__name__}: {e}"
            raise

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    hook._maybe_disable_adaptive, hook._init_adaptive_speculative_params = spy_disable, spy_init
    out: dict[str, Any] = {"on": False, "error": None}
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            record = ServerArgs.from_cli_args(parser.parse_args(argv))
            record.resolve_once()
        out["on"] = bool(resolution_result(record, "speculative_adaptive"))
    except BaseException as e:  # the pipeline's own refusal (SystemExit, AssertionError, ValueError, ...)
        out["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    finally:
        hook._maybe_disable_adaptive, hook._init_adaptive_speculative_params = disable, init
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return {**out, **seen}


def main() -> int:
    job = json.load(sys.stdin)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # engines log while importing; keep stdout to our JSON
            recipe = job["parser"]
            parser = engine_parser(str(recipe["prog"]), list(recipe["fill"]), list(recipe.get("parser_class") or ()))
    except Exception as e:  # the parser is not reachable in this interpreter: the caller warns
        out: dict[str, Any] = {"unreachable": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
    else:
        errors = {name: parse_error(parser, list(argv)) for name, argv in job["argvs"].items()}
        out = {"options": option_strings(parser), "errors": errors,
               "adaptive": {name: adaptive_verdict(parser, list(job["argvs"][name]), dict(env))
                            for name, env in (job.get("resolve") or {}).items() if errors.get(name) is None}}
    sys.stdout.write("\n" + json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
