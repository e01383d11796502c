"""The workload audit's false-alarm rate on correct runs, and its detection rate on collapsed ones, by Monte Carlo.

Usage: python benchmarks/workload_audit.py [--runs 2000] [--seed 0]
Three selections, each sent correctly `--runs` times with fresh seeds as the prompt builders send them: a file of
60 rows in three categories of unequal shares and varied lengths sampled by cycled permutations (n = 45 and
n = 150); seeded random ids with a lognormal length distribution (n = 200, drawn as cluster/loadgen/lengths.py
draws); a small generated space (M = 500 prompts, n = 200 draws with replacement). Then the same runs with half
their requests replaced by one prompt, and with every length cut to 80 %. Prints the share flagged per case; the
audit promises at most AUDIT_ALPHA (0.1 %) of correct runs flagged.
"""

from __future__ import annotations

import argparse
import math
from typing import Any, Callable, Optional

import numpy as np
import pyarrow as pa

from cluster.analysis.workload_audit import AUDIT_ALPHA, audit_workload
from cluster.kernel.planned_workload import category_shares, length_quantiles
from cluster.kernel.planned_workload import PlannedWorkload
from cluster.kernel.records import REQUEST_BATCH_SCHEMA
from cluster.loadgen.lengths import draw_lengths
from cluster.loadgen.selection import AUDIT_STREAM, POPULATION_DRAWS
from cluster.config.workload import LengthDist

Sent = tuple[list[int], list[int], list[Optional[str]]]


def _table(sent: Sent) -> pa.Table:
    fps, lengths, cats = sent
    n = len(fps)
    cols: dict[str, list[Any]] = {f.name: [None] * n for f in REQUEST_BATCH_SCHEMA}
    cols.update(request_index=list(range(n)), intended_send_ns=[0] * n, actual_send_ns=[0] * n, num_chunks=[1] * n,
                client_tokens=[1] * n, prompt_tokens_sent=lengths, max_tokens=[4] * n, category=cats,
                prompt_fingerprint=fps)
    return pa.Table.from_pydict(cols, schema=REQUEST_BATCH_SCHEMA)


def _file_case(n: int) -> tuple[PlannedWorkload, Callable[[np.random.Generator], Sent]]:
    rng = np.random.default_rng(12345)
    rows = 60
    lengths = rng.integers(5, 400, size=rows).tolist()
    cats: list[Optional[str]] = [("code", "chat", "math")[i % 5 % 3] for i in range(rows)]  # shares 24/24/12
    plan = PlannedWorkload("sharegpt", float(rows), False, length_quantiles(np.asarray(lengths)),
                           category_shares(cats))

    def sent(r: np.random.Generator) -> Sent:
        picked: list[int] = []
        while len(picked) < n:
            picked.extend(int(i) for i in r.permutation(rows)[: n - len(picked)])
        return picked, [lengths[i] for i in picked], [cats[i] for i in picked]

    return plan, sent


def _lognormal_case() -> tuple[PlannedWorkload, Callable[[np.random.Generator], Sent]]:
    dist = LengthDist(dist="lognormal", mean=300, std=200, min=16, max=2048)
    pop = draw_lengths(dist, POPULATION_DRAWS, np.random.default_rng([7, AUDIT_STREAM]))
    plan = PlannedWorkload("random_ids", math.inf, True, length_quantiles(pop), category_shares([None]))

    def sent(r: np.random.Generator) -> Sent:
        return list(range(200)), draw_lengths(dist, 200, r).tolist(), [None] * 200

    return plan, sent


def _small_space_case() -> tuple[PlannedWorkload, Callable[[np.random.Generator], Sent]]:
    plan = PlannedWorkload("random_ids", 500.0, True, length_quantiles(np.array([8])), category_shares([None]))

    def sent(r: np.random.Generator) -> Sent:
        return r.integers(0, 500, size=200).tolist(), [8] * 200, [None] * 200

    return plan, sent


def _collapse(s: Sent) -> Sent:
    fps, lengths, cats = s
    half = len(fps) // 2
    return [fps[0]] * half + fps[half:], [lengths[0]] * half + lengths[half:], [cats[0]] * half + cats[half:]


def _shrink(s: Sent) -> Sent:
    fps, lengths, cats = s
    return fps, [max(1, int(x * 0.8)) for x in lengths], cats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    cases = {"file n=45 (permutation prefix)": _file_case(45), "file n=150 (cycled)": _file_case(150),
             "random ids, lognormal lengths, n=200": _lognormal_case(),
             "space of 500, n=200 with replacement": _small_space_case()}
    print(f"{'case':40} {'correct flagged':>16} {'half collapsed':>15} {'lengths x0.8':>13}")
    for name, (plan, sent) in cases.items():
        flagged = caught = shrunk = 0
        for i in range(args.runs):
            s = sent(np.random.default_rng([args.seed, i]))
            flagged += bool(audit_workload(_table(s), plan).reasons)
            caught += bool(audit_workload(_table(_collapse(s)), plan).reasons)
            shrunk += bool(audit_workload(_table(_shrink(s)), plan).reasons)
        print(f"{name:40} {flagged / args.runs:>16.2%} {caught / args.runs:>15.1%} {shrunk / args.runs:>13.1%}")
    print(f"promised: at most {AUDIT_ALPHA:.1%} of correct runs flagged")


if __name__ == "__main__":
    main()
