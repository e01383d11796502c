"""The one exception tree of sglbench: every error the tool raises on purpose derives from `SglbenchError`.

    SglbenchError                      exit code
    ├── UserError                      2   the input is wrong: names the file, the field and what was expected
    │   ├── SpecError                      an experiment YAML (file:line: field: message)
    │   ├── CheckpointError                a checkpoint directory, config.json, index or shard header
    │   ├── PromptSourceError              a prompt file, corpus or tokenizer a workload names
    │   ├── PreflightError                 what the experiment needs is not there (before any GPU is touched)
    │   ├── QueryError                     a results query (read-only SQL over the views)
    │   ├── ExperimentNotFound             no dataset for that experiment under the root
    │   └── AuthError                      a cluster needs credentials the user has not given
    ├── EnvironmentFault               3   the machine or cluster cannot do it (no room to place, disk full, lock held)
    │   ├── PlacementError
    │   ├── StoreError
    │   └── DatasetLocked
    └── EngineFault                    4   an engine server did not start or died (its decisive log line attached)
        └── ServerStartError

Anything else that escapes is a bug in sglbench: the CLI prints its traceback and says so (exit code 70).
A user error carries `file`, `field` and `expected` so the message can name all three.
"""

from __future__ import annotations

from typing import Optional

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
    """An engine server failed to start or died; `log_line` is the decisive line of its log, `log_tail` the end."""

    exit_code = EXIT_ENGINE

    def __init__(self, message: str, log_tail: str = "", exit_code: Optional[int] = None,
                 log_line: Optional[str] = None) -> None:
        super().__init__(message)
        self.log_tail = log_tail
        self.server_exit_code = exit_code
        self.log_line = log_line


__all__ = ["EXIT_BUG", "EXIT_ENGINE", "EXIT_ENVIRONMENT", "EXIT_USER_ERROR", "EngineFault", "EnvironmentFault",
           "SglbenchError", "UserError"]
