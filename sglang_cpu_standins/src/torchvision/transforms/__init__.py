"""CPU test stand-ins, not SGLang kernels; never for measurement: torchvision.transforms with InterpolationMode only."""

from __future__ import annotations

import enum


class InterpolationMode(enum.Enum):
    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


from torchvision.transforms import functional, v2  # noqa: E402,F401
