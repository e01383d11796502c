"""Which declared values are secrets, and the one masked form (a fingerprint) that stands in for them everywhere.

A secret is the value of an environment variable or a server flag whose name looks secret (`is_secret_name`:
KEY, TOKEN, SECRET, PASSWORD or CREDENTIAL anywhere in it, case-insensitive — `OPENAI_API_KEY`, `HF_TOKEN`,
`api-key`, `admin-api-key`, `ssl-keyfile-password` — but not the words TOKENS or TOKENIZER, which name counts and
tokenizers: `max-prefill-tokens`, `TOKENIZERS_PARALLELISM`). Its value never leaves the server's own argv and
environment: what is printed or stored is `mask(value)`, `<secret sha256:1a2b3c4d>` (the first 8 hex digits of
the value's SHA-256), so two runs with the same key still read the same and a rotated key reads different.

Run keys are computed from the masked identity (cluster/plan/runs.py `ResolvedVariant.identity`): the stored
experiment.json then holds everything a run key is made of, and a spec without secrets keeps its run keys.

What a server answers or logs is scrubbed by value (`scrub`): every occurrence of a declared secret value is
replaced by its mask, whatever key or line carries it (SGLang's /server_info lists `api_key`).
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import Iterable, Mapping, Sequence, TypeVar, Union, cast

SECRET_NAME_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL")
_NOT_SECRET_WORDS = re.compile(r"TOKENS|TOKENIZERS?")
MIN_SCRUB_CHARS = 4
"""Values shorter than this are masked where declared but not searched for in server output (a 1-character
"secret" would otherwise be replaced in every number)."""

Scalar = Union[bool, int, float, str, None]
ArgLike = Union[Scalar, Sequence[Union[int, float, str]]]
Doc = TypeVar("Doc")


def is_secret_name(name: str) -> bool:
    """True for an env var or flag name whose value must never be printed or written (see the module docstring)."""
    upper = _NOT_SECRET_WORDS.sub("", name.lstrip("-").upper())
    return any(m in upper for m in SECRET_NAME_MARKERS)


def fingerprint(value: str) -> str:
    """`sha256:` and the first 8 hex digits of the value's SHA-256: comparable across runs, not reversible."""
    return "sha256:" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def mask(value: object) -> str:
    """What stands in for a secret value wherever it would be printed or stored."""
    return f"<secret {fingerprint(_text(value))}>"


def _text(value: object) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """Environment safe to store or print: values of secret-looking variables replaced by their mask."""
    return {k: (mask(v) if is_secret_name(k) else v) for k, v in env.items()}


def redact_args(args: Mapping[str, ArgLike]) -> dict[str, ArgLike]:
    """Server args (flag name → value) with secret-named flags' values masked."""
    return {k: (mask(v) if is_secret_name(k) and v is not None and v is not False else v) for k, v in args.items()}


def _secret_flag_at(argv: Sequence[str], i: int) -> bool:
    a = argv[i]
    return a.startswith("-") and "=" not in a and is_secret_name(a) and i + 1 < len(argv)


def redact_argv(argv: Sequence[str]) -> list[str]:
    """An argv safe to store or print: the value after a secret-named flag (`--api-key V`, `--api-key=V`) masked."""
    out = list(argv)
    for i, a in enumerate(out):
        if a.startswith("-") and "=" in a and is_secret_name(a.split("=", 1)[0]):
            flag, value = a.split("=", 1)
            out[i] = f"{flag}={mask(value)}"
        elif _secret_flag_at(argv, i) and not argv[i + 1].startswith("--"):
            out[i + 1] = mask(argv[i + 1])
    return out


def secret_values(env: Mapping[str, str] = {}, args: Mapping[str, ArgLike] = {},
                  argv: Sequence[str] = ()) -> frozenset[str]:
    """The declared secret values (for `scrub`): secret-named env values, flag values and argv words."""
    found: set[str] = {v for k, v in env.items() if is_secret_name(k)}
    found |= {_text(v) for k, v in args.items() if is_secret_name(k) and v is not None and not isinstance(v, bool)}
    for i, a in enumerate(argv):
        if a.startswith("-") and "=" in a and is_secret_name(a.split("=", 1)[0]):
            found.add(a.split("=", 1)[1])
        elif _secret_flag_at(argv, i) and not argv[i + 1].startswith("--"):
            found.add(argv[i + 1])
    return frozenset(v for v in found if len(v) >= MIN_SCRUB_CHARS)


def scrub_text(text: str, values: Iterable[str]) -> str:
    """`text` with every occurrence of each secret value replaced by its mask (longest values first)."""
    for v in sorted(values, key=len, reverse=True):
        if v in text:
            text = text.replace(v, mask(v))
    return text


def scrub_file(path: "os.PathLike[str] | str", values: Iterable[str]) -> bool:
    """Rewrite a text file (a server's log) with every secret value masked, line by line through a temporary file
    beside it, then an atomic rename; True when something was masked. A server logging its own argv (SGLang prints
    ServerArgs, api_key included) leaves the key in its log: the actor scrubs the file once the server stopped."""
    vals = sorted({v.encode("utf-8", "surrogatepass") for v in values}, key=len, reverse=True)
    if not vals or not os.path.isfile(path):
        return False
    changed = False
    tmp = f"{os.fspath(path)}.scrub-{os.getpid()}"
    try:
        with open(path, "rb") as src, open(tmp, "wb") as dst:
            for line in src:
                for v in vals:
                    if v in line:
                        line = line.replace(v, mask(v.decode("utf-8", "surrogatepass")).encode())
                        changed = True
                dst.write(line)
        if changed:
            os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return changed


def scrub(doc: Doc, values: Iterable[str]) -> Doc:
    """A JSON-like document (str, list, dict; keys too) with every secret value replaced by its mask; same shape."""
    vals = tuple(values)
    if not vals:
        return doc
    if isinstance(doc, str):
        return cast(Doc, scrub_text(doc, vals))
    if isinstance(doc, dict):
        return cast(Doc, {scrub(k, vals): scrub(v, vals) for k, v in doc.items()})
    if isinstance(doc, (list, tuple)):
        return cast(Doc, [scrub(v, vals) for v in doc])
    return doc


# free-form JSON stored as given: the spec's model_dump, secrets masked, kept in experiment.json
def masked_spec_json(spec_json: Mapping[str, object]) -> dict[str, object]:
    """An ExperimentSpec's `model_dump(mode="json")` with every declared secret masked (server and variant env and
    args, engine launchers): the form experiment.json stores and a remote task may be sent."""
    out = dict(spec_json)

    def env_args(block: object) -> object:
        if not isinstance(block, dict):
            return block
        b = dict(block)
        if isinstance(b.get("env"), dict):
            b["env"] = redact_env(b["env"])
        if isinstance(b.get("args"), dict):
            b["args"] = redact_args(b["args"])
        return b

    out["server"] = env_args(out.get("server"))
    variants = out.get("variants")
    if isinstance(variants, list):
        out["variants"] = [env_args(v) for v in variants]
    engines = out.get("engines")
    if isinstance(engines, dict):
        out["engines"] = {name: _masked_launcher(e) for name, e in engines.items()}
    return out


def _masked_launcher(entry: object) -> object:
    if isinstance(entry, dict) and isinstance(entry.get("launcher"), list):
        return {**entry, "launcher": redact_argv([str(w) for w in entry["launcher"]])}
    return entry

