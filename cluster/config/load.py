"""The load points of an experiment: closed-loop concurrency, open-loop rates and arrivals, a capacity search."""

from __future__ import annotations

from typing import Annotated, Any, Literal, NamedTuple, Optional

from pydantic import (Field, SerializeAsAny, ValidatorFunctionWrapHandler, WithJsonSchema, WrapValidator,
                      field_validator, model_validator)

from cluster.config import bounds as B
from cluster.config.fields import FieldProblem, FrozenModel


class SearchSpec(FrozenModel):
    """Capacity at an SLO (cluster/plan/capacity.py): per variant, workload and repeat, on the variant's one server
    start, the highest load in [min, max] whose SLO attainment (the spec's `slo:`) stays at or above
    `slo_attainment`: probe `min`, double while every probe meets it, then bisect between the highest load that met
    it and the lowest that missed until they are `resolution` apart. Every probe is a normal recorded run."""

    slo_attainment: float = Field(gt=0, le=1)
    """The fraction of requests that must be ok and meet every set SLO (0.9: 90 %)."""
    over: Literal["concurrency", "request_rate"] = "concurrency"
    """What is searched: closed-loop concurrency (integers) or open-loop request rate (req/s)."""
    min: float = Field(gt=0, le=B.MAX_REQUEST_RATE)
    """The lowest load probed (probed first)."""
    max: float = Field(gt=0, le=B.MAX_REQUEST_RATE)
    """The highest load probed: a variant still meeting the SLO there is reported as at least max."""
    resolution: Optional[float] = Field(default=None, gt=0, le=B.MAX_REQUEST_RATE)
    """How close the answer's bracket must close, in load units (default: 1 for concurrency, (max - min) / 32
    for request rate)."""

    @model_validator(mode="after")
    def _range(self) -> "SearchSpec":
        if not self.min < self.max:
            raise FieldProblem(("max",), f"max ({self.max:g}) must be above min ({self.min:g})")
        if self.over == "concurrency":
            for name in ("min", "max"):
                v = getattr(self, name)
                if v != int(v):
                    raise FieldProblem((name,), f"a concurrency search probes integers: {name} must be one, got {v:g}")
                if v > B.MAX_CONCURRENCY:
                    raise FieldProblem((name,), f"a concurrency search probes at most {B.MAX_CONCURRENCY} requests in "
                                       f"flight (one connection each), got {v:g}")
        return self

    def step(self) -> float:
        """The resolution the bracket closes to."""
        if self.resolution is not None:
            return max(self.resolution, 1.0) if self.over == "concurrency" else self.resolution
        return 1.0 if self.over == "concurrency" else (self.max - self.min) / 32


class LoadShapeOptions(FrozenModel):
    """The base of a registered load shape's options model: a `load.shapes` entry names its shape (a Literal of the
    shape's kind in the subclass)."""

    shape: str
    """The registered load shape's name."""


class ShapeEntry(NamedTuple):
    """What the spec knows of a registered load shape with options: their model, and whether its points are open loop
    (so `max_concurrency` and the arrival process shape them)."""

    options: type[LoadShapeOptions]
    open_loop: bool


LOAD_SHAPE_OPTIONS: dict[str, ShapeEntry] = {}
"""A registered load shape's entry by its kind (the `shape:` of a `load.shapes` entry). Filled by
cluster/kernel/load_shapes.register_load_shape when a shape declares options, so this module imports no shape."""


def _shape_options(v: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """A `load.shapes` entry validated by its shape's registered options model."""
    if isinstance(v, LoadShapeOptions):
        return v
    name = v.get("shape") if isinstance(v, dict) else None
    if not isinstance(name, str) or name not in LOAD_SHAPE_OPTIONS:
        raise FieldProblem(("shape",), f"unknown load shape {name!r}; expected one of: "
                           + (", ".join(LOAD_SHAPE_OPTIONS) or "(no load shape with options is registered)"))
    return LOAD_SHAPE_OPTIONS[name].options.model_validate(v)


ShapeOptions = Annotated[SerializeAsAny[LoadShapeOptions], WrapValidator(_shape_options), WithJsonSchema({
    "type": "object", "required": ["shape"], "additionalProperties": True,
    "description": "A registered load shape's options (its own model validates the rest).",
    "properties": {"shape": {"type": "string", "description": "The registered load shape's name."}}})]
"""One `load.shapes` entry: `{shape: NAME, ...}` with that registered load shape's options."""


class LoadSpec(FrozenModel):
    concurrency: list[Annotated[int, Field(ge=1, le=B.MAX_CONCURRENCY)]] = Field(default_factory=list)
    """Closed-loop load points: requests kept in flight."""
    request_rate: list[Annotated[float, Field(gt=0, le=B.MAX_REQUEST_RATE)]] = Field(default_factory=list)
    """Open-loop arrival rates in requests/s."""
    arrival: Literal["poisson", "gamma", "trace"] = "poisson"
    """Open-loop inter-arrival times: exponential (Poisson), gamma with coefficient of variation `arrival_cv`
    (cv > 1 burstier than Poisson, < 1 more regular; cv 1 has Poisson's spread), or `trace`: the recorded times of
    the workloads' `trace` prompts, every gap scaled so the window's mean rate is each request_rate."""
    arrival_cv: Optional[float] = Field(default=None, gt=0, le=B.MAX_GAMMA_CV)
    """Coefficient of variation of gamma inter-arrival times (arrival: gamma only)."""
    max_concurrency: Optional[int] = Field(default=None, ge=1, le=B.MAX_CONCURRENCY)
    """Cap on in-flight requests for open-loop load points."""
    actors_per_server: int = Field(default=1, ge=1, le=B.MAX_ACTORS_PER_SERVER)
    """Load actors driving one server together (each a shard of every window) when one core is not enough."""
    read_batch_ms: float = Field(default=0.0, ge=0, le=B.MAX_READ_BATCH_MS)
    """Let a load generator's readable sockets gather for this long after the first before reading them all in one
    event-loop turn (cluster/loadgen/pool.py, StreamPool.read_batch_s): less client CPU per chunk at hundreds of
    streams, arrival times still the kernel's receive stamps. Keep it well under the servers' inter-token latency
    (two events of one stream inside one batch share the later stamp); a closed loop's next send waits up to as
    long. 0 (the default): each socket is read as soon as it is readable."""
    shapes: list[ShapeOptions] = Field(default_factory=list, exclude_if=lambda v: not v)
    """Load points of registered load shapes that have no field above: `{shape: NAME, ...}` each, with that shape's
    own options (cluster/kernel/load_shapes.py)."""
    search: Optional[SearchSpec] = None
    """Capacity at an SLO: search the highest load meeting `slo:` (besides any fixed points above)."""
    stop_when_saturated: bool = False
    """Skip a variant's higher load points (of each workload and load kind) once a measured point is over-saturated
    against the next lower one (cluster/plan/saturation.py: output tok/s grew by < 25 % of the load's growth while
    TTFT p50 grew >= 50 % and the requests in flight >= 10 %): past it the server only queues. Each skipped point is
    logged and recorded as a run not measured (status invalid, the reason in invalid_reasons), never silently dropped;
    a resubmission does not retry it."""

    @field_validator("concurrency")
    @classmethod
    def _conc(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v):
            raise ValueError(f"concurrency has duplicates: {v}")
        return v

    @model_validator(mode="after")
    def _shards(self) -> "LoadSpec":
        n = self.actors_per_server
        for i, c in enumerate(self.concurrency):
            if c % n:
                raise FieldProblem(("concurrency", i), f"concurrency {c} must be a multiple of actors_per_server={n} "
                                   "(each load actor runs an equal share of the closed loop)")
        if self.max_concurrency is not None and self.max_concurrency % n:
            raise FieldProblem(("max_concurrency",), f"max_concurrency must be a multiple of actors_per_server={n}")
        return self

    def open_loop(self) -> bool:
        """Whether any point is open-loop: a request_rate, a search over request rate, or an open registered shape's."""
        return bool(self.request_rate) or (self.search is not None and self.search.over == "request_rate") \
            or any(LOAD_SHAPE_OPTIONS[o.shape].open_loop for o in self.shapes)

    @model_validator(mode="after")
    def _open_loop_only(self) -> "LoadSpec":
        """max_concurrency and gamma arrivals shape open-loop points: with none they would be ignored."""
        if self.open_loop():
            return self
        for name, set_ in (("max_concurrency", self.max_concurrency is not None), ("arrival", self.arrival == "gamma")):
            if set_:
                raise FieldProblem((name,), f"{name} shapes open-loop points (request_rate, or search over "
                                   "request_rate), but load has none: closed-loop concurrency keeps its own number "
                                   f"in flight, so it would be ignored (remove {name} or add a request_rate)")
        return self

    @model_validator(mode="after")
    def _arrival(self) -> "LoadSpec":
        if self.arrival == "gamma" and self.arrival_cv is None:
            raise FieldProblem(("arrival_cv",), "gamma arrivals need arrival_cv (the inter-arrival coefficient of "
                               "variation, e.g. 2 for bursty traffic)")
        if self.arrival == "poisson" and self.arrival_cv is not None:
            raise FieldProblem(("arrival_cv",), "arrival_cv is for arrival: gamma (Poisson's is 1 by definition)")
        if self.arrival == "trace" and self.arrival_cv is not None:
            raise FieldProblem(("arrival_cv",), "arrival_cv is for arrival: gamma (arrival: trace sends at the "
                               "trace's recorded gaps)")
        return self

    @model_validator(mode="after")
    def _some(self) -> "LoadSpec":
        if not self.concurrency and not self.request_rate and self.search is None and not self.shapes:
            raise ValueError("give at least one concurrency or request_rate (or a search)")
        if self.search is not None and self.actors_per_server > 1:
            raise FieldProblem(("search",), "a capacity search probes any concurrency in its range: it needs "
                               "actors_per_server: 1")
        if self.search is not None and self.search.over == "request_rate" and self.arrival == "trace":
            raise FieldProblem(("search", "over"), "a request-rate search runs Poisson or gamma arrivals, not trace")
        return self
