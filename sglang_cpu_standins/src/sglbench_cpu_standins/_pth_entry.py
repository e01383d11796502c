"""CPU test stand-ins, not SGLang kernels; never for measurement: the .pth entry that installs the has_amx hook only when asked to."""

from __future__ import annotations

import os

if os.environ.get("SGLBENCH_CPU_STANDINS") == "1":
    from sglbench_cpu_standins import platform_hook

    platform_hook.install()
