#!/usr/bin/env bash
# Builds a CPU-only venv that runs SGLang 0.5.23's benchmark client (`python -m sglang.benchmark.serving`), idempotently.
# When the SGLang parser venv (.ci/venvs/sglang, scripts/setup_sglang_venv.sh) exists, this venv overlays it
# (a .pth file puts its site-packages on sys.path) and only adds what the benchmark client imports on top;
# otherwise it builds the parser venv first.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV_DIR="${1:-$ROOT/.ci/venvs/sglang-client}"
BASE_DIR="${SGLANG_BASE_VENV:-$ROOT/.ci/venvs/sglang}"
PYTHON="${PYTHON:-python3}"
STAMP="$VENV_DIR/.sglbench-sglang-client-0.5.23-ok"

if [[ -f "$STAMP" ]]; then
    echo "sglang client venv ready: $VENV_DIR"
    exit 0
fi
if [[ ! -f "$BASE_DIR/.sglbench-sglang-0.5.23-server-ok" ]]; then
    bash "$ROOT/scripts/setup_sglang_venv.sh" "$BASE_DIR"
fi

start_s=$(date +%s)
"$PYTHON" -m venv "$VENV_DIR"
base_site="$("$BASE_DIR/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
own_site="$("$VENV_DIR/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$base_site" > "$own_site/sglang-base.pth"
# sglang.benchmark.datasets imports HF `datasets` at module load (mmmu, longbench); random-ids never downloads.
# sglang.benchmark.serving also imports SGLang's multimodal configs, which import torchvision at module load.
# PyPI has no CPU torchvision build; the CUDA wheel imports on CPU torch once its fake-kernel registrations are
# made tolerant (benchmarks/client_capacity.py --sglang-entry does that before running SGLang's module).
"$VENV_DIR/bin/python" -m pip install --quiet --no-input datasets 2>&1 | { grep -v -e "^sglang .* requires" -e "dependency resolver" -e "is ignored" || true; }
"$VENV_DIR/bin/python" -m pip install --quiet --no-input --no-deps "torchvision==0.28.0" 2>&1 | { grep -v -e "is ignored" || true; }
HF_HUB_OFFLINE=1 "$VENV_DIR/bin/python" "$ROOT/benchmarks/client_capacity.py" --sglang-entry --help > /dev/null
echo "sglang.benchmark.serving runs"
touch "$STAMP"
echo "sglang client venv built in $(( $(date +%s) - start_s )) s, $(du -sh "$VENV_DIR" | cut -f1): $VENV_DIR"
