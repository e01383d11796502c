"""CPU test stand-ins, not SGLang kernels; never for measurement: torchvision.io names imported at module level by sglang/transformers."""

from __future__ import annotations

import enum


class ImageReadMode(enum.Enum):
    UNCHANGED = 0
    GRAY = 1
    GRAY_ALPHA = 2
    RGB = 3
    RGB_ALPHA = 4
    RGBA = 4


def decode_image(*args, **kwargs):
    from torchvision import _raiser

    return _raiser("io.decode_image")(*args, **kwargs)
