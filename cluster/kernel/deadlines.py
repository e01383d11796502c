"""The declared deadlines of the waits whose length is not set by the experiment: default, override, what each bounds."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Mapping, Optional

from cluster.errors import UserError


@dataclass(frozen=True)
class Deadline:
    """How long one kind of wait may last before it is refused with an error that names what did not answer."""

    default_s: float
    env: str
    """The environment variable that overrides the default (seconds, a positive finite number)."""
    bounds: str
    """What waits under this deadline (docs/deadlines.md lists it)."""

    def seconds(self, environ: Optional[Mapping[str, str]] = None) -> float:
        """The deadline in force: the environment's override when set, else the default."""
        raw = (os.environ if environ is None else environ).get(self.env, "").strip()
        if not raw:
            return self.default_s
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value <= 0:
            raise UserError(f"{self.env}={raw!r} is not a deadline; expected a positive number of seconds "
                            f"(default {self.default_s:g})", field=self.env, expected="a positive number of seconds")
        return value


RAY_JOIN = Deadline(30.0, "SGLBENCH_RAY_JOIN_TIMEOUT_S",
                    "joining a running Ray cluster (`run --address`, `doctor --address`, RAY_ADDRESS): the TCP check "
                    "of the address, then Ray's own GCS connect tries, cut to fit")
TEMPLATE_RENDER = Deadline(5.0, "SGLBENCH_TEMPLATE_RENDER_TIMEOUT_S",
                           "one chat-template render (one prompt row): loops, macro calls and output are checked "
                           "against it")

JOB_API = Deadline(30.0, "SGLBENCH_JOB_API_TIMEOUT_S",
                   "each HTTP request to Ray's job API (`submit`: submit, status, logs, stop): connect, and each read")

DEADLINES: tuple[Deadline, ...] = (RAY_JOIN, TEMPLATE_RENDER, JOB_API)
"""Every declared deadline (docs/deadlines.md's first table)."""
