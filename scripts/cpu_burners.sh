#!/usr/bin/env bash
# Run tests beside CPU burners: the wall-clock tests say what machine load they tolerate (their module docstrings,
# "Machine load tolerated:"; the list is tests/unit/test_wall_clock_tests.py WALL_CLOCK_TESTS), and this is how to
# check it. Each burner is a busy loop on one core; they are stopped by their own PIDs when the tests end.
#
#   scripts/cpu_burners.sh                          # the demo-based tests beside two burners
#   scripts/cpu_burners.sh tests/integration/test_capacity_search.py
#   BURNERS=4 scripts/cpu_burners.sh -k saturated tests/integration/test_stop_when_saturated.py
#
# Arguments go to `python -m pytest -n 0 -q -p no:cacheprovider`; PYTHON picks the interpreter (default python).
# Do not run it on a machine others are measuring on: the burners take two cores for as long as the tests run.
set -u
BURNERS="${BURNERS:-2}"
PYTHON="${PYTHON:-python}"
if [ "$#" -eq 0 ]; then
    set -- tests/integration/test_demo.py tests/integration/test_recommend_demo.py
fi
pids=()
stop_burners() {
    for pid in "${pids[@]}"; do
        kill "$pid" 2>/dev/null
    done
    for pid in "${pids[@]}"; do
        wait "$pid" 2>/dev/null
    done
}
trap stop_burners EXIT INT TERM
for _ in $(seq "$BURNERS"); do
    "$PYTHON" -c 'while True: pass' &
    pids+=("$!")
done
echo "cpu_burners: ${#pids[@]} burners (pids ${pids[*]}) beside: pytest $*" >&2
start=$(date +%s)
"$PYTHON" -m pytest -n 0 -q -p no:cacheprovider "$@"
rc=$?
echo "cpu_burners: pytest exit $rc after $(( $(date +%s) - start )) s beside ${#pids[@]} burners" >&2
exit "$rc"
