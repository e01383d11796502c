"""A workload of the experiment: its prompt source (cluster/config/prompts.py), lengths, sessions and request count
(cluster/loadgen/ builds the requests)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import Discriminator, Field, PrivateAttr, Tag, field_validator, model_validator

from cluster.config import bounds as B
from cluster.config.fields import FieldProblem, FrozenModel, check_name, coercible
from cluster.config.prompts import ConversationPrompts, PromptSource, RandomIdsPrompts

SESSION_SOURCES = ("random_ids", "sharegpt", "messages")
"""Prompt sources whose requests can be sessions: random ids (each turn new ids) and conversations (their later
user turns)."""


class SessionSpec(FrozenModel):
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


class LengthDist(FrozenModel):
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
        if coercible(v):
            raise ValueError(f"expected a number or boolean, got the string {v!r} (remove the quotes)")
        raise ValueError(f"expected a token count, a {{dist, mean, std, min, max}} mapping or 'dataset', got {v!r}")
    return v


def _length_max(v: Length) -> Optional[int]:
    return v if isinstance(v, int) else v.max if isinstance(v, LengthDist) else None


def _length_nominal(v: Length) -> Optional[int]:
    return v if isinstance(v, int) else v.nominal() if isinstance(v, LengthDist) else None


class WorkloadSpec(FrozenModel):
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

    _setting_of: Optional[tuple[str, str]] = PrivateAttr(default=None)
    """(declared workload name, setting label) of a chat-template-settings expansion
    (cluster/config/template_settings.py); None for a declared workload."""

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

    def tokenizer_field(self) -> Optional[tuple[str, ...]]:
        """The field that makes a conversation workload count tokens (None: it needs no tokenizer):
        output_tokens: dataset (the reference answer's length), prompts.max_input_tokens, prompts.chat_template."""
        src = self.prompts
        if not isinstance(src, ConversationPrompts):
            return None
        if self.output_tokens == "dataset":
            return ("output_tokens",)
        if src.max_input_tokens is not None:
            return ("prompts", "max_input_tokens")
        return ("prompts", "chat_template") if src.chat_template else None

    def seed_name(self) -> str:
        """The name its prompts are seeded by: the declared workload's, so every chat template setting it expands
        into sends the same rows."""
        return self._setting_of[0] if self._setting_of is not None else self.name

    def template_setting(self) -> Optional[str]:
        """The chat template setting this expansion renders with (`thinking`, `no-thinking`); None when declared."""
        return self._setting_of[1] if self._setting_of is not None else None

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

    # free-form JSON stored as given: the workload's dump, hashed into the run key
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
