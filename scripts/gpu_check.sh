#!/usr/bin/env bash
# GPU check for a bare CUDA machine (torch + Triton only, no SGLang, no network); finishes in under 5 minutes.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec timeout 290 "${PYTHON:-python3}" "$here/gpu_check.py" "$@"
