"""CPU test stand-ins, not SGLang kernels; never for measurement: an empty torchvision.transforms.v2.functional (imported as a module only)."""
