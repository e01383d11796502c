"""What a deployment needs installed beside the engine, as `sglbench doctor` checks it: SGLang's gateway executable
(`smg`, its version) and, for prefill/decode, the Python module SGLang 0.5.23 imports for the transfer backend."""

from __future__ import annotations

import re
from typing import Optional

GATEWAY_VERSION = "1.13.0"
"""The gateway release whose CLI, paths and headers sglbench was checked against (docs/deployments-facts.md §1)."""
GATEWAY_INSTALL = f"<engine venv>/bin/python -m pip install --no-deps smg=={GATEWAY_VERSION}"
"""How to install it (as scripts/setup_sglang_venv.sh does): --no-deps keeps protobuf out of the engine's venv."""

TRANSFER_MODULES: dict[str, tuple[str, str]] = {
    "mooncake": ("mooncake.engine", "mooncake-transfer-engine (or mooncake-transfer-engine-non-cuda on a CPU node)"),
    "nixl": ("nixl._api", "nixl"),
    "mori": ("mori.io", "mori"),
}
"""Transfer backend → (the module SGLang 0.5.23 imports for it, the package that provides it). The imports:
mooncake at distributed/device_communicators/mooncake_transfer_engine.py:120, nixl at disaggregation/nixl/conn.py:543,
mori at disaggregation/mori/conn.py:18 (its conn module fails to import without it)."""

_VERSION = re.compile(r"\bsmg\s+v?([0-9][0-9A-Za-z.+-]*)")


def gateway_version(stdout: str) -> Optional[str]:
    """The version `smg --version` printed (`smg 1.13.0`), or None when it printed something else."""
    m = _VERSION.search(stdout)
    return m.group(1) if m else None
