"""CPU test stand-ins for SGLang 0.5.23 (sgl_kernel, torchvision, the has_amx hook): not SGLang kernels; never for measurement."""

SGLANG_VERSION = "0.5.23"
ENV_FLAG = "SGLBENCH_CPU_STANDINS"
