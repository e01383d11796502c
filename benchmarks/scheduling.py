"""Scheduling efficiency on the simulator: 4 TP=4 variants on 8 logical GPUs, `isolation: gpus` vs `isolation: node`.

Prints, per isolation mode, the makespan, the allocated-but-idle GPU share (definitions in
docs/benchmarks-scheduling.md) and whether every variant's server was started exactly once, then the ratios.
Starts one local Ray cluster (8 logical GPUs) for both experiments and shuts it down at the end.

    python benchmarks/scheduling.py [--time-scale 1.0] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from cluster.plan.runs import expand_variants, make_plan
from cluster.plan.schedule import (GpuTimeAccount, HeldReservation, Interval, gpu_time_account,  # noqa: E402
                              peak_reserved_gpus, span_of)
from cluster.config.experiment import ExperimentSpec
from cluster.config.loader import parse_spec_text  # noqa: E402

TOTAL_GPUS = 8
IDLE_GOAL_SHARE = 0.05

SPEC = """
version: 1
name: sched-{isolation}
model: {{path: sim://qwen3.5-397b-a17b-nvfp4, engine: sim, tp: 4}}
server: {{args: {{max-running-requests: 16, kv-cache-dtype: bf16, attention-backend: flashinfer}}}}
sim: {{time_scale: {time_scale}}}
variants:
  - {{name: baseline, baseline: true}}
  - {{name: nextn-1, speculative: {{algorithm: NEXTN, num_steps: 1}}}}
  - {{name: nextn-2, speculative: {{algorithm: NEXTN, num_steps: 2}}}}
  - {{name: nextn-3, speculative: {{algorithm: NEXTN, num_steps: 3}}}}
workloads:
  - {{name: chat-128-64, input_tokens: 128, output_tokens: 64, num_requests: 24}}
load: {{concurrency: [2, 4], request_rate: [4]}}
warmup_requests: 1
isolation: {isolation}
seed: 11
max_client_lag_ms: 1000  # this benchmark is about placement; the 2-core machine is shared
output: {output}
"""


class TimedDriver:
    """Factory for a Driver whose progress events record, per variant, when its placement group was requested
    (placing), became ready (starting), when teardown began (its last run recorded) and when the group was removed
    (stopped); the driver itself records only the server's start and stop."""

    @staticmethod
    def make(spec: ExperimentSpec, base_dir: Path, output_root: str) -> tuple[Any, dict[str, dict[str, float]]]:
        from cluster.distributed.driver import Driver
        from cluster.distributed.progress import PointFinished, ProgressEvent, ServerState

        timing: dict[str, dict[str, float]] = {}
        marks = {"placing": "requested_unix_s", "starting": "ready_unix_s", "stopped": "released_unix_s"}

        def on_event(e: ProgressEvent) -> None:
            if isinstance(e, ServerState) and e.state in marks:
                timing.setdefault(e.variant, {})[marks[e.state]] = time.time()
            elif isinstance(e, PointFinished):
                timing.setdefault(e.plan.variant.name, {})["teardown_unix_s"] = time.time()

        drv = Driver(spec, base_dir, output_root, lambda s: print("   ", s, flush=True), lambda p, s: None,
                     on_event=on_event)
        drv.live = False  # the events only time the schedule: load actors batch as without a watcher
        return drv, timing


def run_one(isolation: str, time_scale: float, out_dir: Path) -> dict[str, Any]:
    """Run the experiment once under `isolation`; return its schedule facts and checks."""
    import pyarrow.parquet as pq

    from cluster.distributed.cluster_state import remote_preflight
    from cluster.plan.schedule import reservation

    spec = parse_spec_text(SPEC.format(isolation=isolation, time_scale=time_scale, output=out_dir))
    drv, timing = TimedDriver.make(spec, out_dir, str(out_dir))
    t0 = time.time()
    drv.preflight = remote_preflight(spec, out_dir)
    result = drv.run()
    wall_s = time.time() - t0

    tps = {v.name: v.tp for v in expand_variants(spec)}
    held: list[HeldReservation] = []
    problems: list[str] = []
    for v in sorted(timing):
        t, info = timing[v], result.servers.get(v)
        if "ready_unix_s" not in t:
            problems.append(f"{v}: placement group never became ready")
            continue
        tp = tps[v]
        r = reservation(v, tp, spec.isolation, TOTAL_GPUS)
        serving = None
        if info is not None:
            serving = Interval(info["started_unix_s"], max(info["started_unix_s"], t["teardown_unix_s"]))
        held.append(HeldReservation(v, r.gpus, tp, Interval(t["ready_unix_s"], t["released_unix_s"]), serving))
    span = span_of([Interval(t["requested_unix_s"], t.get("released_unix_s", t["requested_unix_s"]))
                    for t in timing.values()])
    account = gpu_time_account(held, TOTAL_GPUS, span)

    # each variant's server started once: one entry per variant, and all its runs carry that server's pid
    runs = pq.read_table(Path(result.dataset_root) / spec.name / "runs").to_pandas()
    planned = {v: sum(1 for p in make_plan(spec) if p.variant.name == v) for v in timing}
    starts_ok = set(result.servers) == set(timing) and len(timing) == 4
    pids: dict[str, list[Any]] = {}
    for row in runs.itertuples():
        pids.setdefault(str(row.variant), []).append(json.loads(row.provenance_json).get("server_pid"))
    for v, info in result.servers.items():
        got = set(pids.get(v, []))
        if info.get("server_pid") is None or len(pids.get(v, [])) != planned[v] or got != {info["server_pid"]}:
            starts_ok = False
            problems.append(f"{v}: runs={len(pids.get(v, []))}/{planned[v]} server pids={sorted(map(str, got))} "
                            f"(started {info.get('server_pid')})")
    startup_gpu_s = sum(tps[v] * min(info["startup_s"], span.length_s) for v, info in result.servers.items())
    return {
        "isolation": isolation, "wall_s": wall_s, "span": span, "account": account, "held": held,
        "peak_gpus": peak_reserved_gpus(held), "statuses": result.counts(), "starts_ok": starts_ok,
        "problems": problems, "startup_gpu_s": startup_gpu_s,
        "overlap": _max_concurrent_servers(held),
    }


def _max_concurrent_servers(held: list[HeldReservation]) -> int:
    ivs = [h.serving for h in held if h.serving is not None]
    return max((sum(1 for j in ivs if j.start_s <= i.start_s < j.end_s) for i in ivs), default=0)


def _gap_per_start_s(held: list[HeldReservation]) -> float:
    """Mean seconds a reservation held its server's GPUs without a running server (before launch + teardown)."""
    gaps = [h.reserved.length_s - (h.serving.overlap_s(h.reserved) if h.serving else 0.0) for h in held]
    return sum(gaps) / len(gaps) if gaps else 0.0


def _row(r: dict[str, Any]) -> list[str]:
    a: GpuTimeAccount = r["account"]
    return [
        r["isolation"], f"{a.span_s:.1f}", f"{r['wall_s']:.1f}", str(r["overlap"]), str(r["peak_gpus"]),
        f"{a.share(a.reserved_gpu_s):.1%}", f"{a.share(a.serving_gpu_s):.1%}", f"{a.share_idle():.1%}",
        f"{a.share(a.idle_spare_gpu_s):.1%}", f"{a.share(a.idle_gap_gpu_s):.1%}",
        f"{a.share(r['startup_gpu_s']):.1%}", f"{_gap_per_start_s(r['held']):.2f}",
        "yes" if r["starts_ok"] else "NO", json.dumps(r["statuses"]),
    ]


def print_variants(r: dict[str, Any]) -> None:
    """Per variant: when its reservation began (from the span start), how long it waited for the server to
    launch, served, and took to tear down after its last run."""
    t0 = r["span"].start_s
    print(f"  {r['isolation']}: variant  ready_at_s  held_s  before_launch_s  serving_s  teardown_s  gpus/tp")
    for h in r["held"]:
        sv = h.serving or Interval(h.reserved.end_s, h.reserved.end_s)
        print(f"  {'':>{len(r['isolation'])}}  {h.variant:>7}  {h.reserved.start_s - t0:10.1f}  "
              f"{h.reserved.length_s:6.1f}  {sv.start_s - h.reserved.start_s:15.2f}  {sv.length_s:9.1f}  "
              f"{h.reserved.end_s - sv.end_s:10.2f}  {h.gpus}/{h.tp}")


def print_table(results: list[dict[str, Any]]) -> None:
    head = ["isolation", "makespan_s", "wall_s", "servers_at_once", "peak_gpus", "reserved", "serving",
            "idle", "idle_spare", "idle_gap", "startup", "gap_per_start_s", "started_once", "runs"]
    rows = [head] + [_row(r) for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    for row in rows:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths)))
    print("(shares are of total GPU-seconds = 8 GPUs x makespan; startup = launch-to-healthy, part of serving)")


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-scale", type=float, default=1.0, help="simulator time scale (1.0 = real time)")
    ap.add_argument("--keep", default=None, help="keep the datasets under this directory (default: a temp dir)")
    args = ap.parse_args(argv)

    import ray

    ray.init(address="local", num_gpus=TOTAL_GPUS, num_cpus=2, include_dashboard=False, log_to_driver=False,
             object_store_memory=100 * 1024**2, _node_ip_address="127.0.0.1")
    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="sglbench-sched-"))
    results: list[dict[str, Any]] = []
    try:
        for isolation in ("gpus", "node"):
            print(f"== isolation: {isolation}", flush=True)
            results.append(run_one(isolation, args.time_scale, tmp / isolation))
    finally:
        ray.shutdown()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)

    print()
    for r in results:
        print_variants(r)
    print()
    print_table(results)
    gpus, node = results
    ratio = gpus["account"].span_s / node["account"].span_s
    idle = gpus["account"].share_idle()
    print(f"makespan gpus/node = {ratio:.2f} (node-exclusive takes {1 / ratio:.2f}x as long); "
          f"idle share under isolation=gpus = {idle:.1%} (goal <= {IDLE_GOAL_SHARE:.0%}: "
          f"{'met' if idle <= IDLE_GOAL_SHARE else 'NOT met'})")
    for r in results:
        for p in r["problems"]:
            print(f"problem [{r['isolation']}]: {p}")
    ok = all(r["starts_ok"] for r in results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
