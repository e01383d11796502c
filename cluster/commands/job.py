"""The Ray job's entry point (`python -m cluster.distributed.driver EXPERIMENT.yaml` hands over here): run the
experiment on the current cluster, end the log with the tables `sglbench run` prints, then one JSON line."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional

from cluster.commands.results import print_run_summary
from cluster.config.loader import load_spec
from cluster.distributed.driver import init_ray, logical_gpus_for, run_experiment
from cluster.errors import SglbenchError, report_error


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cluster.distributed.driver",
                                 description="Run an sglbench experiment on the current Ray cluster.")
    ap.add_argument("experiment", help="experiment YAML")
    ap.add_argument("--address", default=None, help="Ray address (default: RAY_ADDRESS or a local cluster)")
    ap.add_argument("--output", default=None, help="dataset root (overrides the spec's output)")
    args = ap.parse_args(argv)
    try:
        spec = load_spec(args.experiment)
        init_ray(args.address, logical_gpus_for(spec))
        result = run_experiment(spec, base_dir=Path.cwd(), output_root=args.output)
    except Exception as e:  # noqa: BLE001 - the error tree maps to exit codes; anything else is reported as a bug
        return report_error(e, sys.stderr)
    counts = result.counts()
    # a Ray job's log (what `sglbench submit` follows) ends with the same tables `sglbench run` prints, then one
    # machine-readable line
    print(f"dataset: {result.dataset_root}/{spec.name}  runs: " + ", ".join(f"{k}={v}" for k, v in sorted(counts.items())),
          flush=True)
    try:
        print_run_summary(result.dataset_root, spec, counts)
    except SglbenchError as e:  # no run recorded, or the tables could not be read: said, and the JSON line follows
        report_error(e, sys.stderr)
    print(json.dumps({"dataset_root": result.dataset_root, "counts": counts, "skipped": result.skipped}), flush=True)
    return 0 if counts.get("failed", 0) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
