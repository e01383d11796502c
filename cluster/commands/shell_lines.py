"""A server command as the one line a POSIX shell would run: env assignments and argv words, each quoted.

`sglbench plan` prints each variant's launch as such a line, so that a line copied into a shell ("start one server by
hand") runs exactly the argv and environment sglbench launches, and a value holding `;`, `$`, a quote or a space
stays one word. Words are quoted with `shlex.quote`; a word holding a control character (newline, tab, ESC, ...)
is written as a bash ANSI-C string (`$'a\\nb'`), so the command stays on one line (validate refuses newlines in
values; this keeps the printer safe even so). Secrets are never printed: a secret env value or flag value is written
as a reference to an environment variable (`"$OPENAI_API_KEY"`) that the user sets, with its fingerprint beside it
in a comment line, so the line still runs the same command once that variable holds the secret.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Mapping, Sequence

from cluster.config.secrets import fingerprint, is_secret_name

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_ANSI_C_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\\": "\\\\", "'": "\\'"}


def quote_word(word: str) -> str:
    """One argv word quoted for a shell: shlex.quote, or a bash $'…' string when it holds a control character."""
    if not _CONTROL.search(word):
        return shlex.quote(word)
    body = "".join(_ANSI_C_ESCAPES.get(c, f"\\x{ord(c):02x}" if _CONTROL.match(c) else c) for c in word)
    return f"$'{body}'"


def _secret_var(flag: str) -> str:
    """The environment variable a secret flag's value is read from in the printed line: --api-key → API_KEY."""
    return re.sub(r"[^A-Za-z0-9]", "_", flag.lstrip("-").split("=", 1)[0]).upper()


@dataclass(frozen=True)
class ShellCommand:
    """The printed line, and the secrets it refers to (variable name → fingerprint of the value it must hold)."""

    line: str
    secrets: tuple[tuple[str, str], ...]

    def comment(self) -> str:
        """'# set API_KEY (sha256:1a2b3c4d) first', or '' when the line holds no secret."""
        if not self.secrets:
            return ""
        return "# set " + ", ".join(f"{name} ({fp})" for name, fp in self.secrets) + " in the environment first"


def shell_command(argv: Sequence[str], env: Mapping[str, str]) -> ShellCommand:
    """`K='v' … argv…` on one line; secret values as "$NAME" references (see the module docstring)."""
    words: list[str] = []
    secrets: dict[str, str] = {}
    for k, v in sorted(env.items()):
        if is_secret_name(k):
            secrets[k] = fingerprint(v)
            words.append(f'{k}="${k}"')
        else:
            words.append(f"{k}={quote_word(v)}")
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("-") and is_secret_name(a.split("=", 1)[0]):
            name = _secret_var(a)
            if "=" in a:
                flag, value = a.split("=", 1)
                secrets[name] = fingerprint(value)
                words.append(f'{quote_word(flag)}="${name}"')
                i += 1
                continue
            if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                secrets[name] = fingerprint(argv[i + 1])
                words += [quote_word(a), f'"${name}"']
                i += 2
                continue
        words.append(quote_word(a))
        i += 1
    return ShellCommand(" ".join(words), tuple(sorted(secrets.items())))


__all__ = ["ShellCommand", "quote_word", "shell_command"]
