"""A workload's prompt source (`prompts: {source, ...}`): one model per source (random ids, JSONL, a text corpus,
ShareGPT/messages conversations, a recorded trace) and the union that picks one by `source`."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import (BaseModel, Discriminator, Field, StrictBool, StrictFloat, StrictInt, StrictStr, Tag,
                      SerializeAsAny, ValidatorFunctionWrapHandler, WithJsonSchema, WrapValidator, field_validator,
                      model_validator)

from cluster.config import bounds as B
from cluster.config.fields import FieldProblem, FrozenModel, LocalPath, check_name


TEMPLATE_OWN_VARIABLES = ("messages", "tools", "documents", "add_generation_prompt")
"""What Hugging Face's render_jinja_template passes the chat template itself, beside the request's
chat_template_kwargs (cluster/loadgen/chat_template.py renders the same way)."""


class SharedPrefix(FrozenModel):
    """`groups` seeded random prefixes (system prompts) of `tokens` ids each; every request starts with one of them
    (the groups take equal shares of the requests, in a seeded order) and goes on with ids of its own, so a prefix
    cache serves all but the first request of each group its prefix (cluster/loadgen/datasets.py)."""

    groups: int = Field(ge=1, le=B.MAX_PREFIX_GROUPS)
    """How many distinct prefixes."""
    tokens: int = Field(ge=1, le=B.MAX_TOKENS)
    """Length of each prefix in tokens (part of input_tokens, which must be longer)."""


class RandomIdsPrompts(FrozenModel):
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


class JsonlPrompts(FrozenModel):
    """`jsonl`: one object per line with `prompt` (text) or `input_ids`, sent as given."""

    source: Literal["jsonl"] = "jsonl"
    """A prompt file."""
    path: Optional[LocalPath] = None
    """The JSONL file (relative paths: against the directory sglbench runs in)."""

    @model_validator(mode="after")
    def _path(self) -> "JsonlPrompts":
        _need_path(self.source, self.path)
        return self


class TextPrompts(FrozenModel):
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


TemplateValue = Union[StrictBool, Annotated[StrictInt, Field(ge=-B.MAX_TEMPLATE_INT, le=B.MAX_TEMPLATE_INT)],
                      Annotated[StrictFloat, Field(ge=-1e300, le=1e300)], StrictStr]
"""One chat template variable's value."""
TemplateScalar = Union[bool, int, float, str]


class ConversationPrompts(FrozenModel):
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
    chat_template_kwargs: dict[str, Union[TemplateValue, Annotated[list[TemplateValue], Field(min_length=1)]]] = \
        Field(default_factory=dict)
    """Template variables (e.g. `enable_thinking: false` for Qwen3.5), also sent as the chat API's
    `chat_template_kwargs`, so both paths render the same prompt. A list of values is an axis: the workload
    expands into one per value (per combination, over several lists), named NAME-<setting> (`enable_thinking:
    [true, false]` gives NAME-thinking and NAME-no-thinking; cluster/config/template_settings.py)."""

    _c = field_validator("category")(classmethod(lambda cls, v: v if v is None else check_name(v, "category")))

    @field_validator("chat_template_kwargs")
    @classmethod
    def _own_variables(cls, v: dict[str, object]) -> dict[str, object]:
        for name in v:
            if name in TEMPLATE_OWN_VARIABLES:
                raise FieldProblem((name,), f"{name!r} is a variable the chat template's renderer sets itself "
                                   f"({', '.join(TEMPLATE_OWN_VARIABLES)}); a kwarg of that name collides with it "
                                   "(Hugging Face's render, which SGLang's chat endpoint calls, fails on it)")
        return v

    @field_validator("chat_template_kwargs", mode="before")
    @classmethod
    def _no_empty_axis(cls, v: Any) -> Any:
        for name, values in (v.items() if isinstance(v, dict) else ()):
            if isinstance(values, list) and not values:
                raise FieldProblem((name,), "an empty list expands the workload into nothing: give one value, or "
                                   "a list of the values to run")
            nested = next((i for i, x in enumerate(values) if isinstance(x, (list, dict))), None) \
                if isinstance(values, list) else None
            if nested is not None:
                raise FieldProblem((name, nested), "a list of values takes single values (a boolean, number or "
                                   "string), one per expanded workload")
        return v

    @field_validator("chat_template_kwargs")
    @classmethod
    def _axes(cls, v: dict[str, object]) -> dict[str, object]:
        for name, values in v.items():
            if isinstance(values, list):
                seen = [json.dumps(x) for x in values]
                dup = next((x for i, x in enumerate(seen) if x in seen[:i]), None)
                if dup is not None:
                    raise FieldProblem((name,), f"the values of {name!r} repeat {dup} (each value is one expanded "
                                       "workload: list each once)")
        return v

    def template_kwargs(self) -> dict[str, TemplateScalar]:
        """The variables one rendered prompt uses; an axis (a list) must have been expanded into workloads first
        (cluster/config/template_settings.py)."""
        out: dict[str, TemplateScalar] = {}
        for name, value in self.chat_template_kwargs.items():
            if isinstance(value, list):
                raise AssertionError(f"chat_template_kwargs.{name} is an unexpanded axis {value!r}")
            out[name] = value
        return out

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


class TracePrompts(FrozenModel):
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


class SourceOptions(FrozenModel):
    """The base of a registered prompt source's model: its `source:` name (a Literal of its names in the subclass)."""

    source: str
    """The registered prompt source's name."""


REGISTERED_SOURCES: dict[str, type[SourceOptions]] = {}
"""A registered prompt source's model by its `source:` name, for sources beside the ones above. Filled by
cluster/loadgen/prompt_sources.register_source, so this module imports no source; the union below validates
such a `prompts:` by its registered model."""
REGISTERED_TAG = "registered"


def _registered_source(v: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    if isinstance(v, SourceOptions):
        return v
    return REGISTERED_SOURCES[v["source"]].model_validate(v)  # the discriminator admitted only registered names


def _prompt_source(v: Any) -> Optional[str]:
    src = v.get("source", "random_ids") if isinstance(v, dict) else getattr(v, "source", None)
    if isinstance(src, str) and src in REGISTERED_SOURCES and src not in PROMPT_SOURCES:
        return REGISTERED_TAG
    if not isinstance(src, str) or src not in PROMPT_SOURCES:
        return None
    return "conversation" if src in ("sharegpt", "messages") else src


RegisteredPrompts = Annotated[SerializeAsAny[SourceOptions], WrapValidator(_registered_source), WithJsonSchema({
    "type": "object", "required": ["source"], "additionalProperties": True,
    "description": "A registered prompt source's options (its own model validates them).",
    "properties": {"source": {"type": "string", "not": {"enum": list(PROMPT_SOURCES)},
                              "description": "The registered prompt source's name."}}})]
"""A `prompts:` of a registered source (cluster/loadgen/prompt_sources.py)."""

PromptSource = Annotated[
    Union[Annotated[RandomIdsPrompts, Tag("random_ids")], Annotated[JsonlPrompts, Tag("jsonl")],
          Annotated[TextPrompts, Tag("text")], Annotated[ConversationPrompts, Tag("conversation")],
          Annotated[TracePrompts, Tag("trace")], Annotated[RegisteredPrompts, Tag(REGISTERED_TAG)]],
    Discriminator(_prompt_source, custom_error_type="prompt_source",
                  custom_error_message="unknown prompt source; expected one of: " + ", ".join(PROMPT_SOURCES))]
"""A workload's `prompts: {source, ...}`: one model per source, so an option of another source is refused."""
PROMPT_TAGS = ("random_ids", "jsonl", "text", "conversation", "trace", REGISTERED_TAG)
"""The union's tags as they appear in pydantic error locations (dropped from the locations shown)."""
