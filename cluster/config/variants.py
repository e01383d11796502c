"""A variant: the server configuration compared (engine, tp, args, env, speculative decoding, tuning, sim knobs,
profile), and the names the planner expands it into."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import (Discriminator, Field, FieldSerializationInfo, Tag, field_serializer, field_validator,
                      model_validator)

from cluster.config import bounds as B
from cluster.config.deployment import Deployment, EndpointDeployment, NodesDeployment, PDDeployment
from cluster.config.expansion import Pair, step_names, sweep_name, sweep_pairs
from cluster.config.fields import FieldProblem, FrozenModel, LocalPath, check_name
from cluster.config.server import ArgValue, _arg_shapes, _check_args, _check_env
from cluster.config.engines import EngineName
from cluster.config.sim_knobs import Knobs
from cluster.config.tuning import BackendSweepTuning, TuningSpec

_Steps = Annotated[int, Field(ge=1, le=B.MAX_DRAFT_STEPS)]
DraftSteps = Annotated[Union[Annotated[_Steps, Tag("one")], Annotated[list[_Steps], Tag("list")]],
                       Discriminator(lambda v: "list" if isinstance(v, list) else "one")]
"""Speculative draft steps: one value, or a list that expands the variant into one per value."""
STEP_TAGS = ("one", "list")


class AdaptiveSpec(FrozenModel):
    """SGLang's adaptive speculation (--speculative-adaptive): the server picks the draft depth by running batch size
    from a config of batch-size buckets -> candidate steps. Exactly one source: an earlier experiment's measured
    depth schedule (`results recommend` writes it as such a config), or a config file of your own."""

    experiment: Optional[str] = None
    """An earlier experiment's name: its `results recommend` depth schedule (concurrency points) is written as the
    config `<root>/<experiment>/adaptive-config[-<workload>].json` by `run` (validate and plan derive and check it
    without writing) and passed to SGLang by its absolute path."""
    root: Optional[LocalPath] = None
    """The results root that holds that experiment (default: the output root the run uses: `run --output`, else
    this experiment's `output`)."""
    workload: Optional[str] = None
    """Whose schedule, when that experiment measured several workloads (default: its only one)."""
    file: Optional[LocalPath] = None
    """An SGLang adaptive config JSON of your own (`{"1": {"candidate_steps": [3]}, "8": {...}}`)."""

    _n = field_validator("experiment", "workload")(
        classmethod(lambda cls, v: v if v is None else check_name(v, "name")))

    @model_validator(mode="after")
    def _one_source(self) -> "AdaptiveSpec":
        if (self.experiment is None) == (self.file is None):
            raise FieldProblem((), "give exactly one of experiment (an earlier experiment's depth schedule) or file "
                                   "(an SGLang adaptive config JSON)")
        if self.file is not None and (self.root is not None or self.workload is not None):
            raise FieldProblem(("root" if self.root is not None else "workload",),
                               "root and workload name an earlier experiment's schedule; they do not go with file")
        return self

    def config_path(self, output: str) -> str:
        """The config file as declared (the variant's identity): the file, or where the experiment's schedule is
        written under `root`, else under the output root `output`."""
        if self.file is not None:
            return self.file
        suffix = f"-{self.workload}" if self.workload else ""
        return f"{(self.root or output).rstrip('/')}/{self.experiment}/adaptive-config{suffix}.json"

    def launch_path(self, output_root: str, base_dir: Path) -> str:
        """The config file SGLang is given: absolute (a relative path is taken from the experiment's base dir, not
        from the server's working directory); `output_root` is the root the run uses."""
        p = Path(self.config_path(output_root))
        return str(p if p.is_absolute() else base_dir / p)


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
    adaptive: Optional[AdaptiveSpec] = None
    """SGLang's adaptive speculation from a depth schedule or a config file; num_steps is then the starting depth
    (one value, one of the config's candidate steps). `plan` asks SGLang's own code whether it would run it."""

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
        if self.adaptive is not None and isinstance(self.num_steps, list):
            raise FieldProblem(("num_steps",), "is the starting depth under adaptive speculation: one value, not a "
                                               "list (the config's buckets give the depths)")
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


ENDPOINT_REFUSES = ("tp", "args", "env", "speculative", "tuning", "profile")
"""What configures a server sglbench launches: refused on an endpoint variant (it would be silently ignored), and so
is any simulator knob of its own."""


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
    deployment: Optional[Deployment] = None
    """What serves this variant when it is not one server sglbench launches (default: one server of `tp` GPUs):
    {kind: replicas, replicas, policy} servers behind SGLang's gateway; {kind: pd, prefill, decode,
    transfer_backend} prefill/decode pools behind it; {kind: nodes, nodes} one server across nodes; {kind: endpoint,
    url, api_key_env, flush_cache} a deployment already running (nothing launched, no GPU reserved)."""

    _n = field_validator("name")(classmethod(lambda cls, v: check_name(v, "variant name")))
    _s = field_validator("args", mode="before")(classmethod(lambda cls, v: _arg_shapes(v)))
    _a = field_validator("args")(classmethod(lambda cls, v: _check_args(v)))
    _e = field_validator("env")(classmethod(lambda cls, v: _check_env(v)))

    @model_validator(mode="after")
    def _deployment_shape(self) -> "VariantSpec":
        d = self.deployment
        if isinstance(d, PDDeployment) and self.tp is not None:
            raise FieldProblem(("tp",), f"variant {self.name!r} is a prefill/decode deployment: each pool gives its "
                               "own tp (deployment.prefill.tp, deployment.decode.tp), so tp would be ignored; leave "
                               "it out")
        if isinstance(d, NodesDeployment) and self.tp is not None and self.tp % d.nodes:
            raise FieldProblem(("tp",), f"variant {self.name!r} spans {d.nodes} nodes: its tp {self.tp} must be a "
                               f"multiple of deployment.nodes (each node's process holds tp / nodes GPUs)")
        return self

    @model_validator(mode="after")
    def _endpoint_launches_nothing(self) -> "VariantSpec":
        if not isinstance(self.deployment, EndpointDeployment):
            return self
        # a value other than the default (a dumped spec names every field, a default one included)
        launch = [f for f in ENDPOINT_REFUSES if getattr(self, f) not in (None, {})]
        launch += ["sim"] if self.sim.model_fields_set else []
        if launch:
            raise FieldProblem((launch[0],), f"variant {self.name!r} is an endpoint that is already running "
                               f"(deployment.kind endpoint): sglbench launches nothing for it, so {launch[0]} would "
                               "be ignored; leave it out (the endpoint's own configuration is recorded from its "
                               "/server_info)")
        return self

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
