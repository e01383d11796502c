"""CPU test stand-ins, not SGLang kernels; never for measurement: an import-only torchvision (SGLang's text path never calls it)."""

from __future__ import annotations

# transformers 5.19 version.parse()s this; 0.28 pairs with torch 2.13.
__version__ = "0.28.0+sglbench.standin"

from torchvision import io, transforms  # noqa: E402,F401


class StandinError(RuntimeError):
    """Raised by every callable: this torchvision only satisfies module-level imports."""


def _raiser(name: str):
    def call(*args, **kwargs):
        raise StandinError(f"torchvision.{name} is an import-only CPU test stand-in (sglbench-cpu-standins); it cannot run")

    call.__name__ = name.rsplit(".", 1)[-1]
    call.__qualname__ = call.__name__
    return call
