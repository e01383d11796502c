#!/usr/bin/env bash
# The boundary fuzz targets of tests/fuzz, run longer than CI runs them: SGLBENCH_FUZZ_EXAMPLES examples per target
# (default 5000 here, 150 in CI). Usage: bash scripts/fuzz.sh [pytest args], e.g. -k prompt_files.
set -euo pipefail
cd "$(dirname "$0")/.."
export SGLBENCH_FUZZ_EXAMPLES="${SGLBENCH_FUZZ_EXAMPLES:-5000}"
exec python -m pytest -n 0 -p no:cacheprovider tests/fuzz "$@"
