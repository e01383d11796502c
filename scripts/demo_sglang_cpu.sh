#!/usr/bin/env bash
# The second demo: baseline vs NEXTN-1/2/3 on REAL SGLang 0.5.23 on the CPU (CPU numbers with stand-in kernels,
# never GPU numbers). Sets up the tier's venv (idempotent), builds the tiny MiMo model, runs
# experiments/demo-sglang-cpu.yaml through `sglbench run` on local Ray and prints the comparison.
# Needs the sglbench package installed in the current Python (`pip install -e .`). Usage:
#   bash scripts/demo_sglang_cpu.sh [OUTPUT_DIR]        # default: results
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-results}"
venv=.ci/venvs/sglang
model_root=/tmp/sglbench-demo/tiny-mimo          # experiments/demo-sglang-cpu.yaml's model.path is <this>/mix
start=$(date +%s)
command -v sglbench > /dev/null || { echo "sglbench is not installed here: pip install -e . first" >&2; exit 2; }
bash scripts/setup_sglang_venv.sh "$venv"
echo "[demo] SGLang tier ready after $(( $(date +%s) - start )) s"
if [ ! -f "$model_root/mix/model.safetensors" ]; then
  "$venv/bin/python" tests/sglang_cpu/build_mimo_model.py "$model_root" --variants mix --seed 0
fi
echo "[demo] tiny MiMo model at $model_root/mix after $(( $(date +%s) - start )) s"
sglbench run experiments/demo-sglang-cpu.yaml --output "$out" --no-progress
echo "[demo] done after $(( $(date +%s) - start )) s; CPU numbers with stand-in kernels, never GPU numbers"
