"""CPU test stand-ins, not SGLang kernels; never for measurement: torchvision.transforms.functional names imported at module level."""

from __future__ import annotations

from torchvision.transforms import InterpolationMode  # noqa: F401


def pil_to_tensor(*args, **kwargs):
    from torchvision import _raiser

    return _raiser("transforms.functional.pil_to_tensor")(*args, **kwargs)
