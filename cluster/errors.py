"""The one exception tree of sglbench: every error the tool raises on purpose derives from `SglbenchError`.

    SglbenchError                      exit code
    ├── UserError                      2   the input is wrong: names the file, the field and what was expected
    │   ├── SpecError                      an experiment YAML (file:line: field: message)
    │   ├── FieldProblem                   a spec validator's complaint about a sub-field (becomes a SpecError)
    │   ├── CheckpointError                a checkpoint directory, config.json, index or shard header
    │   ├── PromptSourceError              a prompt file, corpus or tokenizer a workload names
    │   │   ├── DatasetError                   a jsonl prompt file
    │   │   ├── ConversationError              a ShareGPT or messages dataset, or one of its rows (file:line)
    │   │   └── TextPromptError                a text corpus or its tokenizer
    │   ├── PreflightError                 what the experiment needs is not there (before any GPU is touched)
    │   ├── TuningError                    a tuning request that cannot be honoured (kind, options, NVFP4 MoE)
    │   ├── KnobError                      a simulator knob (the spec's `sim:` block, env SGLBENCH_SIM)
    │   ├── LaunchError                    a launch argument the simulated SGLang refuses, as SGLang would
    │   ├── VersionMismatchError           a declared engine version that the installed engine contradicts
    │   ├── QueryError                     a results query (read-only SQL over the views) or its baseline
    │   ├── ExperimentNotFound             no dataset for that experiment under the root
    │   ├── NothingToShow                  the dataset holds nothing a `results` command shows (no run, no search)
    │   ├── StoreError                     a name or row the dataset store refuses (unsafe path component, schema)
    │   ├── AuthError                      a cluster needs credentials the user has not given
    │   │   └── JobAuthError                   (also a JobError) the Ray job API's token is not in its env var
    │   ├── JobRequestError                (also a JobError) an --env pair or path `sglbench submit` cannot send
    │   └── ServerURLError                 a live server's URL (scheme, host, port) that cannot be used as given
    ├── EnvironmentFault               3   the machine or cluster cannot do it (no room to place, job API down)
    │   ├── PlacementError                 a variant can never be placed on this cluster
    │   ├── ArtifactError                  a tuning artifact is missing, corrupt or cannot be stored
    │   ├── TuningStageError               a tuning job failed on the cluster (its log tail attached)
    │   ├── WriteError                     a file cannot be written (disk full, read-only): names the path
    │   ├── DatasetLocked                  another driver writes that experiment dataset: names its holder
    │   ├── JobError                       the Ray job API cannot be reached or refused the request
    │   ├── RuntimeEnvFault                Ray could not set up a task's runtime environment on a node
    │   └── ServerUnreachableError         a live server's name does not resolve, or no route to it
    └── EngineFault                    4   an engine server did not start or died (its decisive log line attached)
        ├── ServerStartError
        ├── SessionTurnError               a session's next turn cannot be built from the engine's answer
        ├── MalformedAnswerError           a live server's answer is not its protocol (HTTP, size, JSON, a field's type)
        ├── SmokeFault                     some of `sglbench smoke`'s calls failed at the server's end
        └── ServerAnswerError              a call to a live server failed at its end (engines/http_call.py)
            ├── ServerRefusedError             connection refused: nothing listening
            └── ServerTimeoutError             the call's whole deadline passed

Anything else that escapes is a bug in sglbench: the CLI prints its traceback and says so (exit code 70).
A user error carries `file`, `field` and `expected` so the message can name all three. Each class is defined
beside the code that raises it (SpecError in cluster/config/fields.py, ...); tests/unit/test_errors.py checks that
every exception class in the package derives from `SglbenchError`.
"""

from __future__ import annotations

import traceback
from typing import Optional, TextIO

EXIT_USER_ERROR = 2
EXIT_ENVIRONMENT = 3
EXIT_ENGINE = 4
EXIT_BUG = 70
"""EX_SOFTWARE from sysexits.h: an internal error, never the user's input."""


class SglbenchError(Exception):
    """Base of every error sglbench raises on purpose; `exit_code` is what the CLI exits with."""

    exit_code = 1


class UserError(SglbenchError, ValueError):
    """Wrong input: `file`, `field` and `expected` say where and what would have been right (each may be empty)."""

    exit_code = EXIT_USER_ERROR

    def __init__(self, message: str, *, file: Optional[str] = None, field: Optional[str] = None,
                 expected: Optional[str] = None) -> None:
        super().__init__(message)
        self.file, self.field, self.expected = file, field, expected


class EnvironmentFault(SglbenchError, RuntimeError):
    """The machine, the cluster or the dataset location cannot do what was asked; the input itself is fine."""

    exit_code = EXIT_ENVIRONMENT


class EngineFault(SglbenchError, RuntimeError):
    """An engine server failed to start or died; `log_line` is the decisive line of its log, `log_tail` the end.

    `server_exit_code` is the server process's exit status (None while it ran); `exit_code` stays the CLI's."""

    exit_code = EXIT_ENGINE

    def __init__(self, message: str, log_tail: str = "", exit_code: Optional[int] = None,
                 log_line: Optional[str] = None) -> None:
        super().__init__(message)
        self.log_tail = log_tail
        self.server_exit_code = exit_code
        self.log_line = log_line


class PromptSourceError(UserError):
    """A prompt file, corpus or tokenizer a workload names cannot give the prompts (DatasetError, TextPromptError)."""


class AuthError(UserError):
    """A cluster needs credentials (a token in the named environment variable) that the user has not given."""


class PreflightError(UserError):
    """An experiment that must not start: names the variant, the path and what is missing. Raised by the planner's
    checks (plan/preflight.py, plan/inputs.py) and the engines' own flag check (engines/flagcheck.py), so it is
    here rather than beside one of them."""


EXIT_CODES: dict[str, int] = {"ok": 0, "runs failed": 1, "user error": EXIT_USER_ERROR,
                              "environment": EXIT_ENVIRONMENT, "engine": EXIT_ENGINE, "bug in sglbench": EXIT_BUG}
"""What `sglbench` exits with (README "Exit codes"; also the `sglbench --help` epilog)."""


def one_line(text: str) -> str:
    """`text` with every non-printable character (a newline, a NUL, an escape, U+2028) written as its escape: a
    message, a check's line or a comment built from a file's or a server's content stays one line on the terminal."""
    return text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def first_line(error: BaseException) -> str:
    """The first line of an exception's message (a library's may run over many), or its class name when empty."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def exit_code_of(error: BaseException) -> int:
    """The CLI exit code for an escaped exception: the tree's class code, EXIT_BUG for anything else."""
    return type(error).exit_code if isinstance(error, SglbenchError) else EXIT_BUG


def report_error(error: BaseException, stream: TextIO) -> int:
    """Print an exception that reached the top (`error: <message>`, or its traceback and that it is a bug); return
    the exit code. The CLI and the Ray-job driver both end here."""
    if isinstance(error, SglbenchError):
        print(f"error: {error}", file=stream, flush=True)
    else:
        traceback.print_exception(type(error), error, error.__traceback__, file=stream)
        print(f"error: this is a bug in sglbench ({type(error).__name__} escaped); please report it with the "
              "traceback above", file=stream, flush=True)
    return exit_code_of(error)


__all__ = ["EXIT_BUG", "EXIT_CODES", "EXIT_ENGINE", "EXIT_ENVIRONMENT", "EXIT_USER_ERROR", "AuthError", "EngineFault",
           "EnvironmentFault", "PromptSourceError", "SglbenchError", "UserError", "exit_code_of", "first_line", "one_line",
           "report_error"]
