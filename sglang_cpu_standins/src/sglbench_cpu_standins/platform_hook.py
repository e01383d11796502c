"""CPU test stand-ins, not SGLang kernels; never for measurement: makes get_platform().has_amx true on a CUDA-less CPU after sglang.srt.runtime_context loads."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from types import ModuleType
from typing import Any, Sequence

TARGET = "sglang.srt.runtime_context"
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


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader) -> None:
        self._inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        override_has_amx(module)


class _Finder(importlib.abc.MetaPathFinder):
    """Wraps the real loader of exactly one module; every other import is left to the normal finders."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != TARGET:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(spec.loader)
                return spec
        return None


def install() -> None:
    """Put the finder first on sys.meta_path (or act at once if the module is already loaded)."""
    global _installed
    if _installed:
        return
    _installed = True
    if TARGET in sys.modules:
        override_has_amx(sys.modules[TARGET])
        return
    sys.meta_path.insert(0, _Finder())
