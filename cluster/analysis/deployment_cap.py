"""A deployment's cap on running requests, from each of its servers' own (the cap rule is per server: a deployment
runs at most what its servers resolved between them)."""

from __future__ import annotations

from typing import Optional

from cluster.engines.base import ConcurrencyCap
from cluster.analysis.engine_facts import EngineFacts
from cluster.kernel.run_facts import ServerFacts


def deployment_cap(engine: EngineFacts, server: ServerFacts) -> Optional[ConcurrencyCap]:
    """One server's resolved cap; a deployment's: its replicas' summed, its prefill and decode pools' sums the
    smaller (a request holds a slot in each in turn), rank 0's for a server across nodes; None when a server that
    counts reported none (the rule cannot be judged, never guessed)."""
    if not server.processes:
        return engine.concurrency_cap(server.infos, server.cap_log_lines)
    pools: dict[str, list[tuple[str, ConcurrencyCap]]] = {}
    for p in server.processes:
        if p.role == "gateway" or (p.role == "rank" and p.name != "rank-0"):
            continue
        cap = engine.concurrency_cap(p.facts.infos, p.facts.cap_log_lines)
        if cap is None:
            return None
        pools.setdefault("replicas" if p.role in ("replica", "server", "rank") else p.role, []).append((p.name, cap))
    if not pools:
        return None
    sums = {pool: sum(c.value for _, c in caps) for pool, caps in pools.items()}
    pool = min(sums, key=lambda k: sums[k])
    caps = pools[pool]
    if len(caps) == 1 and len(pools) == 1:
        return caps[0][1]
    parts = " + ".join(f"{name} {c.value}" for name, c in caps)
    declared = [c.declared for _, c in caps]
    causes = [f"{name}: {c.cause}" for name, c in caps if c.cause]
    return ConcurrencyCap(sums[pool], f"{pool} pool summed ({parts}; each {caps[0][1].source})",
                          sum(d for d in declared if d is not None) if all(d is not None for d in declared) else None,
                          "; ".join(causes) or None)
