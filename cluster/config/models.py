"""Experiment spec: typed, frozen models of an experiment YAML (the loader, cluster/config/loader.py, names file, line and
field). The model, engine and server models (server.py), the workload, load and tuning models (workload.py, load.py,
tuning.py) live beside it on the field rules of fields.py; every name is importable from here."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import (AfterValidator, Discriminator, Field, FieldSerializationInfo, Tag, field_serializer,
                      field_validator, model_validator)

from cluster.engines.server_env import set_by_sglbench
from cluster.config.sim_knobs import Knobs
from cluster.config import bounds as B
from cluster.config.expansion import Pair, step_names, sweep_name, sweep_pairs
from cluster.config.fields import FieldProblem, FrozenModel, LocalPath, SpecError, check_name, coercible
from cluster.config.load import LoadSpec, SearchSpec
from cluster.config.locations import DATASET_SCHEMES, check_location
from cluster.config.tuning import (TUNING_MODELS, ActiveTuning, BackendPair, BackendSweepOptions, BackendSweepTuning,
                                 FlashinferAutotuneOptions, FlashinferAutotuneTuning, NoOptions, NoTuning,
                                 TritonMoeOptions, TritonMoeTuning, TuningSpec)
from cluster.config.workload import (LENGTH_TAGS, PROMPT_SOURCES, PROMPT_TAGS, SESSION_SOURCES, ConversationPrompts,
                                   JsonlPrompts, Length, LengthDist, PromptSource, RandomIdsPrompts, SessionSpec,
                                   SharedPrefix, TextPrompts, TokenCount, TracePrompts, WorkloadSpec)

from cluster.config.server import (ArgValue, ENGINES, EngineLauncher, EngineName, ModelSpec, OWNED_FLAGS, ServerSpec,
                               arg_flag, _arg_shapes, _check_args, _check_env)

SPEC_VERSION = 1
"""The only experiment-spec version this release reads (`version:` in the YAML)."""

_Steps = Annotated[int, Field(ge=1, le=B.MAX_DRAFT_STEPS)]
DraftSteps = Annotated[Union[Annotated[_Steps, Tag("one")], Annotated[list[_Steps], Tag("list")]],
                       Discriminator(lambda v: "list" if isinstance(v, list) else "one")]
"""Speculative draft steps: one value, or a list that expands the variant into one per value."""
STEP_TAGS = ("one", "list")


class SpeculativeSpec(FrozenModel):
    """Speculative decoding; `num_steps` may be a list, which expands the variant into one per value."""

    algorithm: Literal["NEXTN", "EAGLE", "EAGLE3", "STANDALONE", "NGRAM", "MTP"] = "NEXTN"
    """Speculative algorithm; NEXTN (MTP) uses the checkpoint's built-in MTP head."""
    num_steps: DraftSteps = Field(default=1)
    """Draft steps; a list expands the variant into NAME-<steps> per value."""
    eagle_topk: int = Field(default=1, ge=1, le=B.MAX_DRAFT_STEPS)
    """Draft branches per step (1 = a chain; num_draft_tokens is then steps + 1)."""
    num_draft_tokens: Optional[int] = Field(default=None, ge=2, le=B.MAX_DRAFT_TOKENS)
    """Tokens verified per step (default steps + 1 at topk 1; must equal it there)."""
    draft_model_path: Optional[LocalPath] = None
    """Draft checkpoint directory (EAGLE3 and STANDALONE need one)."""

    @field_validator("algorithm", mode="before")
    @classmethod
    def _upper(cls, v: Any) -> Any:
        return v.upper() if isinstance(v, str) else v

    @field_validator("num_steps")
    @classmethod
    def _steps(cls, v: Union[int, list[int]]) -> Union[int, list[int]]:
        steps = v if isinstance(v, list) else [v]
        if not steps:
            raise ValueError("num_steps must not be empty (expected an integer 1-16 or a list of them)")
        if len(set(steps)) != len(steps):
            raise ValueError(f"num_steps has duplicates: {steps}")
        return v

    @model_validator(mode="after")
    def _draft_tokens(self) -> "SpeculativeSpec":
        if self.num_draft_tokens is not None and self.eagle_topk == 1:
            steps = self.num_steps if isinstance(self.num_steps, list) else [self.num_steps]
            if len(steps) > 1:
                raise FieldProblem(("num_draft_tokens",), "cannot be fixed when num_steps is a list (it is steps + 1 at topk 1)")
            if self.num_draft_tokens != steps[0] + 1:
                raise FieldProblem(
                    ("num_draft_tokens",),
                    f"num_draft_tokens {self.num_draft_tokens} is inconsistent with num_steps {steps[0]} at "
                    f"eagle_topk 1 (it must be num_steps + 1 = {steps[0] + 1}; SGLang would silently override it)"
                )
        if self.algorithm in ("EAGLE3", "STANDALONE") and not self.draft_model_path:
            raise FieldProblem(("draft_model_path",), f"{self.algorithm} needs draft_model_path (a draft checkpoint directory)")
        return self

    def steps(self) -> list[int]:
        return list(self.num_steps) if isinstance(self.num_steps, list) else [self.num_steps]

    def draft_tokens_for(self, steps: int) -> int:
        if self.eagle_topk == 1:
            return steps + 1
        return self.num_draft_tokens if self.num_draft_tokens is not None else steps * self.eagle_topk + 1


class ProfileSpec(FrozenModel):
    """A kernel profile of the variant's server after its measured windows (SGLang /start_profile, /stop_profile)."""

    steps: int = Field(ge=1, le=B.MAX_PROFILE_STEPS)
    """Forward steps the torch profiler records (SGLang's `num_steps`: it stops by itself after them)."""
    requests: int = Field(default=4, ge=1, le=B.MAX_PROFILE_STEPS)
    """Requests of the variant's first workload sent to drive those steps (the server is idle after its windows)."""
    max_archive_bytes: int = Field(default=64 * 1024**2, ge=1024, le=B.MAX_PROFILE_ARCHIVE_BYTES)
    """The archived trace directory is refused above this size (the summary table is still written)."""


class VariantSpec(FrozenModel):
    name: str
    """Variant name (letters, digits, '.', '_', '-'); a NEXTN list appends -<steps>."""
    engine: Optional[EngineName] = None
    """This variant's engine (default: model.engine)."""
    tp: Optional[int] = Field(default=None, ge=1, le=B.MAX_GPUS_PER_NODE)
    """This variant's tensor-parallel size (default: model.tp)."""
    args: dict[str, ArgValue] = Field(default_factory=dict)
    """Server flags for this variant (without dashes), over server.args."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables for this variant's server, over server.env."""
    speculative: Optional[SpeculativeSpec] = None
    """Speculative decoding for this variant (algorithm, num_steps, ...)."""
    tuning: Optional[TuningSpec] = None
    """Kernel tuning for this variant: {kind, options} (flashinfer_autotune, triton_moe, backend_sweep, none)."""
    sim: Knobs = Field(default_factory=Knobs)
    """Simulated-engine knobs for this variant (each one set here overrides the experiment's `sim:` block)."""
    profile: Optional[ProfileSpec] = None
    """Ask for a kernel profile after the variant's measured windows (not part of its run keys)."""
    baseline: bool = False
    """Compare every other variant against this one (default: the first variant)."""

    _n = field_validator("name")(classmethod(lambda cls, v: check_name(v, "variant name")))
    _s = field_validator("args", mode="before")(classmethod(lambda cls, v: _arg_shapes(v)))
    _a = field_validator("args")(classmethod(lambda cls, v: _check_args(v)))
    _e = field_validator("env")(classmethod(lambda cls, v: _check_env(v)))

    @field_serializer("sim")
    def _sim_as_set(self, knobs: Knobs, info: FieldSerializationInfo) -> dict[str, object]:
        """Only the knobs this variant sets: a dumped and re-read spec must not turn every default into an
        override of the experiment's `sim:` block (which made a dumped demo run at time_scale 1.0)."""
        out: dict[str, object] = knobs.model_dump(mode=info.mode, exclude_unset=True)
        return out


def expanded_names(v: VariantSpec) -> list[str]:
    """The names the planner gives a declared variant's expansions (cluster/config/expansion.py's rule)."""
    names = step_names(v.name, v.speculative.steps()) if v.speculative is not None else [v.name]
    t = v.tuning
    if not isinstance(t, BackendSweepTuning) or t.options.combination is not None:
        return names
    o = t.options
    if not o.moe_runner_backend and not o.fp4_gemm_backend:
        return names  # refused by the planner with its own message (backend_sweep needs back ends)
    excluded: set[Pair] = {(e.moe_runner_backend, e.fp4_gemm_backend) for e in o.exclude}
    return [sweep_name(n, p) for n in names for p in sweep_pairs(o.moe_runner_backend, o.fp4_gemm_backend, excluded)]


class SLOSpec(FrozenModel):
    ttft_ms: Optional[float] = Field(default=None, gt=0, le=B.MAX_LATENCY_MS)
    """Time-to-first-token limit per request, ms."""
    tpot_ms: Optional[float] = Field(default=None, gt=0, le=B.MAX_LATENCY_MS)
    """Time-per-output-token limit per request, ms."""
    e2e_ms: Optional[float] = Field(default=None, gt=0, le=B.MAX_LATENCY_MS)
    """End-to-end latency limit per request, ms."""


class CorrectnessSpec(FrozenModel):
    """The correctness gate every variant passes before its speed counts (cluster/analysis/correctness.py)."""

    enabled: bool = True
    """Turn off only for models that cannot answer (random weights in tests); runs then record the gate as skipped."""
    min_prefix_tokens: int = Field(default=8, ge=0, le=B.MAX_GATE_TOKENS)
    """Greedy outputs must share at least this many leading tokens with the baseline's on most prompts."""
    check_answers: bool = True
    """False turns off only the task-answer check (random-weight models cannot answer); the prefix, acceptance and
    degeneracy checks still run."""
    check_output_samples: bool = True
    """False keeps each measured run's output sample (table output_samples, provenance) but does not mark a run
    invalid when the sample degenerates: only for models whose output is garbage by construction (random weights
    in tests)."""
    max_new_tokens: Optional[int] = Field(default=None, ge=8, le=B.MAX_GATE_TOKENS)
    """Caps every gate prompt's token budget (default: each prompt's own, up to 256). Only with `check_answers:
    false`: an answer needs its prompt's whole budget, while the prefix, acceptance and degeneracy checks judge the
    first tokens (min_prefix_tokens ≤ the cap). For slow test engines (real SGLang on a CPU), where the 256-token
    reasoning prompt, asked twice, cost more than the measured window."""

    @model_validator(mode="after")
    def _cap_needs_no_answers(self) -> "CorrectnessSpec":
        if self.max_new_tokens is not None:
            if self.check_answers:
                raise ValueError("max_new_tokens caps the gate prompts' budgets, which the answer check needs: "
                                 "set check_answers: false to use it, or remove max_new_tokens")
            if self.max_new_tokens < self.min_prefix_tokens:
                raise ValueError(f"max_new_tokens {self.max_new_tokens} is below min_prefix_tokens "
                                 f"{self.min_prefix_tokens}: no prefix could be compared")
        return self


class ClusterSpec(FrozenModel):
    """What the experiment assumes about the cluster; checked again against the live cluster at preflight."""

    gpus_per_node: int = Field(default=8, ge=1, le=B.MAX_GPUS_PER_NODE)
    """GPUs on the largest node: a variant's tensor-parallel group must fit on one node."""


class TelemetrySpec(FrozenModel):
    """GPU telemetry during every measured window (cluster/telemetry/): NVML, or the simulator's device model."""

    enabled: bool = True
    """Sample the server's GPUs during each measured window."""
    rate_hz: float = Field(default=10.0, gt=0, le=B.MAX_TELEMETRY_HZ)
    """Samples per second (monotonic ns timestamps on the requests' clock)."""


class ExperimentSpec(FrozenModel):
    version: Literal[1] = 1
    """Spec version; 1."""
    name: str
    """Experiment name: a directory in the dataset."""
    model: ModelSpec
    """Checkpoint, engine and tensor-parallel size."""
    engines: dict[EngineName, EngineLauncher] = Field(default_factory=dict)
    """Per engine, how to start it on the node (python: or launcher:, version:)."""
    server: ServerSpec = Field(default_factory=ServerSpec)
    """Server args and env for every variant."""
    sim: Knobs = Field(default_factory=Knobs)
    """Simulated-engine knobs (cluster/sim/model.py): the same model the simulated server validates them with."""
    variants: list[VariantSpec] = Field(min_length=1)
    """Server configurations to compare."""
    workloads: list[WorkloadSpec] = Field(min_length=1)
    """Request shapes to drive at every variant."""
    load: LoadSpec
    """Load points: closed-loop concurrency and/or open-loop request rates."""
    repeats: int = Field(default=1, ge=1, le=B.MAX_REPEATS)
    """Repeats of every load point (3 or more give intervals and verdicts; 5 recommended)."""
    order: Literal["grouped", "interleaved"] = "grouped"
    """grouped: each server starts once and runs all its points; interleaved: ABAB across repeats (restarts)."""
    warmup_requests: int = Field(default=2, ge=0, le=B.MAX_WARMUP_REQUESTS)
    """Requests sent before every measured window (then /flush_cache)."""
    seed: int = Field(default=0, ge=0, le=B.MAX_SEED)
    """One seed for prompts and arrival schedules."""
    isolation: Literal["node", "gpus"] = "node"
    """node: a variant has its node to itself while measured; gpus: variants share nodes on disjoint GPUs."""
    output: Annotated[str, AfterValidator(lambda v: check_location(v, "output", DATASET_SCHEMES))] = "results"
    """Dataset root: a local path or a pyarrow filesystem URI (s3://, gs://, ...)."""
    slo: Optional[SLOSpec] = None
    """Per-request latency limits: goodput and SLO attainment per run."""
    correctness: CorrectnessSpec = Field(default_factory=CorrectnessSpec)
    """The correctness gate every variant passes before its speed counts."""
    telemetry: TelemetrySpec = Field(default_factory=TelemetrySpec)
    """GPU telemetry sampled during every measured window (gpu_metrics table)."""
    cluster: ClusterSpec = Field(default_factory=ClusterSpec)
    """What the experiment assumes about the cluster."""
    health_timeout_s: float = Field(default=1800.0, gt=0, le=B.MAX_TIMEOUT_S)
    """Seconds a server may take to become healthy."""
    request_timeout_s: float = Field(default=600.0, gt=0, le=B.MAX_TIMEOUT_S)
    """Seconds one request may take."""
    max_client_lag_ms: float = Field(default=10.0, gt=0, le=B.MAX_LATENCY_MS)
    """A run whose client send lag p99 exceeds this is flagged invalid: the client, not the server, set the pace."""

    _n = field_validator("name")(classmethod(lambda cls, v: check_name(v, "experiment name")))

    @model_validator(mode="after")
    def _unique(self) -> "ExperimentSpec":
        for what, names in (("variants", [v.name for v in self.variants]), ("workloads", [w.name for w in self.workloads])):
            folded = [n.casefold() for n in names]
            for i, n in enumerate(names):
                if n in names[:i]:
                    raise FieldProblem((what, i, "name"), f"duplicate {what[:-1]} name {n!r} (names must be unique)")
                if folded[i] in folded[:i]:
                    first = names[folded.index(folded[i])]
                    raise FieldProblem((what, i, "name"), f"{what[:-1]} name {n!r} differs from {first!r} only in case: "
                                       "names become directories, which a case-insensitive filesystem would merge")
        baselines = [i for i, v in enumerate(self.variants) if v.baseline]
        if len(baselines) > 1:
            raise FieldProblem(("variants", baselines[1], "baseline"), "at most one variant may set baseline: true")
        node = self.cluster.gpus_per_node
        if self.model.tp > node:
            raise FieldProblem(("model", "tp"), f"tp {self.model.tp} is larger than cluster.gpus_per_node {node}")
        for i, v in enumerate(self.variants):
            if v.tp is not None and v.tp > node:
                raise FieldProblem(("variants", i, "tp"), f"tp {v.tp} is larger than cluster.gpus_per_node {node}")
        return self

    @model_validator(mode="after")
    def _expansion(self) -> "ExperimentSpec":
        """What the plan will expand the variants into is refused here, with its line: a flag under two spellings
        across server.args and a variant's args, a baseline that expands into several variants, expanded names
        that collide, and (isolation: gpus, where variants run side by side) one port fixed by two variants."""
        declared = {v.name.casefold(): i for i, v in enumerate(self.variants)}
        produced: dict[str, int] = {}
        ports: dict[int, tuple[int, str]] = {}
        for i, v in enumerate(self.variants):
            for key in v.args:
                other = arg_flag(self.server.args, key.replace("_", "-"))
                if other is not None and other != key:
                    raise FieldProblem(("variants", i, "args", key), f"server arg {key!r} is the flag server.args "
                                       f"gives as {other!r}: spell it the same way in both (the variant's value "
                                       "then overrides), else one of the two values is lost")
            names = expanded_names(v)
            if not names:
                raise FieldProblem(("variants", i, "tuning", "options", "exclude"), f"variant {v.name!r}: exclude "
                                   "leaves no back-end pair, so the variant would run nothing")
            if v.baseline and len(names) > 1:
                raise FieldProblem(("variants", i, "baseline"), f"a baseline must be a single variant, but "
                                   f"{v.name!r} expands into {len(names)} ({', '.join(names[:3])}"
                                   f"{', ...' if len(names) > 3 else ''}): declare the one to compare against as "
                                   "its own variant and mark that one")
            for n in names:
                try:
                    check_name(n, "expanded variant name")
                except ValueError as e:
                    raise FieldProblem(("variants", i, "name"), str(e)) from None
                other_i = produced.get(n.casefold(), declared.get(n.casefold(), i))
                if other_i != i:
                    j, k = sorted((i, other_i))
                    raise FieldProblem(("variants", k, "name"), f"variant name {n!r} is produced twice: by "
                                       f"variants.{j} ({self.variants[j].name!r}) and variants.{k} "
                                       f"({self.variants[k].name!r}); a num_steps list names its variants "
                                       "NAME-<steps> and a backend_sweep NAME-<backends>: rename one")
                produced[n.casefold()] = i
            self._check_port(i, v, len(names), ports)
        return self

    def _check_port(self, i: int, v: "VariantSpec", count: int, ports: dict[int, tuple[int, str]]) -> None:
        if self.isolation != "gpus":
            return  # isolation node: a variant has its node to itself, so a fixed port is never shared
        own = arg_flag(v.args, "port")
        where: tuple[Union[str, int], ...] = ("variants", i, "args", own) if own else ("server", "args", str(
            arg_flag(self.server.args, "port")))
        port = v.args[own] if own else self.server.args.get(str(arg_flag(self.server.args, "port")))
        if not isinstance(port, int) or isinstance(port, bool):
            return
        if count > 1 or port in ports:
            also = f"variants.{ports[port][0]} ({ports[port][1]!r})" if port in ports else \
                f"the {count} variants it expands into"
            raise FieldProblem(where, f"port {port} is fixed for {v.name!r} and for {also}: with isolation: gpus "
                               "variants share a node, so each needs its own port (or leave port out)")
        ports[port] = (i, v.name)

    @model_validator(mode="after")
    def _env_set_by_sglbench(self) -> "ExperimentSpec":
        """An env key the tool sets itself (cluster/engines/server_env.py) is refused where it is written: given
        here it would be overwritten without a word (SGLBENCH_SIM) or override the tool (Ray's GPU pinning)."""
        for i, v in enumerate(self.variants):
            owned = set_by_sglbench(v.tuning.kind if v.tuning is not None else None)
            for where, env in ((("variants", i, "env"), v.env), (("server", "env"), self.server.env)):
                key = next((k for k in env if k in owned), None)
                if key is not None:
                    for_whom = f" for variant {v.name!r}" if where[0] == "server" and key not in \
                        set_by_sglbench(None) else ""
                    raise FieldProblem(where + (key,), f"{key} is set by {owned[key]}{for_whom}: remove it")
        return self

    @model_validator(mode="after")
    def _search_slo(self) -> "ExperimentSpec":
        if self.load.search is not None and (self.slo is None or not self.slo.model_dump(exclude_none=True)):
            raise FieldProblem(("load", "search"), "a capacity search looks for the highest load meeting the SLO: "
                               "set slo: with ttft_ms, tpot_ms and/or e2e_ms")
        return self

    @model_validator(mode="after")
    def _trace_arrivals(self) -> "ExperimentSpec":
        if self.load.arrival != "trace":
            return self
        if not self.load.request_rate:
            raise FieldProblem(("load", "request_rate"), "arrival: trace rescales the recorded times to each "
                               "request_rate: give at least one")
        for i, w in enumerate(self.workloads):
            if w.prompts.source != "trace":
                raise FieldProblem(("workloads", i, "prompts", "source"), f"arrival: trace sends at the times "
                                   f"of a trace, but workload {w.name!r} has prompt source {w.prompts.source!r}")
        return self


__all__ = ["ActiveTuning", "ArgValue", "BackendPair", "BackendSweepOptions", "BackendSweepTuning", "ClusterSpec",
           "ConversationPrompts", "CorrectnessSpec", "DraftSteps", "ENGINES", "EngineLauncher", "EngineName",
           "ExperimentSpec", "FieldProblem", "FlashinferAutotuneOptions", "FlashinferAutotuneTuning", "JsonlPrompts",
           "LENGTH_TAGS", "Length", "LengthDist", "LoadSpec", "LocalPath", "ModelSpec", "NoOptions", "NoTuning",
           "OWNED_FLAGS", "PROMPT_SOURCES", "PROMPT_TAGS", "ProfileSpec", "PromptSource", "RandomIdsPrompts",
           "SESSION_SOURCES", "SLOSpec", "SPEC_VERSION", "STEP_TAGS", "SearchSpec", "ServerSpec", "SessionSpec",
           "SharedPrefix", "SpecError", "SpeculativeSpec", "TUNING_MODELS", "TelemetrySpec", "TextPrompts",
           "TokenCount", "TracePrompts", "TritonMoeOptions", "TritonMoeTuning", "TuningSpec", "VariantSpec",
           "WorkloadSpec", "arg_flag", "check_name", "coercible", "expanded_names"]
