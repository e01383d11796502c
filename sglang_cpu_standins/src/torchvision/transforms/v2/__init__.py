"""CPU test stand-ins, not SGLang kernels; never for measurement: an empty torchvision.transforms.v2."""

from torchvision.transforms.v2 import functional  # noqa: F401
