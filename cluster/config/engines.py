"""The engines an experiment may name, and how each is started on the node (the experiment's `engines:` section)."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import model_validator

from cluster.config.fields import FieldProblem, FrozenModel, LocalPath
from cluster.config.locations import check_local_path

ENGINES = ("sglang", "sim", "vllm")
EngineName = Literal["sglang", "sim", "vllm"]
VERSION_IS_SGLBENCHS: tuple[EngineName, ...] = ("sim",)
"""Engines that are part of sglbench and report its version: an `engines.<name>.version` for them is never read."""


class EngineLauncher(FrozenModel):
    """How to start one engine on the node: its own interpreter or a full launcher command."""

    python: Optional[LocalPath] = None
    """Interpreter path for the engine (e.g. SGLang's venv); `python -m <engine module>` is run with it."""
    launcher: Optional[list[str]] = None
    """A full command that replaces `python -m <module>` (e.g. ["sglang", "serve"]); server args follow it."""
    version: Optional[str] = None
    """Engine version when it cannot be read from the installed package (a remote image)."""

    @model_validator(mode="after")
    def _one_way(self) -> "EngineLauncher":
        if self.python and self.launcher:
            raise FieldProblem(("launcher",), "give either 'python' or 'launcher', not both")
        if self.launcher is not None and not self.launcher:
            raise FieldProblem(("launcher",), "'launcher' must be a non-empty list of argv words")
        if self.launcher:
            try:
                check_local_path(self.launcher[0], "launcher program")
            except ValueError as e:
                raise FieldProblem(("launcher", 0), str(e)) from None
        return self
