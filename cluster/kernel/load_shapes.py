"""Load shapes: one registered class per shape owns its points (from `load:`), their label and identity, the load it
offers in flight and its window's send schedule; the planner, the runner and the analysis dispatch through the
registry by a point's `kind`.

Registration keeps the layer floors: the registry and every shape sit in the kernel (pure: a schedule is numbers,
cluster/kernel/arrivals.py), which loadgen, plan, analysis and distributed import downward. A shape whose points
`load:` has no field for declares its own options model: registering the shape enters that model in
config/load.py's LOAD_SHAPE_OPTIONS table, which `load.shapes` entries are validated against by their `shape:`
name, so config (below the kernel) never imports a shape. Adding a shape is one module with one decorated class
(imported before the spec that names it is loaded); no other file names it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable, ClassVar, Optional, Sequence, TypeVar

import numpy as np

from cluster.config.load import LOAD_SHAPE_OPTIONS, LoadShapeOptions, LoadSpec, ShapeEntry
from cluster.kernel.arrivals import arrival_offsets_ns, trace_offsets_ns


@dataclass(frozen=True)
class LoadPoint:
    kind: str
    """The registered load shape this point belongs to (`concurrency`, `rate`, ...): the runs' load_kind."""
    value: float
    """Closed loop: requests kept in flight; open loop: requests per second (the shape's `closed` says which)."""
    max_concurrency: Optional[int] = None
    arrival_cv: Optional[float] = None
    """Open loop: gamma inter-arrival times with this coefficient of variation; None: Poisson (exponential gaps)."""
    trace: bool = False
    """Open loop: send at the prompts' recorded times (arrival_s) rescaled to this mean rate (arrival: trace)."""
    read_batch_s: float = 0.0
    """The load generator's read batching (load.read_batch_ms): part of the run's identity when set."""
    params: tuple[tuple[str, float], ...] = ()
    """A registered shape's own numbers (its options), part of the identity when any."""

    @property
    def shape(self) -> "LoadShape":
        return load_shape(self.kind)

    @property
    def label(self) -> str:
        return self.shape.label(self)

    # free-form JSON stored as given: the load point's fields, hashed into the run key
    def identity(self) -> dict[str, Any]:
        """What the run key hashes (the shape's identity of this point)."""
        return self.shape.identity(self)

    def param(self, name: str) -> float:
        """One of the shape's own numbers."""
        return dict(self.params)[name]


@dataclass(frozen=True)
class Schedule:
    """How a window's units (requests, or sessions) are sent: with `concurrency` set, a closed loop keeping that many
    in flight; else each unit at its `offsets_ns` (from the window start, the whole window's, in unit order), with at
    most `max_concurrency` in flight when set."""

    concurrency: Optional[float] = None
    offsets_ns: Optional[np.ndarray] = None
    max_concurrency: Optional[int] = None


ArrivalTimes = Callable[[], Sequence[Optional[float]]]
"""The window's prompts' recorded arrival times (`Prompt.arrival_s`), read only by a shape that replays them."""


class LoadShape:
    """One load shape. `kind` names it (LoadPoint.kind, the runs' load_kind); `closed`: a point's value is requests
    in flight (closed loop), else requests per second. `options`: the model of a `load.shapes` entry, when `load:`
    has no field of its own for the shape's points."""

    kind: ClassVar[str]
    closed: ClassVar[bool]
    options: ClassVar[Optional[type[LoadShapeOptions]]] = None
    prefix: ClassVar[str] = ""
    """What its short labels start with: `c8`, `r2.5` (default: the kind)."""
    noun: ClassVar[str] = ""
    """How its value reads in titles: `concurrency 8`, `rate 2.5 req/s` (default: the kind)."""
    unit: ClassVar[str] = ""
    axis: ClassVar[str] = ""
    """A plot's axis over its values (default: the noun, the unit in parentheses)."""

    def points(self, load: LoadSpec) -> list[LoadPoint]:
        """The fixed points `load:` declares of this shape, in order."""
        kind = self.kind
        return [p for o in load.shapes if o.shape == kind for p in self.points_of(o, load)]

    def points_of(self, options: LoadShapeOptions, load: LoadSpec) -> list[LoadPoint]:
        """The points of one `load.shapes` entry of this shape."""
        raise NotImplementedError(f"load shape {self.kind!r} declares options but no points_of")

    def short_label(self, value: float) -> str:
        """'c8', 'r2.5': a point where a table cell or a list is short of room."""
        return f"{self.short_prefix()}{value:g}"

    def short_prefix(self) -> str:
        return self.prefix or self.kind

    def long_label(self, value: float) -> str:
        """'concurrency 8', 'rate 2.5 req/s': a point in titles and tables."""
        return f"{self.noun or self.kind} {value:g}" + (f" {self.unit}" if self.unit else "")

    def axis_label(self) -> str:
        return self.axis or (self.noun or self.kind) + (f" ({self.unit})" if self.unit else "")

    def label(self, point: LoadPoint) -> str:
        """The point as logs and tables name it (its short label and what sets it apart)."""
        return self.short_label(point.value) + "".join(f" {k} {v:g}" for k, v in point.params)

    # free-form JSON stored as given: the load point's fields, hashed into the run key
    def identity(self, point: LoadPoint) -> dict[str, Any]:
        """What the run key hashes: fields at their defaults are left out, so the points of a shape keep the key
        they had before a later field existed (Poisson points before gamma and trace arrivals)."""
        out = asdict(point)
        for name in ("arrival_cv", "trace", "read_batch_s", "params"):  # None, False, 0 or ()
            if not out[name]:
                del out[name]
        return out

    def in_flight_bound(self, point: LoadPoint) -> Optional[int]:
        """The most requests the load generator may have in flight (None: no bound)."""
        return int(point.value) if self.closed else point.max_concurrency

    def warmup_concurrency(self, point: LoadPoint) -> int:
        """How many warmup requests are kept in flight before the point's window."""
        return self.in_flight_bound(point) or 8

    def schedule(self, point: LoadPoint, n: int, seed: int, arrivals: ArrivalTimes) -> Schedule:
        """How the window's `n` requests are sent (seeded by `seed`, identical across variants)."""
        raise NotImplementedError(f"load shape {self.kind!r} has no schedule")

    def session_schedule(self, point: LoadPoint, n_sessions: int, turns: int, seed: int) -> Schedule:
        """How a session workload's `n_sessions` sessions of `turns` requests start."""
        raise ValueError(f"sessions run at a concurrency or a Poisson/gamma request_rate, not {point.kind!r}")


_SHAPES: dict[str, LoadShape] = {}
S = TypeVar("S", bound=type[LoadShape])


def register_load_shape(cls: S) -> S:
    """Class decorator: the shape answers for points of its `kind`; its options model (if any) is accepted in
    `load.shapes` under `shape: <kind>`."""
    kind = cls.kind
    if kind in _SHAPES and type(_SHAPES[kind]) is not cls:
        raise LookupError(f"load shape {kind!r} is registered twice ({type(_SHAPES[kind]).__name__}, {cls.__name__})")
    _SHAPES[kind] = cls()
    if cls.options is not None:
        LOAD_SHAPE_OPTIONS[kind] = ShapeEntry(cls.options, not cls.closed)
    return cls


def unregister_load_shape(kind: str) -> None:
    """Forget a registered shape (a test's throwaway shape, so it does not outlive the test)."""
    _SHAPES.pop(kind, None)
    LOAD_SHAPE_OPTIONS.pop(kind, None)


def load_shape(kind: str) -> LoadShape:
    """The registered shape of a point's (or a runs row's) kind."""
    try:
        return _SHAPES[kind]
    except KeyError:
        raise LookupError(f"no load shape {kind!r} is registered (registered: {', '.join(_SHAPES)}); the module "
                       "defining it must be imported first") from None


def load_shapes() -> tuple[LoadShape, ...]:
    """Every registered shape, in registration order (the order a plan lists their points)."""
    return tuple(_SHAPES.values())


@register_load_shape
class ClosedLoop(LoadShape):
    """`load.concurrency`: a closed loop keeping `value` requests in flight (a slot's next request is sent when its
    last one ends)."""

    kind = "concurrency"
    closed = True
    prefix = "c"
    axis = "concurrency (requests in flight)"

    def points(self, load: LoadSpec) -> list[LoadPoint]:
        return [LoadPoint(self.kind, float(c), read_batch_s=load.read_batch_ms / 1000.0) for c in load.concurrency]

    def label(self, point: LoadPoint) -> str:
        return f"c{int(point.value)}"

    def schedule(self, point: LoadPoint, n: int, seed: int, arrivals: ArrivalTimes) -> Schedule:
        return Schedule(concurrency=point.value)

    def session_schedule(self, point: LoadPoint, n_sessions: int, turns: int, seed: int) -> Schedule:
        return Schedule(concurrency=point.value)


@register_load_shape
class OpenLoop(LoadShape):
    """`load.request_rate`: an open loop sending at `value` requests/s, its gaps Poisson, gamma (`arrival_cv`) or a
    recorded trace's rescaled (`trace`), at most `max_concurrency` in flight when set."""

    kind = "rate"
    closed = False
    prefix, noun, unit, axis = "r", "rate", "req/s", "request rate (req/s)"

    def points(self, load: LoadSpec) -> list[LoadPoint]:
        cv = load.arrival_cv if load.arrival == "gamma" else None
        return [LoadPoint(self.kind, float(r), load.max_concurrency, cv, load.arrival == "trace",
                          load.read_batch_ms / 1000.0) for r in load.request_rate]

    def label(self, point: LoadPoint) -> str:
        return f"r{point.value:g}" + (f" gamma cv {point.arrival_cv:g}" if point.arrival_cv is not None else "") \
            + (" trace" if point.trace else "")

    def schedule(self, point: LoadPoint, n: int, seed: int, arrivals: ArrivalTimes) -> Schedule:
        if point.trace:
            times = list(arrivals())
            if any(a is None for a in times):
                raise ValueError("a trace load point needs prompts that carry their recorded arrival_s")
            offsets = trace_offsets_ns([float(a or 0.0) for a in times], point.value)
        else:
            offsets = arrival_offsets_ns(n, point.value, point.arrival_cv, np.random.default_rng(seed))
        return Schedule(offsets_ns=offsets, max_concurrency=point.max_concurrency)

    def session_schedule(self, point: LoadPoint, n_sessions: int, turns: int, seed: int) -> Schedule:
        if point.trace:
            raise ValueError(f"sessions run at a concurrency or a Poisson/gamma request_rate, not {point.kind!r} "
                             "with trace arrivals")
        # sessions start at rate / turns, so requests arrive at the declared rate
        offsets = arrival_offsets_ns(n_sessions, point.value / turns, point.arrival_cv, np.random.default_rng(seed))
        return Schedule(offsets_ns=offsets, max_concurrency=point.max_concurrency)
