"""Experiment spec: typed, frozen models of an experiment YAML and a loader whose errors name file, line and field."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, Mapping, Optional, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

SPEC_VERSION = 1
"""The only experiment-spec version this release reads (`version:` in the YAML)."""

ENGINES = ("sglang", "sim", "vllm")
EngineName = Literal["sglang", "sim", "vllm"]
ArgValue = Union[bool, int, float, str, list[Union[int, float, str]], None]

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_FLAG_RE = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class SpecError(ValueError):
    """A spec problem located in a file: `file:line: field: message`."""

    def __init__(self, file: str, line: Optional[int], field: str, message: str) -> None:
        self.file, self.line, self.field, self.message = file, line, field, message
        where = f"{file}:{line}" if line else file
        super().__init__(f"{where}: {field or '<root>'}: {message}")


def check_name(value: str, what: str = "name") -> str:
    """Names become path components and partition values: keep them to a safe alphabet."""
    if not _NAME_RE.match(value) or value in (".", ".."):
        raise ValueError(
            f"{what} {value!r} must be 1-64 characters of letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return value


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _check_args(args: Mapping[str, ArgValue]) -> Mapping[str, ArgValue]:
    for key in args:
        if key.startswith("-"):
            raise ValueError(f"server arg {key!r}: write the flag without leading dashes, e.g. 'tp-size'")
        if not _FLAG_RE.match(key):
            raise ValueError(f"server arg {key!r} is not a flag name (lowercase letters, digits, '-' or '_')")
    return args


def _check_env(env: Mapping[str, str]) -> Mapping[str, str]:
    for key in env:
        if not _ENV_RE.match(key):
            raise ValueError(f"environment variable name {key!r} is not valid")
    return env


class EngineLauncher(_Frozen):
    """How to start one engine on the node: its own interpreter or a full launcher command."""

    python: Optional[str] = None
    """Interpreter path for the engine (e.g. SGLang's venv); `python -m <engine module>` is run with it."""
    launcher: Optional[list[str]] = None
    """A full command that replaces `python -m <module>` (e.g. ["sglang", "serve"]); server args follow it."""
    version: Optional[str] = None
    """Engine version when it cannot be read from the installed package (a remote image)."""

    @model_validator(mode="after")
    def _one_way(self) -> "EngineLauncher":
        if self.python and self.launcher:
            raise ValueError("give either 'python' or 'launcher', not both")
        if self.launcher is not None and not self.launcher:
            raise ValueError("'launcher' must be a non-empty list of argv words")
        return self


class ModelSpec(_Frozen):
    path: str = Field(min_length=1)
    engine: EngineName = "sglang"
    tp: int = Field(default=1, ge=1, le=64)
    served_name: Optional[str] = None


class ServerSpec(_Frozen):
    """Server args (flag name without dashes → value) and environment shared by every variant."""

    args: dict[str, ArgValue] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)

    _a = field_validator("args")(classmethod(lambda cls, v: _check_args(v)))
    _e = field_validator("env")(classmethod(lambda cls, v: _check_env(v)))


class SpeculativeSpec(_Frozen):
    """Speculative decoding; `num_steps` may be a list, which expands the variant into one per value."""

    algorithm: Literal["NEXTN", "EAGLE", "EAGLE3", "STANDALONE", "NGRAM", "MTP"] = "NEXTN"
    num_steps: Union[int, list[int]] = Field(default=1)
    eagle_topk: int = Field(default=1, ge=1, le=16)
    num_draft_tokens: Optional[int] = Field(default=None, ge=2)
    draft_model_path: Optional[str] = None

    @field_validator("algorithm", mode="before")
    @classmethod
    def _upper(cls, v: Any) -> Any:
        return v.upper() if isinstance(v, str) else v

    @field_validator("num_steps")
    @classmethod
    def _steps(cls, v: Union[int, list[int]]) -> Union[int, list[int]]:
        steps = v if isinstance(v, list) else [v]
        if not steps:
            raise ValueError("num_steps must not be empty")
        for s in steps:
            if not 1 <= s <= 16:
                raise ValueError(f"num_steps value {s} must be between 1 and 16")
        if len(set(steps)) != len(steps):
            raise ValueError(f"num_steps has duplicates: {steps}")
        return v

    @model_validator(mode="after")
    def _draft_tokens(self) -> "SpeculativeSpec":
        if self.num_draft_tokens is not None and self.eagle_topk == 1:
            steps = self.num_steps if isinstance(self.num_steps, list) else [self.num_steps]
            if len(steps) > 1:
                raise ValueError("num_draft_tokens cannot be fixed when num_steps is a list (it is steps + 1 at topk 1)")
            if self.num_draft_tokens != steps[0] + 1:
                raise ValueError(
                    f"num_draft_tokens {self.num_draft_tokens} is inconsistent with num_steps {steps[0]} at "
                    f"eagle_topk 1 (it must be num_steps + 1 = {steps[0] + 1}; SGLang would silently override it)"
                )
        if self.algorithm in ("EAGLE3", "STANDALONE") and not self.draft_model_path:
            raise ValueError(f"{self.algorithm} needs draft_model_path")
        return self

    def steps(self) -> list[int]:
        return list(self.num_steps) if isinstance(self.num_steps, list) else [self.num_steps]

    def draft_tokens_for(self, steps: int) -> int:
        if self.eagle_topk == 1:
            return steps + 1
        return self.num_draft_tokens if self.num_draft_tokens is not None else steps * self.eagle_topk + 1


class TuningSpec(_Frozen):
    """Tuning stage for a variant; its kinds are described in cluster/tuning.py."""

    kind: Literal["flashinfer_autotune", "triton_moe", "backend_sweep", "none"] = "none"
    options: dict[str, Any] = Field(default_factory=dict)


class VariantSpec(_Frozen):
    name: str
    engine: Optional[EngineName] = None
    tp: Optional[int] = Field(default=None, ge=1, le=64)
    args: dict[str, ArgValue] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    speculative: Optional[SpeculativeSpec] = None
    tuning: Optional[TuningSpec] = None
    sim: dict[str, Any] = Field(default_factory=dict)
    """Simulated-engine knobs for this variant (merged over the experiment's `sim:` block)."""
    baseline: bool = False

    _n = field_validator("name")(classmethod(lambda cls, v: check_name(v, "variant name")))
    _a = field_validator("args")(classmethod(lambda cls, v: _check_args(v)))
    _e = field_validator("env")(classmethod(lambda cls, v: _check_env(v)))


class PromptSource(_Frozen):
    source: Literal["random_ids", "jsonl", "text"] = "random_ids"
    path: Optional[str] = None
    """jsonl: one object per line with `prompt` (text) or `input_ids`; text: a corpus tokenized on the node."""
    vocab_size: int = Field(default=32000, ge=16)

    @model_validator(mode="after")
    def _path(self) -> "PromptSource":
        if self.source in ("jsonl", "text") and not self.path:
            raise ValueError(f"prompt source {self.source!r} needs 'path'")
        return self


class WorkloadSpec(_Frozen):
    name: str
    input_tokens: int = Field(ge=1, le=1_000_000)
    output_tokens: int = Field(ge=1, le=1_000_000)
    num_requests: int = Field(ge=1, le=10_000_000)
    prompts: PromptSource = Field(default_factory=PromptSource)
    ignore_eos: bool = True
    temperature: float = Field(default=0.0, ge=0.0)
    api: Literal["native", "completions", "chat"] = "native"
    """Which endpoint the load generator drives: SGLang /generate, or the OpenAI endpoints."""

    _n = field_validator("name")(classmethod(lambda cls, v: check_name(v, "workload name")))


class LoadSpec(_Frozen):
    concurrency: list[int] = Field(default_factory=list)
    request_rate: list[float] = Field(default_factory=list)
    """Open-loop Poisson arrival rates in requests/s."""
    max_concurrency: Optional[int] = Field(default=None, ge=1)
    """Cap on in-flight requests for open-loop load points."""

    @field_validator("concurrency")
    @classmethod
    def _conc(cls, v: list[int]) -> list[int]:
        for c in v:
            if c < 1:
                raise ValueError(f"concurrency {c} must be at least 1")
        if len(set(v)) != len(v):
            raise ValueError(f"concurrency has duplicates: {v}")
        return v

    @field_validator("request_rate")
    @classmethod
    def _rate(cls, v: list[float]) -> list[float]:
        for r in v:
            if not r > 0:
                raise ValueError(f"request_rate {r} must be positive")
        return v

    @model_validator(mode="after")
    def _some(self) -> "LoadSpec":
        if not self.concurrency and not self.request_rate:
            raise ValueError("give at least one concurrency or request_rate")
        return self


class SLOSpec(_Frozen):
    ttft_ms: Optional[float] = Field(default=None, gt=0)
    tpot_ms: Optional[float] = Field(default=None, gt=0)
    e2e_ms: Optional[float] = Field(default=None, gt=0)


class ExperimentSpec(_Frozen):
    version: Literal[1] = 1
    name: str
    model: ModelSpec
    engines: dict[EngineName, EngineLauncher] = Field(default_factory=dict)
    server: ServerSpec = Field(default_factory=ServerSpec)
    sim: dict[str, Any] = Field(default_factory=dict)
    variants: list[VariantSpec] = Field(min_length=1)
    workloads: list[WorkloadSpec] = Field(min_length=1)
    load: LoadSpec
    repeats: int = Field(default=1, ge=1, le=1000)
    order: Literal["grouped", "interleaved"] = "grouped"
    """grouped: each server starts once and runs all its points; interleaved: ABAB across repeats (restarts)."""
    warmup_requests: int = Field(default=2, ge=0, le=100_000)
    seed: int = Field(default=0, ge=0)
    isolation: Literal["node", "gpus"] = "node"
    output: str = "results"
    """Dataset root: a local path or a pyarrow filesystem URI (s3://, gs://, ...)."""
    slo: Optional[SLOSpec] = None
    health_timeout_s: float = Field(default=1800.0, gt=0)
    request_timeout_s: float = Field(default=600.0, gt=0)
    max_client_lag_ms: float = Field(default=10.0, gt=0)
    """A run whose client send lag p99 exceeds this is flagged invalid: the client, not the server, set the pace."""

    _n = field_validator("name")(classmethod(lambda cls, v: check_name(v, "experiment name")))

    @model_validator(mode="after")
    def _unique(self) -> "ExperimentSpec":
        for what, names in (("variant", [v.name for v in self.variants]), ("workload", [w.name for w in self.workloads])):
            seen: set[str] = set()
            for n in names:
                if n in seen:
                    raise ValueError(f"duplicate {what} name {n!r}")
                seen.add(n)
        if sum(1 for v in self.variants if v.baseline) > 1:
            raise ValueError("at most one variant may set baseline: true")
        return self


# ---------------------------------------------------------------- loading with line numbers


class _LineLoader(yaml.SafeLoader):
    """SafeLoader that refuses aliases (no billion-laughs) and duplicate keys."""


def _no_alias(self: Any, node: Any) -> Any:  # pragma: no cover - exercised through compose
    raise yaml.constructor.ConstructorError(None, None, "YAML aliases/anchors are not allowed", node.start_mark)


def _compose(text: str) -> Any:
    loader = _LineLoader(text)
    try:
        node = loader.get_single_node()
    finally:
        loader.dispose()
    return node


def _walk_lines(node: Any, path: tuple[Any, ...], out: dict[tuple[Any, ...], int], depth: int = 0) -> None:
    if depth > 64:
        raise yaml.YAMLError("document nests more than 64 levels")
    out[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        seen: set[Any] = set()
        for k, v in node.value:
            key = k.value
            if key in seen:
                raise SpecError("", k.start_mark.line + 1, ".".join(map(str, path + (key,))), "duplicate key")
            seen.add(key)
            out[path + (key,)] = k.start_mark.line + 1
            _walk_lines(v, path + (key,), out, depth + 1)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            _walk_lines(v, path + (i,), out, depth + 1)


def _check_no_aliases(text: str) -> None:
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            mark = event.start_mark
            raise SpecError("", mark.line + 1, "", "YAML anchors and aliases are not allowed in experiment files")


def _line_for(lines: dict[tuple[Any, ...], int], loc: tuple[Any, ...]) -> Optional[int]:
    loc = tuple(loc)
    while loc:
        if loc in lines:
            return lines[loc]
        loc = loc[:-1]
    return lines.get(())


MAX_SPEC_BYTES = 1_000_000


def parse_spec_text(text: str, file: str = "<string>") -> ExperimentSpec:
    """Parse and validate YAML text; every failure is a SpecError naming file, line and field."""
    if len(text) > MAX_SPEC_BYTES:
        raise SpecError(file, None, "", f"file is larger than {MAX_SPEC_BYTES} bytes")
    try:
        _check_no_aliases(text)
        root = _compose(text)
        lines: dict[tuple[Any, ...], int] = {}
        if root is not None:
            _walk_lines(root, (), lines)
        data = yaml.safe_load(text)
    except SpecError as e:
        raise SpecError(file, e.line, e.field, e.message) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(e, "problem", None) or str(e)
        raise SpecError(file, line, "", f"invalid YAML: {problem}") from None
    if not isinstance(data, dict):
        raise SpecError(file, 1, "", f"expected a mapping at the top level, got {type(data).__name__}")
    try:
        return ExperimentSpec.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = tuple(err["loc"])
        field = ".".join(str(p) for p in loc)
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        elif err["type"] == "missing":
            msg = "required field is missing"
        if "input" in err and err["type"] not in ("missing", "extra_forbidden") and not isinstance(err["input"], (dict, list)):
            msg = f"{msg} (got {err['input']!r})"
        more = f" (and {len(e.errors()) - 1} more problem(s))" if len(e.errors()) > 1 else ""
        raise SpecError(file, _line_for(lines, loc), field, msg + more) from None


def load_spec(path: Union[str, Path]) -> ExperimentSpec:
    """Read an experiment YAML file (UTF-8) and validate it."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise SpecError(str(p), None, "", f"cannot read file: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise SpecError(str(p), line, "", "file is not valid UTF-8") from None
    return parse_spec_text(text, str(p))


def spec_to_dict(spec: ExperimentSpec) -> dict[str, Any]:
    return spec.model_dump(mode="json")
