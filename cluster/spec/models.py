"""Experiment spec: typed, frozen models of an experiment YAML and a loader whose errors name file, line and field."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Mapping, Optional, Union, get_args, get_origin

from pydantic import (AfterValidator, BaseModel, ConfigDict, Discriminator, Field, FieldSerializationInfo, StrictBool, StrictFloat,
                      StrictInt, StrictStr, Tag, ValidationInfo, field_serializer, field_validator, model_validator)

from cluster.errors import UserError
from cluster.sim.model import Knobs
from cluster.spec import bounds as B
from cluster.spec.expansion import Pair, step_names, sweep_name, sweep_pairs
from cluster.spec.locations import DATASET_SCHEMES, MODEL_SCHEMES, check_local_path, check_location, check_word

SPEC_VERSION = 1
"""The only experiment-spec version this release reads (`version:` in the YAML)."""

ENGINES = ("sglang", "sim", "vllm")
EngineName = Literal["sglang", "sim", "vllm"]
ArgValue = Union[bool, int, float, str, list[Union[int, float, str]], None]
"""A server flag's value: the engine's own parser judges its range (cluster/engines/flagcheck.py), except `port`."""
LocalPath = Annotated[str, AfterValidator(lambda v: check_local_path(v, "path"))]
"""A file or directory on the node: one line, no NUL, no URI scheme."""
Port = Annotated[int, Field(ge=B.PORT_MIN, le=B.PORT_MAX)]

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_FLAG_RE = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class FieldProblem(UserError):
    """A validator's complaint about a sub-field (raised inside pydantic validators only, which turn it into a
    SpecError): `loc` is appended to the field's location in the error."""

    def __init__(self, loc: tuple[Union[str, int], ...], message: str) -> None:
        super().__init__(message)
        self.loc = loc


class SpecError(UserError):
    """A spec problem located in a file: `file:line: field: message` (`message` says what was expected)."""

    def __init__(self, file: str, line: Optional[int], field: str, message: str) -> None:
        where = f"{file}:{line}" if line else file
        super().__init__(f"{where}: {field or '<root>'}: {message}", file=file, field=field, expected=message)
        self.file, self.line, self.field, self.message = file, line, field, message


def check_name(value: str, what: str = "name") -> str:
    """Names become path components and partition values: keep them to a safe alphabet."""
    if not _NAME_RE.match(value) or ".." in value:
        raise ValueError(
            f"{what} {value!r} must be 1-64 characters of letters, digits, '.', '_' or '-', "
            "starting with a letter or digit, without '..' (it becomes a path component)"
        )
    return value


def _allows_bool(annotation: Any) -> bool:
    if annotation is bool or annotation is Any:
        return True
    return any(_allows_bool(a) for a in get_args(annotation))


def _scalar_types(annotation: Any) -> set[Any]:
    """The scalar types an annotation admits (str for a Literal of strings, Any for Any)."""
    if annotation in (bool, int, float, str) or annotation is Any:
        return {annotation}
    if get_origin(annotation) is Literal:
        return {type(a) for a in get_args(annotation)}
    return set().union(*(_scalar_types(a) for a in get_args(annotation))) if get_args(annotation) else set()


def _coercible(text: str) -> bool:
    """A string pydantic's lax mode would read as a number or boolean ("3", "2.5", "true", "off")."""
    try:
        float(text)
        return True
    except ValueError:
        return text.strip().lower() in ("true", "false", "yes", "no", "on", "off", "t", "f", "y", "n")


def _refuses_strings(annotation: Any) -> bool:
    """A number or boolean field (or a list of them) that must not read "3" as 3: YAML gives real numbers."""
    kinds = _scalar_types(annotation)
    return bool(kinds & {bool, int, float}) and not kinds & {str, Any}


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, use_attribute_docstrings=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_numbers(cls, v: Any, info: ValidationInfo) -> Any:
        # YAML turns `yes`/`on`/`true` into booleans, which pydantic would silently read as 1.
        values = v if isinstance(v, list) else [v]
        if any(isinstance(x, bool) for x in values) and info.field_name is not None:
            if not _allows_bool(cls.model_fields[info.field_name].annotation):
                raise ValueError("expected a number or string, got a boolean (YAML reads yes/no/on/off as booleans)")
        # strict numbers: pydantic would read the string "3" as 3; a quoted number in YAML is a mistake to show
        quoted = [x for x in values if isinstance(x, str) and _coercible(x)]
        if quoted and info.field_name is not None and _refuses_strings(cls.model_fields[info.field_name].annotation):
            raise ValueError(f"expected a number or boolean, got the string {quoted[0]!r} (remove the quotes)")
        if info.field_name is not None and info.field_name not in _FREE_TEXT_FIELDS \
                and not _holds_model(cls.model_fields[info.field_name].annotation):
            _check_words(v, ())  # a sub-model checks its own fields
        return v


_FREE_TEXT_FIELDS = frozenset({"chat_template_kwargs"})
"""Fields whose strings are data (template variables sent as JSON), not argv words, env values or paths."""


def _holds_model(annotation: Any) -> bool:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return True
    return any(_holds_model(a) for a in get_args(annotation))


def _check_words(v: Any, loc: tuple[Union[str, int], ...]) -> None:
    """Every string in a field's value (dict keys included) is one line without NUL or control characters."""
    if isinstance(v, str):
        try:
            check_word(v)
        except ValueError as e:
            raise FieldProblem(loc, str(e)) from None
    elif isinstance(v, (list, tuple)):
        for i, x in enumerate(v):
            _check_words(x, loc + (i,))
    elif isinstance(v, dict):
        for k, x in v.items():
            _check_words(k, loc + (str(k),))
            _check_words(x, loc + (str(k),))


_SPECULATIVE_BLOCK = "the variant's speculative: block (algorithm, num_steps, eagle_topk, num_draft_tokens, draft_model_path)"
OWNED_FLAGS: dict[str, str] = {
    "model-path": "model.path", "model": "model.path",
    "tp-size": "tp (model.tp, or a variant's tp)", "tp": "tp (model.tp, or a variant's tp)",
    "tensor-parallel-size": "tp (model.tp, or a variant's tp)",
    "host": "nothing: sglbench binds each server to 127.0.0.1 on its node",
    "served-model-name": "model.served_name",
    **{f"speculative-{k}": _SPECULATIVE_BLOCK for k in (
        "algorithm", "algo", "num-steps", "eagle-topk", "num-draft-tokens", "draft-model-path", "draft-model",
        "draft", "config")},
}
"""Server args a typed field of the spec sets: given in `args` they would be dropped or fight the field, so they
are refused, naming the field to use. (`port` stays an arg: it fixes the port instead of a free one.)"""


_STRING_BOOLEANS = ("true", "false", "yes", "no", "on", "off")


def _check_args(args: Mapping[str, ArgValue]) -> Mapping[str, ArgValue]:
    spelled: dict[str, str] = {}
    for key, value in args.items():
        flag = key.replace("_", "-")
        if flag in spelled:
            raise FieldProblem((key,), f"server arg {key!r} is the flag --{flag} again (also given as "
                               f"{spelled[flag]!r}): give each flag once, in one spelling")
        spelled[flag] = key
        if isinstance(value, str) and value.strip().lower() in _STRING_BOOLEANS:
            raise FieldProblem((key,), f"server arg {key!r} is the string {value!r}: a boolean flag is written "
                               "unquoted (true: the bare flag, false: left out); it would be passed as the word "
                               f"{value!r}")
        if flag == "port" and (isinstance(value, bool) or not isinstance(value, int)
                               or not B.PORT_MIN <= value <= B.PORT_MAX):
            raise FieldProblem((key,), f"server arg 'port' {value!r} is not a TCP port: expected an integer "
                               f"{B.PORT_MIN}-{B.PORT_MAX} (TCP port range), or leave it out for a free port")
        if key.startswith("-"):
            raise FieldProblem((key,), f"server arg {key!r}: write the flag without leading dashes, e.g. 'tp-size'")
        if not _FLAG_RE.match(key):
            raise FieldProblem((key,), f"server arg {key!r} is not a flag name (lowercase letters, digits, '-' or '_')")
        owner = OWNED_FLAGS.get(key.replace("_", "-"))
        if owner is not None:
            raise FieldProblem((key,), f"server arg {key!r} is set by the spec; use {owner} instead")
    return args


def arg_flag(args: Mapping[str, ArgValue], flag: str) -> Optional[str]:
    """The key under which `args` gives `flag` (dashes or underscores), or None."""
    return next((k for k in args if k.replace("_", "-") == flag), None)


def _check_env(env: Mapping[str, str]) -> Mapping[str, str]:
    for key in env:
        if not _ENV_RE.match(key):
            raise FieldProblem((key,), f"environment variable name {key!r} is not valid (expected [A-Za-z_][A-Za-z0-9_]*)")
    return env


class EngineLauncher(_Frozen):
    """How to start one engine on the node: its own interpreter or a full launcher command."""

    python: Optional[LocalPath] = None
    """Interpreter path for the engine (e.g. SGLang's venv); `python -m <engine module>` is run with it."""
    launcher: Optional[list[str]] = None
    """A full command that replaces `python -m <module>` (e.g. ["sglang", "serve"]); server args follow it."""
    version: Optional[str] = None
    """Engine version when it cannot be read from the installed package (a remote image)."""

    @model_validator(mode="after")
    def _one_way(self) -> "EngineLauncher":
        if self.python and self.launcher:
            raise FieldProblem(("launcher",), "give either 'python' or 'launcher', not both")
        if self.launcher is not None and not self.launcher:
            raise FieldProblem(("launcher",), "'launcher' must be a non-empty list of argv words")
        if self.launcher:
            try:
                check_local_path(self.launcher[0], "launcher program")
            except ValueError as e:
                raise FieldProblem(("launcher", 0), str(e)) from None
        return self


class ModelSpec(_Frozen):
    path: Annotated[str, AfterValidator(lambda v: check_location(v, "model.path", MODEL_SCHEMES))] = Field(min_length=1)
    """Checkpoint directory as seen on the GPU node (e.g. the model volume's mount point in k8s/), or sim://NAME."""
    engine: EngineName = "sglang"
    """Engine every variant uses unless it sets its own: sglang, vllm, or sim (the simulated SGLang server)."""
    tp: int = Field(default=1, ge=1, le=B.MAX_GPUS_PER_NODE)
    """Tensor-parallel size (GPUs per server) unless a variant sets its own."""
    served_name: Optional[str] = None
    """Model name the OpenAI endpoints expect (default: the engine's own, from the path)."""


class ServerSpec(_Frozen):
    """Server args (flag name without dashes → value) and environment shared by every variant."""

    args: dict[str, ArgValue] = Field(default_factory=dict)
    """Server flags without leading dashes -> value (true = a bare flag), passed to every variant."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables set for every variant's server."""

    _a = field_validator("args")(classmethod(lambda cls, v: _check_args(v)))
    _e = field_validator("env")(classmethod(lambda cls, v: _check_env(v)))


_Steps = Annotated[int, Field(ge=1, le=B.MAX_DRAFT_STEPS)]
DraftSteps = Annotated[Union[Annotated[_Steps, Tag("one")], Annotated[list[_Steps], Tag("list")]],
                       Discriminator(lambda v: "list" if isinstance(v, list) else "one")]
"""Speculative draft steps: one value, or a list that expands the variant into one per value."""
STEP_TAGS = ("one", "list")


class SpeculativeSpec(_Frozen):
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


class FlashinferAutotuneOptions(_Frozen):
    """`flashinfer_autotune`: one launch with FlashInfer autotuning on, its cache the artifact (cluster/tuning/stage.py)."""

    extend: bool = False
    """Also tune the prefill (extend) buckets (SGLANG_FLASHINFER_AUTOTUNE_EXTEND)."""
    warmup_requests: int = Field(default=2, ge=0, le=B.MAX_WARMUP_REQUESTS)
    """Requests of the workload's shapes sent to the tuning launch before its cache is archived."""


class TritonMoeOptions(_Frozen):
    """`triton_moe`: SGLang's fused-MoE Triton config search for the model's (E, N, dtype), split across GPUs."""

    model_config_path: Optional[LocalPath] = Field(default=None, alias="model_config")
    """Directory (or config.json) with the BF16 base config, when the served checkpoint's is not the one to tune."""
    dtype: str = "auto"
    """A Triton MoE dtype (auto, fp8_w8a8, int8_w8a16, int8_w8a8); NVFP4 is refused (cluster/tuning/stage.py)."""
    batch_sizes: Optional[list[Annotated[int, Field(ge=1, le=B.MAX_BATCH_SIZE)]]] = Field(default=None, min_length=1)
    """Batch sizes to tune (default: SGLang's list)."""
    ep: int = Field(default=1, ge=1, le=B.MAX_GPUS_PER_NODE)
    """Expert-parallel size the configs are tuned for."""
    max_configs: Optional[int] = Field(default=None, ge=1, le=B.MAX_SEARCH_CONFIGS)
    """Subsample of the search space per batch size (default: all of it)."""
    seed: int = Field(default=0, ge=0, le=B.MAX_SEED)
    """Seed of the search-space subsample."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, populate_by_name=True,
                              use_attribute_docstrings=True, protected_namespaces=())


class BackendPair(_Frozen):
    """One (MoE runner, FP4 GEMM) back-end pair; either side may be left out."""

    moe_runner_backend: Optional[str] = None
    """MoE runner back end of the pair (--moe-runner-backend)."""
    fp4_gemm_backend: Optional[str] = None
    """FP4 GEMM back end of the pair (--fp4-gemm-backend)."""


def _name_list(v: Any) -> Any:
    return [v] if isinstance(v, str) else v


class BackendSweepOptions(_Frozen):
    """`backend_sweep`: one variant per (MoE runner, FP4 GEMM) back-end pair; no artifact."""

    moe_runner_backend: list[str] = Field(default_factory=list)
    """MoE runner back ends to sweep (one name or a list)."""
    fp4_gemm_backend: list[str] = Field(default_factory=list)
    """FP4 GEMM back ends to sweep (one name or a list)."""
    exclude: list[BackendPair] = Field(default_factory=list)
    """Pairs to leave out of the cross product."""
    combination: Optional[dict[str, str]] = None
    """Set by the planner on each expanded variant: the server args (spec spelling) of its pair."""

    _lists = field_validator("moe_runner_backend", "fp4_gemm_backend", mode="before")(
        classmethod(lambda cls, v: _name_list(v)))


class NoOptions(_Frozen):
    """`none`: no tuning (the same as leaving `tuning:` out)."""


class FlashinferAutotuneTuning(_Frozen):
    kind: Literal["flashinfer_autotune"] = "flashinfer_autotune"
    """Tuning kind: FlashInfer's autotuner cache as an artifact."""
    options: FlashinferAutotuneOptions = Field(default_factory=FlashinferAutotuneOptions)
    """Options of the flashinfer_autotune kind."""


class TritonMoeTuning(_Frozen):
    kind: Literal["triton_moe"] = "triton_moe"
    """Tuning kind: SGLang's fused-MoE Triton config search."""
    options: TritonMoeOptions = Field(default_factory=TritonMoeOptions)
    """Options of the triton_moe kind."""


class BackendSweepTuning(_Frozen):
    kind: Literal["backend_sweep"] = "backend_sweep"
    """Tuning kind: one variant per back-end pair."""
    options: BackendSweepOptions = Field(default_factory=BackendSweepOptions)
    """Options of the backend_sweep kind."""


class NoTuning(_Frozen):
    kind: Literal["none"] = "none"
    """Tuning kind: none (the same as leaving tuning: out)."""
    options: NoOptions = Field(default_factory=NoOptions)
    """No options."""


TUNING_MODELS: dict[str, type[BaseModel]] = {"flashinfer_autotune": FlashinferAutotuneTuning,
                                              "triton_moe": TritonMoeTuning, "backend_sweep": BackendSweepTuning,
                                              "none": NoTuning}
"""Tuning kind → its model (the kinds are described in cluster/tuning/stage.py, which declares them once)."""


def _tuning_kind(v: Any) -> Optional[str]:
    kind = v.get("kind", "none") if isinstance(v, dict) else getattr(v, "kind", None)
    return kind if isinstance(kind, str) and kind in TUNING_MODELS else None


TuningSpec = Annotated[
    Union[Annotated[FlashinferAutotuneTuning, Tag("flashinfer_autotune")], Annotated[TritonMoeTuning, Tag("triton_moe")],
          Annotated[BackendSweepTuning, Tag("backend_sweep")], Annotated[NoTuning, Tag("none")]],
    Discriminator(_tuning_kind, custom_error_type="tuning_kind",
                  custom_error_message="unknown tuning kind; expected one of: " + ", ".join(TUNING_MODELS))]
"""A variant's `tuning: {kind, options}`: one model per kind, so a misspelled option is refused with its field."""
ActiveTuning = Union[FlashinferAutotuneTuning, TritonMoeTuning, BackendSweepTuning]
"""What a resolved variant carries (kind `none` resolves to no tuning)."""


class ProfileSpec(_Frozen):
    """A kernel profile of the variant's server after its measured windows (SGLang /start_profile, /stop_profile)."""

    steps: int = Field(ge=1, le=B.MAX_PROFILE_STEPS)
    """Forward steps the torch profiler records (SGLang's `num_steps`: it stops by itself after them)."""
    requests: int = Field(default=4, ge=1, le=B.MAX_PROFILE_STEPS)
    """Requests of the variant's first workload sent to drive those steps (the server is idle after its windows)."""
    max_archive_bytes: int = Field(default=64 * 1024**2, ge=1024, le=B.MAX_PROFILE_ARCHIVE_BYTES)
    """The archived trace directory is refused above this size (the summary table is still written)."""


class VariantSpec(_Frozen):
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
    _a = field_validator("args")(classmethod(lambda cls, v: _check_args(v)))
    _e = field_validator("env")(classmethod(lambda cls, v: _check_env(v)))

    @field_serializer("sim")
    def _sim_as_set(self, knobs: Knobs, info: FieldSerializationInfo) -> dict[str, object]:
        """Only the knobs this variant sets: a dumped and re-read spec must not turn every default into an
        override of the experiment's `sim:` block (which made a dumped demo run at time_scale 1.0)."""
        out: dict[str, object] = knobs.model_dump(mode=info.mode, exclude_unset=True)
        return out


def expanded_names(v: VariantSpec) -> list[str]:
    """The names the planner gives a declared variant's expansions (cluster/spec/expansion.py's rule)."""
    names = step_names(v.name, v.speculative.steps()) if v.speculative is not None else [v.name]
    t = v.tuning
    if not isinstance(t, BackendSweepTuning) or t.options.combination is not None:
        return names
    o = t.options
    if not o.moe_runner_backend and not o.fp4_gemm_backend:
        return names  # refused by the planner with its own message (backend_sweep needs back ends)
    excluded: set[Pair] = {(e.moe_runner_backend, e.fp4_gemm_backend) for e in o.exclude}
    return [sweep_name(n, p) for n in names for p in sweep_pairs(o.moe_runner_backend, o.fp4_gemm_backend, excluded)]


class SharedPrefix(_Frozen):
    """`groups` seeded random prefixes (system prompts) of `tokens` ids each; every request starts with one of them
    (the groups take equal shares of the requests, in a seeded order) and goes on with ids of its own, so a prefix
    cache serves all but the first request of each group its prefix (cluster/loadgen/datasets.py)."""

    groups: int = Field(ge=1, le=B.MAX_PREFIX_GROUPS)
    """How many distinct prefixes."""
    tokens: int = Field(ge=1, le=B.MAX_TOKENS)
    """Length of each prefix in tokens (part of input_tokens, which must be longer)."""


class RandomIdsPrompts(_Frozen):
    """`random_ids`: seeded token ids drawn uniformly from [100, vocab_size), of exactly the drawn input length."""

    source: Literal["random_ids"] = "random_ids"
    """Seeded random token ids."""
    vocab_size: int = Field(default=32000, ge=16, le=B.MAX_VOCAB)
    """Token ids are drawn below this."""
    shared_prefix: Optional[SharedPrefix] = None
    """Start every prompt with one of `groups` shared prefixes of `tokens` ids (prefix caching measured; the
    run's prefix_hit_rate says how much of the input the server served from its cache)."""


def _need_path(source: str, path: Optional[str]) -> None:
    if not path:
        raise FieldProblem(("path",), f"prompt source {source!r} needs 'path'")


class JsonlPrompts(_Frozen):
    """`jsonl`: one object per line with `prompt` (text) or `input_ids`, sent as given."""

    source: Literal["jsonl"] = "jsonl"
    """A prompt file."""
    path: Optional[LocalPath] = None
    """The JSONL file (relative paths: against the directory sglbench runs in)."""

    @model_validator(mode="after")
    def _path(self) -> "JsonlPrompts":
        _need_path(self.source, self.path)
        return self


class TextPrompts(_Frozen):
    """`text`: a local corpus tokenized on the node with the model's own tokenizer, cut into windows."""

    source: Literal["text"] = "text"
    """A corpus tokenized to exact lengths."""
    path: Optional[LocalPath] = None
    """The corpus: UTF-8 text, or JSONL with a `text`/`prompt` field per line."""
    tokenizer: Optional[LocalPath] = None
    """Directory (or tokenizer.json) of the tokenizer; default: the model's own directory."""

    @model_validator(mode="after")
    def _path(self) -> "TextPrompts":
        _need_path(self.source, self.path)
        return self


class ConversationPrompts(_Frozen):
    """`sharegpt` (JSON array or JSONL of `{conversations: [{from, value}]}`) or `messages` (JSONL of OpenAI-style
    `{messages: [{role, content}]}`): the turns before the first assistant turn are the prompt, that assistant turn
    the reference answer (cluster/loadgen/conversations.py)."""

    source: Literal["sharegpt", "messages"]
    """sharegpt: `conversations` of `{from, value}` turns; messages: OpenAI-style `messages` of `{role, content}`."""
    path: Optional[LocalPath] = None
    """The dataset file: a JSON array or JSONL (relative paths: against the directory sglbench runs in)."""
    category_field: str = Field(default="category", min_length=1)
    """The row key holding the row's category (rows without one get `category`, else none)."""
    category: Optional[str] = None
    """Category of rows that carry none."""
    categories: Optional[list[str]] = Field(default=None, min_length=1)
    """Keep only rows of these categories (the others are counted as filtered)."""
    max_input_tokens: Optional[int] = Field(default=None, ge=1, le=B.MAX_TOKENS)
    """Leave out (and count) rows whose prompt is longer than this many tokens (needs a tokenizer)."""
    tokenizer: Optional[LocalPath] = None
    """Directory (or tokenizer.json) to count tokens with, for `max_input_tokens` and `output_tokens: dataset`
    (default: the model's directory); without either the text is sent as written and the server tokenizes."""
    chat_template: bool = False
    """Render the turns with the model's own chat template (chat_template.jinja or tokenizer_config.json's
    `chat_template` beside the tokenizer), generation prompt included, and send those tokens: /generate then gets
    what /v1/chat/completions would have sent the model. Off: the turns' contents joined by a blank line."""
    chat_template_kwargs: dict[str, Union[StrictBool,
                                          Annotated[StrictInt, Field(ge=-B.MAX_TEMPLATE_INT, le=B.MAX_TEMPLATE_INT)],
                                          Annotated[StrictFloat, Field(ge=-1e300, le=1e300)], StrictStr]] = Field(
        default_factory=dict)
    """Template variables (e.g. `enable_thinking: false` for Qwen3.5), also sent as the chat API's
    `chat_template_kwargs`, so both paths render the same prompt."""

    _c = field_validator("category")(classmethod(lambda cls, v: v if v is None else check_name(v, "category")))

    @field_validator("categories")
    @classmethod
    def _cats(cls, v: Optional[list[str]]) -> Optional[list[str]]:
        for i, c in enumerate(v or []):
            try:
                check_name(c, "category")
            except ValueError as e:
                raise FieldProblem((i,), str(e)) from None
        return v

    @model_validator(mode="after")
    def _path(self) -> "ConversationPrompts":
        _need_path(self.source, self.path)
        return self


class TracePrompts(_Frozen):
    """`trace`: a recorded request trace (CSV or JSONL rows of timestamp_s or timestamp_ms, input_tokens,
    output_tokens; cluster/loadgen/traces.py): each request is seeded random ids of its row's input length with its
    row's output length as max_tokens; with `load.arrival: trace` rate points also send at the recorded times,
    rescaled to each request_rate."""

    source: Literal["trace"]
    """A request trace."""
    path: Optional[LocalPath] = None
    """The trace file: `.csv` with a header, else JSONL (relative paths: against the directory sglbench runs in)."""
    vocab_size: int = Field(default=32000, ge=16, le=B.MAX_VOCAB)
    """Token ids are drawn below this."""

    @model_validator(mode="after")
    def _path(self) -> "TracePrompts":
        _need_path(self.source, self.path)
        return self


PROMPT_SOURCES: dict[str, type[BaseModel]] = {"random_ids": RandomIdsPrompts, "jsonl": JsonlPrompts,
                                               "text": TextPrompts, "sharegpt": ConversationPrompts,
                                               "messages": ConversationPrompts, "trace": TracePrompts}
"""Prompt source name (the `source:` field) → its model."""


def _prompt_source(v: Any) -> Optional[str]:
    src = v.get("source", "random_ids") if isinstance(v, dict) else getattr(v, "source", None)
    if not isinstance(src, str) or src not in PROMPT_SOURCES:
        return None
    return "conversation" if src in ("sharegpt", "messages") else src


PromptSource = Annotated[
    Union[Annotated[RandomIdsPrompts, Tag("random_ids")], Annotated[JsonlPrompts, Tag("jsonl")],
          Annotated[TextPrompts, Tag("text")], Annotated[ConversationPrompts, Tag("conversation")],
          Annotated[TracePrompts, Tag("trace")]],
    Discriminator(_prompt_source, custom_error_type="prompt_source",
                  custom_error_message="unknown prompt source; expected one of: " + ", ".join(PROMPT_SOURCES))]
"""A workload's `prompts: {source, ...}`: one model per source, so an option of another source is refused."""
SESSION_SOURCES = ("random_ids", "sharegpt", "messages")
"""Prompt sources whose requests can be sessions: random ids (each turn new ids) and conversations (their later
user turns)."""
PROMPT_TAGS = ("random_ids", "jsonl", "text", "conversation", "trace")
"""The union's tags as they appear in pydantic error locations (dropped from the locations shown)."""


class SessionSpec(_Frozen):
    """Multi-turn sessions (cluster/loadgen/sessions.py): each session sends `turns` requests one after another; a
    later turn's prompt is the previous turn's prompt, the answer the server gave it and a new user turn, sent
    `think_time_s` after that answer ended. Closed loop: `concurrency` is the number of sessions in flight (users);
    open loop: sessions start at request_rate / turns per second, so the long-run offered request rate is the
    point's request_rate."""

    turns: int = Field(ge=2, le=B.MAX_SESSION_TURNS)
    """Requests per session (num_requests must be a multiple)."""
    think_time_s: float = Field(default=0.0, ge=0.0, le=B.MAX_THINK_TIME_S)
    """Pause between an answer's end and the next turn's send (its mean when `think_time` is exponential)."""
    think_time: Literal["fixed", "exponential"] = "fixed"
    """fixed: every pause is think_time_s; exponential: seeded exponential pauses of that mean."""


class LengthDist(_Frozen):
    """A seeded distribution of token lengths (cluster/loadgen/lengths.py draws it), clipped to [min, max].

    uniform: integers in [min, max] (mean and std unused); normal: mean and std of the draws before clipping;
    lognormal: mean and std of the lognormal itself (not of its log), so heavy-tailed lengths keep their mean."""

    dist: Literal["uniform", "normal", "lognormal"]
    """The distribution's family."""
    mean: Optional[float] = Field(default=None, gt=0, le=B.MAX_TOKENS)
    """Mean length in tokens (normal, lognormal)."""
    std: Optional[float] = Field(default=None, ge=0, le=B.MAX_TOKENS)
    """Standard deviation in tokens (normal, lognormal)."""
    min: int = Field(ge=1, le=B.MAX_TOKENS)
    """Shortest length: draws below are clipped to it."""
    max: int = Field(ge=1, le=B.MAX_TOKENS)
    """Longest length: draws above are clipped to it (preflight checks it against the model's context)."""

    @model_validator(mode="after")
    def _bounds(self) -> "LengthDist":
        if self.min > self.max:
            raise FieldProblem(("max",), f"max {self.max} is below min {self.min}")
        if self.dist == "uniform":
            for name in ("mean", "std"):
                if getattr(self, name) is not None:
                    raise FieldProblem((name,), f"uniform draws from [min, max]; '{name}' is not used (remove it)")
        else:
            for name in ("mean", "std"):
                if getattr(self, name) is None:
                    raise FieldProblem((name,), f"a {self.dist} distribution needs '{name}'")
        return self

    def nominal(self) -> int:
        """The length a runs row records for it: the mean (uniform: the middle of [min, max]), clipped."""
        centre = (self.min + self.max) / 2 if self.mean is None else self.mean
        return int(round(min(max(centre, self.min), self.max)))


TokenCount = Annotated[int, Field(ge=1, le=B.MAX_TOKENS)]


def _length_kind(v: Any) -> str:
    if isinstance(v, (dict, LengthDist)):
        return "dist"
    return "dataset" if v == "dataset" else "count"


Length = Annotated[Union[Annotated[TokenCount, Tag("count")], Annotated[LengthDist, Tag("dist")],
                         Annotated[Literal["dataset"], Tag("dataset")]], Discriminator(_length_kind)]
"""A workload's input_tokens / output_tokens: a fixed count, a seeded distribution, or the dataset's own lengths."""
LENGTH_TAGS = ("count", "dist", "dataset")


def _check_length(v: Any) -> Any:
    if isinstance(v, str) and v != "dataset":
        if _coercible(v):
            raise ValueError(f"expected a number or boolean, got the string {v!r} (remove the quotes)")
        raise ValueError(f"expected a token count, a {{dist, mean, std, min, max}} mapping or 'dataset', got {v!r}")
    return v


def _length_max(v: Length) -> Optional[int]:
    return v if isinstance(v, int) else v.max if isinstance(v, LengthDist) else None


def _length_nominal(v: Length) -> Optional[int]:
    return v if isinstance(v, int) else v.nominal() if isinstance(v, LengthDist) else None


class WorkloadSpec(_Frozen):
    name: str
    """Workload name (letters, digits, '.', '_', '-')."""
    input_tokens: Length
    """A fixed count, `{dist, mean, std, min, max}`, or `dataset` (the prompt as given: jsonl, sharegpt, messages)."""
    output_tokens: Length
    """A fixed count, a distribution (one max_tokens per request), or `dataset` (the reference answer's length)."""
    num_requests: int = Field(ge=1, le=B.MAX_REQUESTS)
    """Requests in each measured window."""
    prompts: PromptSource = Field(default_factory=RandomIdsPrompts)
    """Where the prompts come from (`source:` picks the kind)."""
    ignore_eos: bool = True
    """Generate exactly output_tokens, ignoring end-of-sequence."""
    temperature: float = Field(default=0.0, ge=0.0, le=B.MAX_TEMPERATURE)
    """Sampling temperature (0 = greedy)."""
    api: Literal["native", "completions", "chat"] = "native"
    """Which endpoint the load generator drives: SGLang /generate, or the OpenAI endpoints."""
    sessions: Optional[SessionSpec] = None
    """Multi-turn sessions: each later turn appends the previous answer (prefix caching across turns measured)."""

    _n = field_validator("name")(classmethod(lambda cls, v: check_name(v, "workload name")))
    _l = field_validator("input_tokens", "output_tokens", mode="before")(classmethod(lambda cls, v: _check_length(v)))

    @model_validator(mode="after")
    def _lengths(self) -> "WorkloadSpec":
        src = self.prompts.source
        if self.input_tokens == "dataset" and src in ("random_ids", "text"):
            raise FieldProblem(("input_tokens",), f"prompt source {src!r} has no lengths of its own; give a count "
                               "or a distribution")
        if src in ("sharegpt", "messages") and self.input_tokens != "dataset":
            raise FieldProblem(("input_tokens",), f"prompt source {src!r} sends each prompt as written: "
                               "input_tokens must be 'dataset'")
        if isinstance(self.prompts, ConversationPrompts) and self.prompts.chat_template_kwargs \
                and not self.prompts.chat_template and self.api != "chat":
            raise FieldProblem(("prompts", "chat_template_kwargs"), "template variables need a template: set "
                               "prompts.chat_template: true (or api: chat, where the server renders it)")
        sp = getattr(self.prompts, "shared_prefix", None)
        if sp is not None:
            shortest = self.input_tokens.min if isinstance(self.input_tokens, LengthDist) else self.input_tokens
            assert isinstance(shortest, int)  # random_ids refuses 'dataset' above
            if shortest <= sp.tokens:
                raise FieldProblem(("input_tokens",), f"every prompt starts with a shared prefix of {sp.tokens} "
                                   f"tokens: input_tokens (its shortest: {shortest}) must be longer than that")
        if src == "trace" and (self.input_tokens != "dataset" or self.output_tokens != "dataset"):
            raise FieldProblem(("input_tokens" if self.input_tokens != "dataset" else "output_tokens",),
                               "prompt source 'trace' replays each row's own lengths: input_tokens and "
                               "output_tokens must be 'dataset'")
        if self.output_tokens == "dataset" and src not in ("sharegpt", "messages", "trace"):
            raise FieldProblem(("output_tokens",), "output_tokens 'dataset' takes each row's reference answer "
                               "length: it needs prompt source 'sharegpt', 'messages' or 'trace'")
        if self.sessions is not None:
            self._check_sessions(self.sessions)
        return self

    def _check_sessions(self, s: SessionSpec) -> None:
        src = self.prompts.source
        if src not in SESSION_SOURCES:
            raise FieldProblem(("sessions",), f"prompt source {src!r} has no later turns: sessions need prompt "
                               f"source {' or '.join(repr(x) for x in SESSION_SOURCES)}")
        if src == "random_ids" and self.api != "native":
            raise FieldProblem(("api",), "sessions over random_ids append the answer's token ids, which only the "
                               "native /generate stream returns: use api: native (or a sharegpt/messages dataset)")
        if self.output_tokens == "dataset":
            raise FieldProblem(("output_tokens",), "sessions answer each turn with the model's own answer: give "
                               "output_tokens a count or a distribution, not 'dataset'")
        if self.num_requests % s.turns:
            raise FieldProblem(("num_requests",), f"num_requests {self.num_requests} must be a multiple of "
                               f"sessions.turns {s.turns} (every session sends all its turns)")

    def prompt_tokens_max(self) -> Optional[int]:
        """The longest prompt a request can carry (None: the dataset's own): a session's last turn holds every
        earlier turn's prompt and answer."""
        inp = self.input_tokens_max()
        if inp is None or self.sessions is None:
            return inp
        out = self.output_tokens_max()
        assert out is not None  # sessions refuse output_tokens: dataset
        return self.sessions.turns * inp + (self.sessions.turns - 1) * out

    def input_tokens_max(self) -> Optional[int]:
        """The longest input this workload asks for (None: the dataset's own, checked row by row)."""
        return _length_max(self.input_tokens)

    def output_tokens_max(self) -> Optional[int]:
        return _length_max(self.output_tokens)

    def input_tokens_nominal(self) -> Optional[int]:
        """The input length a runs row records (a distribution's mean; None for the dataset's own lengths)."""
        return _length_nominal(self.input_tokens)

    def output_tokens_nominal(self) -> Optional[int]:
        return _length_nominal(self.output_tokens)

    def identity(self) -> dict[str, object]:
        """What the run key hashes: the full dump, in the form workloads had before distributions and prompt
        source kinds (random_ids and jsonl without their new defaults), so existing datasets keep their keys."""
        dump: dict[str, object] = self.model_dump(mode="json")
        p = dump["prompts"]
        assert isinstance(p, dict)
        if p["source"] in ("random_ids", "jsonl", "text"):
            kept: dict[str, object] = {"source": p["source"], "path": p.get("path"),
                                       "vocab_size": p.get("vocab_size", 32000), "tokenizer": p.get("tokenizer")}
            if p.get("shared_prefix") is not None:
                kept["shared_prefix"] = p["shared_prefix"]
            dump["prompts"] = kept
        elif not p.get("chat_template") and not p.get("chat_template_kwargs"):
            p.pop("chat_template", None)  # conversation workloads without templates keep their earlier run keys
            p.pop("chat_template_kwargs", None)
        if dump.get("sessions") is None:
            dump.pop("sessions", None)  # workloads without sessions keep the run keys they had before them
        return dump


class SearchSpec(_Frozen):
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
        return self

    def step(self) -> float:
        """The resolution the bracket closes to."""
        if self.resolution is not None:
            return max(self.resolution, 1.0) if self.over == "concurrency" else self.resolution
        return 1.0 if self.over == "concurrency" else (self.max - self.min) / 32


class LoadSpec(_Frozen):
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
    search: Optional[SearchSpec] = None
    """Capacity at an SLO: search the highest load meeting `slo:` (besides any fixed points above)."""

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

    @model_validator(mode="after")
    def _arrival(self) -> "LoadSpec":
        if self.arrival == "gamma" and self.arrival_cv is None:
            raise FieldProblem(("arrival_cv",), "gamma arrivals need arrival_cv (the inter-arrival coefficient of "
                               "variation, e.g. 2 for bursty traffic)")
        if self.arrival == "poisson" and self.arrival_cv is not None:
            raise FieldProblem(("arrival_cv",), "arrival_cv is for arrival: gamma (Poisson's is 1 by definition)")
        return self

    @model_validator(mode="after")
    def _some(self) -> "LoadSpec":
        if not self.concurrency and not self.request_rate and self.search is None:
            raise ValueError("give at least one concurrency or request_rate (or a search)")
        if self.search is not None and self.actors_per_server > 1:
            raise FieldProblem(("search",), "a capacity search probes any concurrency in its range: it needs "
                               "actors_per_server: 1")
        if self.search is not None and self.search.over == "request_rate" and self.arrival == "trace":
            raise FieldProblem(("search", "over"), "a request-rate search runs Poisson or gamma arrivals, not trace")
        return self


class SLOSpec(_Frozen):
    ttft_ms: Optional[float] = Field(default=None, gt=0, le=B.MAX_LATENCY_MS)
    """Time-to-first-token limit per request, ms."""
    tpot_ms: Optional[float] = Field(default=None, gt=0, le=B.MAX_LATENCY_MS)
    """Time-per-output-token limit per request, ms."""
    e2e_ms: Optional[float] = Field(default=None, gt=0, le=B.MAX_LATENCY_MS)
    """End-to-end latency limit per request, ms."""


class CorrectnessSpec(_Frozen):
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


class ClusterSpec(_Frozen):
    """What the experiment assumes about the cluster; checked again against the live cluster at preflight."""

    gpus_per_node: int = Field(default=8, ge=1, le=B.MAX_GPUS_PER_NODE)
    """GPUs on the largest node: a variant's tensor-parallel group must fit on one node."""


class TelemetrySpec(_Frozen):
    """GPU telemetry during every measured window (cluster/telemetry/): NVML, or the simulator's device model."""

    enabled: bool = True
    """Sample the server's GPUs during each measured window."""
    rate_hz: float = Field(default=10.0, gt=0, le=B.MAX_TELEMETRY_HZ)
    """Samples per second (monotonic ns timestamps on the requests' clock)."""


class ExperimentSpec(_Frozen):
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
            for i, n in enumerate(names):
                if n in names[:i]:
                    raise FieldProblem((what, i, "name"), f"duplicate {what[:-1]} name {n!r} (names must be unique)")
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
        declared = {v.name: i for i, v in enumerate(self.variants)}
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
                other_i = produced.get(n, declared.get(n, i))
                if other_i != i:
                    j, k = sorted((i, other_i))
                    raise FieldProblem(("variants", k, "name"), f"variant name {n!r} is produced twice: by "
                                       f"variants.{j} ({self.variants[j].name!r}) and variants.{k} "
                                       f"({self.variants[k].name!r}); a num_steps list names its variants "
                                       "NAME-<steps> and a backend_sweep NAME-<backends>: rename one")
                produced[n] = i
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


