"""What `sglbench validate` costs on a large trace with four variants, before and after parsing each file once.

Usage: python benchmarks/validate_trace.py [--rows 10000000] [--before d2321c6] [--keep DIR]
Writes a CSV trace of `--rows` rows (timestamp_s, input_tokens, output_tokens; ~20 bytes a row, so 10⁷ rows stay
under the 256 MiB input bound) and an experiment on the simulator with four variants (baseline, NEXTN 1/2/3) that
replays it, both in a temp dir that is removed afterwards, never in the repository. Then runs `validate` on it
with the tree at `--before` (exported with `git archive` into the temp dir: no worktree is added) and with this
tree, one after the other in fresh interpreters, and prints the wall times side by side with their ratio. The
times include the interpreter's start and the spec's checks, so the ratio is the whole command's.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

EXPERIMENT = """\
version: 1
name: validate-trace
model: {{path: "sim://qwen3.5-397b-a17b-nvfp4", engine: sim, tp: 8}}
server: {{args: {{max-running-requests: 64, kv-cache-dtype: bf16, attention-backend: flashinfer}}}}
variants:
  - {{name: baseline, baseline: true}}
  - {{name: nextn, speculative: {{algorithm: NEXTN, num_steps: [1, 2, 3]}}}}
workloads:
  - name: replay
    input_tokens: dataset
    output_tokens: dataset
    num_requests: 1000
    prompts: {{source: trace, path: {trace}}}
load: {{request_rate: [10], arrival: trace}}
output: {out}
"""


def write_trace(path: Path, rows: int) -> int:
    """A recorded-looking trace: times 10 ms apart with a lull every 64 rows, lengths cycling; returns its bytes."""
    chunk = 100_000
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write("timestamp_s,input_tokens,output_tokens\n")
        for start in range(0, rows, chunk):
            f.write("".join(f"{i * 0.01 + (i // 64) * 1.5:.2f},{64 + i % 397},{16 + i % 113}\n"
                            for i in range(start, min(rows, start + chunk))))
    return path.stat().st_size


def export_tree(commit: str, into: Path) -> Path:
    """The package at `commit`, as files (git archive | tar), for running the old code path beside this one."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, "cluster"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def time_validate(tree: Path, experiment: Path) -> tuple[float, float]:
    """(wall s, CPU s) of one `validate` in a fresh interpreter: the CPU time (user + system of the child) is the
    figure that holds on a shared machine, where the wall time also counts the waits for a core."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", "from cluster.cli import main; main()", "validate", str(experiment)],
                          cwd=experiment.parent, env=env, capture_output=True, text=True, check=False)
    took = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"validate failed with the tree at {tree} (exit {done.returncode}):\n{done.stdout}"
                         f"{done.stderr}")
    return took, (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--before", default="d2321c6", help="commit whose validate parses the trace once per variant")
    ap.add_argument("--keep", type=Path, default=None, help="work in this directory and keep it (default: a temp dir)")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="sglbench-validate-trace-"))
    try:
        work.mkdir(parents=True, exist_ok=True)
        trace = work / "trace.csv"
        t0 = time.perf_counter()
        size = write_trace(trace, args.rows)
        print(f"trace: {args.rows:,} rows, {size / 2**20:.0f} MiB, written in {time.perf_counter() - t0:.1f} s",
              flush=True)
        experiment = work / "experiment.yaml"
        experiment.write_text(EXPERIMENT.format(trace=trace, out=work / "results"))
        old = export_tree(args.before, work / "before")
        before = time_validate(old, experiment)
        print(f"before ({args.before}): {before[0]:.1f} s wall, {before[1]:.1f} s CPU", flush=True)
        after = time_validate(REPO, experiment)
        print(f"after (this tree): {after[0]:.1f} s wall, {after[1]:.1f} s CPU", flush=True)
        print("\n| rows | variants | | before | after | before / after |\n|---:|---:|---|---:|---:|---:|")
        for i, what in enumerate(("wall s", "CPU s")):
            print(f"| {args.rows:,} | 4 | {what} | {before[i]:.1f} | {after[i]:.1f} | {before[i] / after[i]:.2f}x |")
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
