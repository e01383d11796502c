"""The server args and env every variant shares: the spec values that become a server's argv and environment, each
refused at its line when it could not be used as given."""

from __future__ import annotations

import re
from typing import Any, Mapping, Optional, Union

from pydantic import Field, field_validator

from cluster.engines.flag_domains import flag_domain_problem
from cluster.config import bounds as B
from cluster.config.fields import FieldProblem, FrozenModel

ArgValue = Union[bool, int, float, str, list[Union[int, float, str]], None]
"""A server flag's value: the engine's own parser judges it (cluster/engines/flagcheck.py), except `port` and the
flags with a numeric domain (cluster/engines/flag_domains.py), which are judged here at their line."""
_FLAG_RE = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


_SPECULATIVE_BLOCK = "the variant's speculative: block (algorithm, num_steps, eagle_topk, num_draft_tokens, draft_model_path)"
OWNED_FLAGS: dict[str, str] = {
    "model-path": "model.path", "model": "model.path",
    "tp-size": "tp (model.tp, or a variant's tp)", "tp": "tp (model.tp, or a variant's tp)",
    "tensor-parallel-size": "tp (model.tp, or a variant's tp)",
    "host": "nothing: sglbench binds each server to 127.0.0.1 on its node",
    "served-model-name": "model.served_name",
    **{f"speculative-{k}": _SPECULATIVE_BLOCK for k in (
        "algorithm", "algo", "num-steps", "eagle-topk", "num-draft-tokens", "draft-model-path", "draft-model",
        "draft", "config")},
}
"""Server args a typed field of the spec sets: given in `args` they would be dropped or fight the field, so they
are refused, naming the field to use. (`port` stays an arg: it fixes the port instead of a free one.)"""


_STRING_BOOLEANS = ("true", "false", "yes", "no", "on", "off")


def _kind(value: Any) -> str:
    return "a mapping" if isinstance(value, dict) else "a list" if isinstance(value, list) else \
        f"a {type(value).__name__}"


def _arg_shapes(args: Any) -> Any:
    """Before pydantic's union: a value outside ArgValue is said as such, not as the union's last member's
    complaint ("server.args.x.bool: should be a valid boolean"); a value that renders no usable argv word (an
    empty string, an empty list, a word argparse reads as a flag) is refused too."""
    if not isinstance(args, dict):
        return args
    for key, value in args.items():
        items = value if isinstance(value, list) else [value]
        for x in items:
            if isinstance(x, (dict, list)) or (x is None and isinstance(value, list)) or \
                    (isinstance(x, bool) and isinstance(value, list)):
                raise FieldProblem((str(key),), "a flag value is a string, number, boolean or a list of strings and "
                                   f"numbers, got {_kind(x) if isinstance(value, list) else _kind(value)}"
                                   f"{' in the list' if isinstance(value, list) else ''}")
            if isinstance(x, str) and not x.strip():
                raise FieldProblem((str(key),), f"server arg {key!r} is an empty string: no flag takes an empty word "
                                   "(write true for a bare flag, or leave the flag out)")
            if isinstance(x, str) and x.startswith("--"):
                raise FieldProblem((str(key),), f"server arg {key!r} is the word {x!r}: the engine's parser would read "
                                   "it as a flag, not as this flag's value")
        if isinstance(value, list) and not value:
            raise FieldProblem((str(key),), f"server arg {key!r} is an empty list, which passes the flag with no "
                               "value: write true for a bare flag, or give its values")
    return args


def _check_args(args: Mapping[str, ArgValue]) -> Mapping[str, ArgValue]:
    spelled: dict[str, str] = {}
    for key, value in args.items():
        flag = key.replace("_", "-")
        if flag in spelled:
            raise FieldProblem((key,), f"server arg {key!r} is the flag --{flag} again (also given as "
                               f"{spelled[flag]!r}): give each flag once, in one spelling")
        spelled[flag] = key
        if isinstance(value, str) and value.strip().lower() in _STRING_BOOLEANS:
            raise FieldProblem((key,), f"server arg {key!r} is the string {value!r}: a boolean flag is written "
                               "unquoted (true: the bare flag, false: left out); it would be passed as the word "
                               f"{value!r}")
        if flag == "port" and (isinstance(value, bool) or not isinstance(value, int)
                               or not B.PORT_MIN <= value <= B.PORT_MAX):
            raise FieldProblem((key,), f"server arg 'port' {value!r} is not a TCP port: expected an integer "
                               f"{B.PORT_MIN}-{B.PORT_MAX} (TCP port range), or leave it out for a free port")
        if key.startswith("-"):
            raise FieldProblem((key,), f"server arg {key!r}: write the flag without leading dashes, e.g. 'tp-size'")
        if not _FLAG_RE.match(key):
            raise FieldProblem((key,), f"server arg {key!r} is not a flag name (lowercase letters, digits, '-' or '_')")
        owner = OWNED_FLAGS.get(key.replace("_", "-"))
        if owner is not None:
            raise FieldProblem((key,), f"server arg {key!r} is set by the spec; use {owner} instead")
        problem = flag_domain_problem(flag, value)
        if problem is not None:
            raise FieldProblem((key,), problem)
    return args


def arg_flag(args: Mapping[str, ArgValue], flag: str) -> Optional[str]:
    """The key under which `args` gives `flag` (dashes or underscores), or None."""
    return next((k for k in args if k.replace("_", "-") == flag), None)


def _check_env(env: Mapping[str, str]) -> Mapping[str, str]:
    for key in env:
        if not _ENV_RE.match(key):
            raise FieldProblem((key,), f"environment variable name {key!r} is not valid (expected [A-Za-z_][A-Za-z0-9_]*)")
    return env


class ServerSpec(FrozenModel):
    """Server args (flag name without dashes → value) and environment shared by every variant."""

    args: dict[str, ArgValue] = Field(default_factory=dict)
    """Server flags without leading dashes -> value (true = a bare flag), passed to every variant."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables set for every variant's server."""

    _s = field_validator("args", mode="before")(classmethod(lambda cls, v: _arg_shapes(v)))
    _a = field_validator("args")(classmethod(lambda cls, v: _check_args(v)))
    _e = field_validator("env")(classmethod(lambda cls, v: _check_env(v)))
