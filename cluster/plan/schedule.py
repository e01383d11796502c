"""Pure placement decisions: how many GPUs a server segment reserves, and which requests can never be placed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional, Sequence


@dataclass(frozen=True)
class Reservation:
    """What one server start reserves: `gpus` in one STRICT_PACK bundle, of which the server uses `tp`."""

    variant: str
    tp: int
    gpus: int
    cpus_for_load: float
    bundles: tuple[int, ...] = ()
    """A deployment of several server processes: the GPUs of each (one bundle each, in start order); () for one
    server (its one bundle of `gpus`)."""
    strategy: str = "STRICT_PACK"
    """Ray's placement strategy for the server bundles (kernel/deployment.placement_strategy)."""
    what: str = ""
    """The deployment in words, for a refusal ("2 replicas of tp 4 behind the gateway")."""


def reservation(variant: str, tp: int, isolation: Literal["node", "gpus"], gpus_per_node: int,
                load_cpus: float = 1.0) -> Reservation:
    """isolation=node reserves the whole node (its other GPUs stay idle so nothing shares PCIe, host CPU or
    power with the measured server); isolation=gpus reserves only the server's own tp GPUs. A deployment sglbench
    does not launch (an endpoint already running, tp 0) reserves no GPU: it needs no placement."""
    gpus = 0 if tp == 0 else max(tp, gpus_per_node) if isolation == "node" else tp
    return Reservation(variant=variant, tp=tp, gpus=gpus, cpus_for_load=load_cpus)


def deployment_reservation(variant: str, bundles: Sequence[int], strategy: str, what: str,
                           isolation: Literal["node", "gpus"], gpus_per_node: int, load_cpus: float = 1.0
                           ) -> Reservation:
    """A deployment of several server processes: a bundle per process. isolation=node on a deployment packed on one
    node pads it to the whole node (an extra bundle of the GPUs it leaves idle); a spread one holds its own GPUs."""
    b = tuple(bundles)
    if isolation == "node" and strategy == "STRICT_PACK" and 0 < sum(b) < gpus_per_node:
        b = b + (gpus_per_node - sum(b),)
    return Reservation(variant=variant, tp=max(bundles, default=0), gpus=sum(b), cpus_for_load=load_cpus,
                       bundles=b, strategy=strategy, what=what)


def _deployment_misfit(r: Reservation, node_gpus: Sequence[int]) -> Optional[str]:
    """Why a deployment's bundles can never be placed on these nodes, or None."""
    have = sorted(node_gpus, reverse=True)
    need = [g for g in r.bundles if g]
    fits = False
    if r.strategy == "STRICT_PACK":
        fits = sum(need) <= (have[0] if have else 0)
    elif r.strategy == "STRICT_SPREAD":  # one bundle per node: the largest bundles on the largest nodes
        fits = len(r.bundles) <= len(have) and all(g <= n for g, n in zip(sorted(r.bundles, reverse=True), have))
    else:  # PACK / SPREAD: first fit, largest bundles first
        free = list(have)
        fits = True
        for g in sorted(need, reverse=True):
            i = next((j for j, f in enumerate(free) if f >= g), None)
            if i is None:
                fits = False
                break
            free[i] -= g
    if fits:
        return None
    where = {"STRICT_PACK": "on one node", "STRICT_SPREAD": "one process per node"}.get(r.strategy, "over the nodes")
    return (f"variant {r.variant!r} ({r.what}) needs {sum(r.bundles)} GPUs {where} "
            f"({' + '.join(str(g) for g in r.bundles)} per process), but the cluster has {sum(have)} GPUs on "
            f"{len(have)} node(s) (GPUs per node: {have})")


def unplaceable(reservations: Sequence[Reservation], node_gpus: Sequence[int]) -> list[str]:
    """Messages for reservations no node can ever satisfy (fail fast instead of waiting forever)."""
    biggest = max(node_gpus, default=0)
    out = []
    for r in reservations:
        if r.bundles:
            why = _deployment_misfit(r, node_gpus)
            if why:
                out.append(why)
            continue
        if r.tp > biggest:
            out.append(
                f"variant {r.variant!r} needs tp={r.tp} GPUs on one node, but the largest node has {biggest} GPUs "
                f"(nodes: {sorted(node_gpus, reverse=True)})"
            )
    return out


def node_gpus_for_isolation(node_gpus: Sequence[int]) -> int:
    """GPUs a node-isolated reservation asks for: the size of the largest node."""
    return max(node_gpus, default=0)


# --------------------------------------------------------------------------- accounting of a finished schedule


@dataclass(frozen=True)
class Interval:
    """A closed time interval in seconds on one clock (unix seconds in practice)."""

    start_s: float
    end_s: float

    def __post_init__(self) -> None:
        if not self.end_s >= self.start_s:
            raise ValueError(f"interval ends before it starts: start_s={self.start_s}, end_s={self.end_s}")

    @property
    def length_s(self) -> float:
        return self.end_s - self.start_s

    def overlap_s(self, other: "Interval") -> float:
        return max(0.0, min(self.end_s, other.end_s) - max(self.start_s, other.start_s))


@dataclass(frozen=True)
class HeldReservation:
    """One placement group's life: `gpus` held over `reserved`, of which the server's `tp` were in use over
    `serving` (None: no server ever ran in it)."""

    variant: str
    gpus: int
    tp: int
    reserved: Interval
    serving: Optional[Interval] = None

    def __post_init__(self) -> None:
        if not 1 <= self.tp <= self.gpus:
            raise ValueError(f"variant {self.variant!r}: tp={self.tp} must be between 1 and the {self.gpus} "
                             "GPUs reserved")


@dataclass(frozen=True)
class GpuTimeAccount:
    """Where the GPU-seconds of an experiment span went. idle = reserved but not used by a running server;
    split into spare (reserved GPUs beyond the server's tp) and gap (the server's own GPUs before it was
    launched or after its last run ended)."""

    span_s: float
    total_gpus: int
    reserved_gpu_s: float
    serving_gpu_s: float
    idle_spare_gpu_s: float
    idle_gap_gpu_s: float

    @property
    def total_gpu_s(self) -> float:
        return self.span_s * self.total_gpus

    @property
    def idle_gpu_s(self) -> float:
        return self.idle_spare_gpu_s + self.idle_gap_gpu_s

    @property
    def unreserved_gpu_s(self) -> float:
        return self.total_gpu_s - self.reserved_gpu_s

    def share(self, gpu_s: float) -> float:
        return gpu_s / self.total_gpu_s if self.total_gpu_s > 0 else 0.0

    def share_idle(self) -> float:
        return self.share(self.idle_gpu_s)


def makespan_s(intervals: Sequence[Interval]) -> float:
    """Length from the earliest start to the latest end (0 for no intervals)."""
    if not intervals:
        return 0.0
    return max(i.end_s for i in intervals) - min(i.start_s for i in intervals)


def span_of(intervals: Sequence[Interval]) -> Interval:
    """The smallest interval covering all of them."""
    if not intervals:
        raise ValueError("no intervals to span")
    return Interval(min(i.start_s for i in intervals), max(i.end_s for i in intervals))


def gpu_time_account(held: Sequence[HeldReservation], total_gpus: int, span: Interval) -> GpuTimeAccount:
    """Account every reservation's GPU-seconds inside `span`: the server's tp GPUs while it ran are serving,
    everything else the reservation held is idle. Time outside `span` is not counted."""
    if total_gpus < 1:
        raise ValueError(f"total_gpus must be at least 1, got {total_gpus}")
    reserved = serving = spare = 0.0
    for h in held:
        held_s = h.reserved.overlap_s(span)
        busy_s = 0.0
        if h.serving is not None and held_s > 0:
            # a server only counts while its reservation is held, and only inside the span
            held_in_span = Interval(max(h.reserved.start_s, span.start_s), min(h.reserved.end_s, span.end_s))
            busy_s = h.serving.overlap_s(held_in_span)
        reserved += h.gpus * held_s
        serving += h.tp * busy_s
        spare += (h.gpus - h.tp) * held_s
    gap = reserved - serving - spare
    return GpuTimeAccount(span_s=span.length_s, total_gpus=total_gpus, reserved_gpu_s=reserved,
                          serving_gpu_s=serving, idle_spare_gpu_s=spare, idle_gap_gpu_s=max(0.0, gap))


def idle_gpu_share(held: Sequence[HeldReservation], total_gpus: int, span: Interval) -> float:
    """Allocated-but-idle GPU-seconds as a share of total_gpus × span (see gpu_time_account)."""
    return gpu_time_account(held, total_gpus, span).share_idle()


def peak_reserved_gpus(held: Sequence[HeldReservation]) -> int:
    """The most GPUs reserved at one instant (a release and a reservation at the same instant do not overlap)."""
    events = sorted([(h.reserved.start_s, 1, h.gpus) for h in held] + [(h.reserved.end_s, 0, -h.gpus) for h in held])
    peak = now = 0
    for _, _, delta in events:
        now += delta
        peak = max(peak, now)
    return peak
