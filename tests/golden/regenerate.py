"""!!! REWRITES THE GOLDEN FILES: tests/golden/expected/* (and, with --rerun, the stored dataset tests/golden/data/). !!!

    python tests/golden/regenerate.py            # re-record expected/* from the stored dataset
    python tests/golden/regenerate.py --rerun    # first run golden-sim.yaml on the simulator again (~2 min, Ray)

tests/golden/test_golden.py holds that the results commands (`results show`, `compare` (--ci, --by), `recommend`,
`report` and the tables `sglbench run` ends with) give, on the stored dataset, exactly the outputs recorded here at
base a8528d0. Running this script makes that test pass by DEFINITION: it accepts whatever the code prints now as
the truth. Run it only when an output is MEANT to change (a new column, a reworded line, a fixed figure), say in the
commit message which outputs changed and why, and review `git diff tests/golden/expected` line by line first.
NEVER run it to make a refactor's failing golden test pass: that failure is the test doing its job (issue 36:
moves with no behaviour change).

--rerun replaces the dataset itself (new timings: every figure changes); the expected files are then re-recorded
from it. Do that only when the dataset's format changes on purpose (a RECORD_SCHEMA_VERSION bump).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.golden.golden_outputs import DATA, EXPECTED, EXPERIMENT, HERE, dataset_copy, render_all  # noqa: E402


def rerun() -> None:
    """Run golden-sim.yaml on the simulator (local Ray) into a temporary root and store its experiment as DATA."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "cluster.cli", "run", str(HERE / "golden-sim.yaml"), "--output", tmp,
                        "--no-progress"], cwd=REPO, check=True, timeout=900)
        shutil.rmtree(DATA, ignore_errors=True)
        shutil.copytree(Path(tmp) / EXPERIMENT, DATA / EXPERIMENT, ignore=shutil.ignore_patterns("_staging"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rerun", action="store_true", help="run the experiment on the simulator again first")
    args = ap.parse_args()
    if args.rerun:
        rerun()
    with tempfile.TemporaryDirectory() as tmp, dataset_copy(Path(tmp)):
        outputs = render_all()
    shutil.rmtree(EXPECTED, ignore_errors=True)
    EXPECTED.mkdir()
    for name, text in outputs.items():
        (EXPECTED / name).write_text(text)
    print(f"re-recorded {len(outputs)} files in {EXPECTED}: review `git diff {EXPECTED.relative_to(REPO)}`")


if __name__ == "__main__":
    main()
