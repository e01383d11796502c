"""Pure placement decisions: how many GPUs a server segment reserves, and which requests can never be placed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence


@dataclass(frozen=True)
class Reservation:
    """What one server start reserves: `gpus` in one STRICT_PACK bundle, of which the server uses `tp`."""

    variant: str
    tp: int
    gpus: int
    cpus_for_load: float


def reservation(variant: str, tp: int, isolation: Literal["node", "gpus"], gpus_per_node: int,
                load_cpus: float = 1.0) -> Reservation:
    """isolation=node reserves the whole node (its other GPUs stay idle so nothing shares PCIe, host CPU or
    power with the measured server); isolation=gpus reserves only the server's own tp GPUs."""
    gpus = max(tp, gpus_per_node) if isolation == "node" else tp
    return Reservation(variant=variant, tp=tp, gpus=gpus, cpus_for_load=load_cpus)


def unplaceable(reservations: Sequence[Reservation], node_gpus: Sequence[int]) -> list[str]:
    """Messages for reservations no node can ever satisfy (fail fast instead of waiting forever)."""
    biggest = max(node_gpus, default=0)
    out = []
    for r in reservations:
        if r.tp > biggest:
            out.append(
                f"variant {r.variant!r} needs tp={r.tp} GPUs on one node, but the largest node has {biggest} GPUs "
                f"(nodes: {sorted(node_gpus, reverse=True)})"
            )
    return out


def node_gpus_for_isolation(node_gpus: Sequence[int]) -> int:
    """GPUs a node-isolated reservation asks for: the size of the largest node."""
    return max(node_gpus, default=0)
