"""CPU test stand-ins, not SGLang kernels; never for measurement: on a CUDA-less CPU, has_amx true and mooncake's sender off the CUDA-only host-index path."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from types import ModuleType
from typing import Any, Callable, Sequence

TARGET = "sglang.srt.runtime_context"
MOONCAKE_CONN = "sglang.srt.disaggregation.mooncake.conn"
_installed = False


def _no_cuda() -> bool:
    """True only where torch is a CPU build or sees no CUDA device: the hook must never act on a GPU node."""
    import torch

    return torch.version.cuda is None or not torch.cuda.is_available()


def override_has_amx(module: ModuleType) -> bool:
    """Install has_amx=True through SGLang's own override seam; returns whether it acted."""
    if os.environ.get("SGLBENCH_CPU_STANDINS") != "1" or not _no_cuda():
        return False
    module.override_platform(has_amx=True).install()
    return True


def disable_host_tensor_indices(module: ModuleType) -> bool:
    """Make a mooncake prefill server send KV page indices built on the CPU; returns whether it acted.

    SGLang 0.5.23 sets `MooncakeKVSender.supports_host_tensor_indices = True` (disaggregation/mooncake/conn.py:3312).
    With it, `_send_kv_chunk` (disaggregation/prefill.py:1746-1761) copies the page indices into a
    `pin_memory=True` tensor and records a `torch.cuda.Event()`: on a CPU build the first prefill request fails with
    "pin_memory=True requires a CUDA or other accelerator backend" and the prefill server dies. False takes the
    same function's other branch, `kv_to_page_indices` (prefill.py:1763), which every sender without the
    attribute uses. Recheck on every SGLang bump (docs/sglang-cpu-tier.md, "Prefill/decode").
    """
    if os.environ.get("SGLBENCH_CPU_STANDINS") != "1" or not _no_cuda():
        return False
    module.MooncakeKVSender.supports_host_tensor_indices = False
    return True


PATCHES: dict[str, Callable[[ModuleType], bool]] = {
    TARGET: override_has_amx,
    MOONCAKE_CONN: disable_host_tensor_indices,
}
"""Each wrapped module and what runs right after it executes."""


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader, patch: Callable[[ModuleType], bool]) -> None:
        self._inner = inner
        self._patch = patch

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        self._patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    """Wraps the real loader of exactly the modules in PATCHES; every other import is left to the normal finders."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        patch = PATCHES.get(fullname)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(spec.loader, patch)
                return spec
        return None


def install() -> None:
    """Put the finder first on sys.meta_path (and patch at once any target module already loaded)."""
    global _installed
    if _installed:
        return
    _installed = True
    for name, patch in PATCHES.items():
        if name in sys.modules:
            patch(sys.modules[name])
    sys.meta_path.insert(0, _Finder())
