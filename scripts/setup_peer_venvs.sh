#!/usr/bin/env bash
# Builds the CPU-only venvs of two peer benchmark clients, NVIDIA AIPerf and GuideLLM (benchmarks/peers.py), idempotently.
# Usage: scripts/setup_peer_venvs.sh [aiperf|guidellm|all] [VENV_ROOT]   (default: all, <repo>/.ci/venvs)
# SGLang's client venv comes from scripts/setup_sglang_client_venv.sh, vLLM's from scripts/setup_vllm_venv.sh.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WHICH="${1:-all}"
VENV_ROOT="${2:-$ROOT/.ci/venvs}"
PYTHON="${PYTHON:-python3}"
AIPERF_VERSION="0.13.0"
GUIDELLM_VERSION="0.8.1"
# GuideLLM requires torch (its data loaders import torch.utils.data); AIPerf does not (only its optuna/botorch
# extras). The CPU build is installed first so GuideLLM's bare `torch` requirement is already met and pip pulls no
# CUDA wheel.
TORCH_VERSION="2.13.0+cpu"

case "$WHICH" in
    aiperf) peers=(aiperf) ;;
    guidellm) peers=(guidellm) ;;
    all) peers=(aiperf guidellm) ;;
    *) echo "usage: $0 [aiperf|guidellm|all] [VENV_ROOT]" >&2; exit 2 ;;
esac

# pip's notes about file:// index locations are expected: keep the log readable.
quiet() {
    "$@" 2>&1 | { grep -v -e "is ignored: it is neither" || true; }
    return "${PIPESTATUS[0]}"
}

# No CUDA packages: nvidia-ml-py (NVML's Python binding, which AIPerf imports for GPU telemetry) is pure Python.
check_no_cuda() {
    "$1/bin/python" - <<'PY'
import importlib.metadata as m
bad = sorted(d.metadata["Name"] for d in m.distributions()
             if d.metadata["Name"].lower().replace("_", "-").startswith("nvidia-")
             and d.metadata["Name"].lower().replace("_", "-") != "nvidia-ml-py")
assert not bad, f"CUDA packages pulled into the venv: {bad}"
try:
    import torch
except ImportError:
    pass
else:
    assert torch.version.cuda is None, f"expected a CPU torch build, got CUDA {torch.version.cuda}"
PY
}

build() {
    local peer="$1" version="$2" venv="$VENV_ROOT/$1"
    local stamp="$venv/.sglbench-peer-$1-$2-ok"
    if [[ -f "$stamp" ]]; then
        echo "$peer venv ready: $venv"
        return 0
    fi
    local start_s
    start_s=$(date +%s)
    "$PYTHON" -m venv --clear "$venv"
    local pip=("$venv/bin/python" -m pip install --quiet --no-input)
    # SGLBENCH_PIP_NO_COMPILE=1 (set by .ci/run): no .pyc at install; the first import writes the ones used
    if [[ "${SGLBENCH_PIP_NO_COMPILE:-}" == 1 ]]; then pip+=(--no-compile); fi
    quiet "${pip[@]}" --upgrade pip
    case "$peer" in
        aiperf)
            quiet "${pip[@]}" "aiperf==$version"
            "$venv/bin/aiperf" profile --help > /dev/null
            ;;
        guidellm)
            quiet "${pip[@]}" "torch==$TORCH_VERSION"
            quiet "${pip[@]}" "guidellm==$version" "torch==$TORCH_VERSION"
            # torchvision/torchaudio/torchcodec from PyPI are CUDA builds; none is wanted (GuideLLM's audio extra only).
            "$venv/bin/python" -m pip uninstall --quiet --yes torchvision torchaudio torchcodec > /dev/null 2>&1 || true
            HF_HUB_OFFLINE=1 "$venv/bin/guidellm" run --help > /dev/null
            ;;
    esac
    check_no_cuda "$venv"
    local installed
    installed="$("$venv/bin/python" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$peer")"
    if [[ "$installed" != "$version" ]]; then
        echo "FATAL: $venv has $peer $installed, expected $version" >&2
        exit 1
    fi
    "$venv/bin/python" -m pip freeze --all > "$venv/sglbench-freeze.txt" 2> /dev/null
    touch "$stamp"
    echo "$peer $version venv built in $(( $(date +%s) - start_s )) s, $(du -sh "$venv" | cut -f1): $venv"
}

mkdir -p "$VENV_ROOT"
for p in "${peers[@]}"; do
    case "$p" in
        aiperf) build aiperf "$AIPERF_VERSION" ;;
        guidellm) build guidellm "$GUIDELLM_VERSION" ;;
    esac
done
