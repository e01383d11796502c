#!/usr/bin/env bash
# GPU check for a bare CUDA machine (torch + Triton only, no SGLang, no network); finishes in under 5 minutes.
# Includes NVML telemetry under a GEMM load (energy counter, power, SM clock, throttle reasons) when nvidia-ml-py is
# installed (the `gpu` extra); the same check as a test: pytest -m gpu tests/gpu/test_gpu_telemetry.py
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec timeout 290 "${PYTHON:-python3}" "$here/gpu_check.py" "$@"
