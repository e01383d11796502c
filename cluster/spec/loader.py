"""Loading experiment YAML: safe parsing that refuses anchors and deep nesting, and errors naming file, line, field."""

from __future__ import annotations

import reprlib
from pathlib import Path
from typing import Any, Optional, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from cluster.spec.models import LENGTH_TAGS, PROMPT_TAGS, TUNING_MODELS, ConversationPrompts, ExperimentSpec, FieldProblem, SpecError
from cluster.spec.secrets import is_secret_name, mask


MAX_SPEC_BYTES = 1_000_000
MAX_NESTING = 64
_Path = tuple[str, ...]


def _scan_events(text: str) -> None:
    """Refuse anchors/aliases (no billion laughs), deep nesting and bad syntax, naming the field being read."""
    stack: list[list[Any]] = []  # per open collection: [is_mapping, key or index, expecting a key]

    def field() -> str:
        return ".".join(str(f[1]) for f in stack if f[1] is not None)

    def consumed_value() -> None:
        if stack and stack[-1][0]:
            stack[-1][2] = True
        elif stack:
            stack[-1][1] = 0 if stack[-1][1] is None else stack[-1][1] + 1

    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            line = event.start_mark.line + 1 if event.start_mark is not None else 1
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                raise SpecError("", line, field(), "YAML anchors and aliases are not allowed")
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                if stack and not stack[-1][0]:
                    consumed_value()
                stack.append([isinstance(event, yaml.MappingStartEvent), None, True])
                if len(stack) > MAX_NESTING:
                    raise SpecError("", line, field(), f"document nests more than {MAX_NESTING} levels")
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                stack.pop()
                if stack and stack[-1][0]:
                    stack[-1][2] = True
            elif isinstance(event, yaml.ScalarEvent) and stack and stack[-1][0] and stack[-1][2]:
                stack[-1][1], stack[-1][2] = event.value, False
            elif isinstance(event, yaml.ScalarEvent):
                consumed_value()
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark is not None else 1
        raise SpecError("", line, field(), f"invalid YAML: {e.problem or e}") from None


def _compose(text: str) -> Any:
    loader = yaml.SafeLoader(text)
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()


def _walk_lines(node: Any, path: _Path, out: dict[_Path, int]) -> None:
    """Map every field path (keys and list indices as strings) to its 1-based line; refuse duplicate keys."""
    out[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for k, v in node.value:
            key = str(k.value) if isinstance(k, yaml.ScalarNode) else f"<{k.id} key>"
            if key in seen:
                raise SpecError("", k.start_mark.line + 1, ".".join(path + (key,)), "duplicate key (each key may appear once)")
            seen.add(key)
            _walk_lines(v, path + (key,), out)
            out[path + (key,)] = k.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            _walk_lines(v, path + (str(i),), out)


def _line_for(lines: dict[_Path, int], loc: tuple[Any, ...]) -> int:
    path = tuple(str(p) for p in loc)
    while path:
        if path in lines:
            return lines[path]
        path = path[:-1]
    return lines.get((), 1)


def _model_at(loc: tuple[Any, ...]) -> Optional[type[BaseModel]]:
    """The pydantic model that owns the last element of `loc`, following nested models, lists and dicts, and a
    tagged union's member by its tag (`tuning.<kind>`)."""
    model: type[BaseModel] = ExperimentSpec
    skip = False
    parts = list(loc[:-1])
    i = 0
    while i < len(parts):
        part = parts[i]
        i += 1
        if skip:  # a list index or a dict key
            skip = False
            continue
        if part not in model.model_fields:
            return None
        ann = model.model_fields[part].annotation
        members = _models_in(ann)
        if not members:
            return None
        tagged = {_tag_of(m): m for m in members}
        if len(members) > 1 and i < len(parts) and parts[i] in tagged:
            model = tagged[parts[i]]
            i += 1
            continue
        model, skip = members[0], _is_container(ann)
    return model


def _is_container(ann: Any) -> bool:
    """A list or dict field (maybe Optional): the next part of a location is an index or a key, not a field."""
    args = [a for a in get_args(ann) if a is not type(None)]
    if get_origin(ann) is Union and len(args) == 1:
        return _is_container(args[0])
    return get_origin(ann) in (list, dict)


def _models_in(ann: Any) -> list[type[BaseModel]]:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [ann]
    out: list[type[BaseModel]] = []
    for a in get_args(ann):
        out.extend(m for m in _models_in(a) if m not in out)
    return out


def _tag_of(model: type[BaseModel]) -> Optional[str]:
    if model is ConversationPrompts:
        return "conversation"  # one model for two sources (sharegpt, messages): the union's tag names it
    kind = model.model_fields.get("kind") or model.model_fields.get("source")
    return kind.default if kind is not None and isinstance(kind.default, str) else None


def _without_tags(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """Drop a tagged union's tag from an error location: `tuning.triton_moe.options.x` → `tuning.options.x`,
    `prompts.conversation.path` → `prompts.path`."""
    out: list[Any] = []
    for i, p in enumerate(loc):
        if i and ((loc[i - 1] == "tuning" and p in TUNING_MODELS) or (loc[i - 1] == "prompts" and p in PROMPT_TAGS)
                  or (loc[i - 1] in ("input_tokens", "output_tokens") and p in LENGTH_TAGS)):
            continue
        out.append(p)
    return tuple(out)


def _describe(err: Any) -> tuple[tuple[Any, ...], str]:
    """Turn one pydantic error into (location, message that says what was expected)."""
    loc = tuple(p for p in err["loc"] if p != "[key]")
    kind = err["type"]
    msg = str(err["msg"])
    if kind == "value_error":
        cause = err.get("ctx", {}).get("error")
        if isinstance(cause, FieldProblem):
            loc = loc + cause.loc
        msg = str(cause) if cause is not None else msg.removeprefix("Value error, ")
    elif kind == "extra_forbidden":
        owner = _model_at(loc)
        names = [f.alias or n for n, f in owner.model_fields.items()] if owner else []
        allowed = f"; expected one of: {', '.join(names)}" if owner else ""
        msg = f"unknown field{allowed}"
    elif kind == "missing":
        msg = "required field is missing"
    elif kind == "prompt_source":
        loc = loc + ("source",)
        msg = f"{msg} (got {reprlib.repr(err['input'].get('source') if isinstance(err['input'], dict) else err['input'])})"
    elif "input" in err and not isinstance(err["input"], (dict, list)):
        shown = mask(err["input"]) if any(is_secret_name(str(p)) for p in loc) else reprlib.repr(err["input"])
        msg = f"{msg} (got {shown})"  # a secret-named field's value is never echoed
    return _without_tags(loc), msg


def parse_spec_text(text: str, file: str = "<string>") -> ExperimentSpec:
    """Parse and validate YAML text; every failure is a SpecError naming file, line and field."""
    if len(text) > MAX_SPEC_BYTES:
        line = text[:MAX_SPEC_BYTES].count("\n") + 1
        raise SpecError(file, line, "", f"file is larger than {MAX_SPEC_BYTES} characters (the limit is crossed on this line)")
    lines: dict[_Path, int] = {}
    try:
        _scan_events(text)
        root = _compose(text)
        if root is not None:
            _walk_lines(root, (), lines)
        data = yaml.safe_load(text)
    except SpecError as e:
        raise SpecError(file, e.line, e.field or "", e.message) from None
    except yaml.reader.ReaderError as e:
        line = text[: e.position].count("\n") + 1
        raise SpecError(file, line, "", f"invalid YAML: {e.reason} (character {e.character!r})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        line = mark.line + 1 if mark is not None else 1
        named = [path for path, n in lines.items() if n == line and path]  # parents come before children
        field = ".".join(named[0]) if named else ""
        raise SpecError(file, line, field, f"invalid YAML: {getattr(e, 'problem', None) or e}") from None
    if not isinstance(data, dict):
        got = "an empty document" if data is None else f"a {type(data).__name__}"
        raise SpecError(file, lines.get((), 1), "", f"expected a mapping of experiment fields at the top level, got {got}")
    try:
        return ExperimentSpec.model_validate(data)
    except ValidationError as e:
        errors = e.errors()
        loc, msg = _describe(errors[0])
        more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
        raise SpecError(file, _line_for(lines, loc), ".".join(str(p) for p in loc), msg + more) from None


def load_spec(path: Union[str, Path]) -> ExperimentSpec:
    """Read an experiment YAML file (UTF-8) and validate it."""
    p = Path(path)
    try:
        if p.stat().st_size > 4 * MAX_SPEC_BYTES:
            raise SpecError(str(p), 1, "", f"file is larger than {MAX_SPEC_BYTES} characters")
        raw = p.read_bytes()
    except OSError as e:
        raise SpecError(str(p), 1, "", f"cannot read file: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise SpecError(str(p), line, "", f"file is not valid UTF-8 (byte 0x{raw[e.start]:02x} at offset {e.start})") from None
    return parse_spec_text(text, str(p))

