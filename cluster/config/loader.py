"""Loading experiment YAML: safe parsing that refuses anchors and deep nesting, and errors naming file, line, field."""

from __future__ import annotations

import re
import reprlib
import sys
from pathlib import Path
from typing import Any, Optional, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from cluster.errors import SglbenchError, UserError
from cluster.input_files import MID_FILE_BOM, mid_file_bom, read_input_bytes
from cluster.config.experiment import ExperimentSpec
from cluster.config.repeats import REPEATS_TAGS, REPEATS_UNTIL_TAG, RepeatsUntil
from cluster.config.variants import STEP_TAGS
from cluster.config.fields import FieldProblem, SpecError
from cluster.config.workload import LENGTH_TAGS
from cluster.config.prompts import PROMPT_TAGS, ConversationPrompts
from cluster.config.tuning import TUNING_MODELS
from cluster.config.deployment import DEPLOYMENT_MODELS
from cluster.config.secrets import is_secret_name, mask


MAX_SPEC_BYTES = 1_000_000
MAX_NESTING = 64
_Path = tuple[str, ...]
_TAG = "tag:yaml.org,2002:"
PLAIN_TAGS = frozenset(_TAG + t for t in ("str", "int", "float", "bool", "null", "seq", "map"))
"""The YAML types an experiment is written in; others (!!binary, !!set, !!omap, timestamps, merge keys) are refused."""
_TAG_HINTS = {"timestamp": "YAML reads an unquoted date or time as a timestamp: quote it",
              "merge": "YAML merge keys (<<) are not allowed (like anchors, they copy fields out of sight)",
              "binary": "!!binary values are not allowed", "set": "!!set values are not allowed: write a list",
              "omap": "!!omap values are not allowed: write a mapping", "pairs": "!!pairs values are not allowed"}


def _line_at(text: str, mark: Any) -> int:
    """The 1-based line of a YAML mark, counting only newlines (YAML also breaks lines at U+2028, U+0085 and a lone
    CR, which an editor's line numbers do not)."""
    return text.count("\n", 0, mark.index) + 1 if mark is not None else 1


def _int_too_long(node: yaml.ScalarNode) -> str:
    return (f"integer {node.value[:12]}... has more digits than Python converts ({sys.get_int_max_str_digits()}); "
            "no field takes a number that large")


class _NumberTooLong(yaml.constructor.ConstructorError, SglbenchError):
    """An integer literal past what Python converts (valid YAML, but no field could take it); caught by the loader
    and reported as a SpecError with its line."""


class _SpecLoader(yaml.SafeLoader):
    """SafeLoader whose integers past Python's digit limit (decimal, or hex/octal/sexagesimal that would not print)
    are a marked YAML error instead of a ValueError with no line."""

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        limit = sys.get_int_max_str_digits()
        try:
            value = int(super().construct_yaml_int(node))
        except ValueError:
            raise _NumberTooLong(None, None, _int_too_long(node), node.start_mark) from None
        if limit and value.bit_length() > limit * 3:  # 3 bits a digit: below the limit's 3.32, so it always prints
            raise _NumberTooLong(None, None, _int_too_long(node), node.start_mark)
        return value


_SpecLoader.add_constructor(_TAG + "int", _SpecLoader.construct_yaml_int)


def _scan_events(text: str) -> None:
    """Refuse anchors/aliases (no billion laughs), deep nesting and bad syntax, naming the field being read."""
    stack: list[list[Any]] = []  # per open collection: [is_mapping, key or index, expecting a key]

    def field() -> str:
        # a mapping waiting for its next key is past its last key's value: the error is in the mapping itself
        # (a tab before `engine:` under model: is model's problem, not that of the key read before it)
        keys = [f[1] for f in stack[:-1]] + ([None if stack[-1][0] and stack[-1][2] else stack[-1][1]] if stack else [])
        return ".".join(str(k) for k in keys if k is not None)

    def consumed_value() -> None:
        if stack and stack[-1][0]:
            stack[-1][2] = True
        elif stack:
            stack[-1][1] = 0 if stack[-1][1] is None else stack[-1][1] + 1

    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            line = _line_at(text, event.start_mark)
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
        raise SpecError("", _line_at(text, e.problem_mark or e.context_mark), field(),
                        f"invalid YAML: {e.problem or e}") from None


def _compose(text: str) -> Any:
    loader = yaml.SafeLoader(text)
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()


def _check_tag(node: Any, text: str, path: _Path) -> None:
    if node.tag not in PLAIN_TAGS:
        short = node.tag.removeprefix(_TAG)
        raise SpecError("", _line_at(text, node.start_mark), ".".join(path),
                        _TAG_HINTS.get(short, f"YAML tag {node.tag!r} is not allowed"))
    hint = _yaml11_number(node)
    if hint:
        raise SpecError("", _line_at(text, node.start_mark), ".".join(path), hint)


def _yaml11_number(node: Any) -> Optional[str]:
    """YAML 1.1 number forms nobody means: `1:30` is base 60 (90) and `0755` octal (493); refused, not converted."""
    if not isinstance(node, yaml.ScalarNode) or node.style or node.tag not in (_TAG + "int", _TAG + "float"):
        return None
    digits = node.value.lstrip("+-").replace("_", "")
    if ":" in digits:
        return (f"{node.value!r} is a base-60 number in YAML 1.1 (1:30 reads as 90): write the number itself, or "
                "quote it if it is text")
    if node.tag == _TAG + "int" and len(digits) > 1 and digits[0] == "0" and digits[1] not in "xXbB":
        return (f"{node.value!r} is an octal number in YAML 1.1 (0755 reads as 493): drop the leading zero, or "
                "quote it if it is text")
    return None


def _walk_lines(node: Any, path: _Path, out: dict[_Path, int], text: str) -> None:
    """Map every field path (keys and list indices as strings) to its 1-based line; refuse duplicate keys, keys
    that YAML does not read as strings (`yes`, `null`, `1`: the field would be named wrongly), merge keys and
    types outside PLAIN_TAGS."""
    out[path] = _line_at(text, node.start_mark)
    _check_tag(node, text, path)
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for k, v in node.value:
            key = str(k.value) if isinstance(k, yaml.ScalarNode) else f"<{k.id} key>"
            line = _line_at(text, k.start_mark)
            if isinstance(k, yaml.ScalarNode) and k.tag == _TAG + "merge":
                raise SpecError("", line, ".".join(path + (key,)), _TAG_HINTS["merge"])
            if isinstance(k, yaml.ScalarNode) and k.tag != _TAG + "str":
                kind = k.tag.removeprefix(_TAG)
                raise SpecError("", line, ".".join(path + (key,)), f"key {key!r} is read by YAML as a {kind}, not a "
                                "name: quote it, or fix the key")
            if key in seen:
                raise SpecError("", line, ".".join(path + (key,)), "duplicate key (each key may appear once)")
            seen.add(key)
            _walk_lines(v, path + (key,), out, text)
            out[path + (key,)] = line
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            _walk_lines(v, path + (str(i),), out, text)


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
        if (len(members) > 1 or parts[i:i + 1] == [_tag_of(members[0])]) and i < len(parts) and parts[i] in tagged:
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
    if model is RepeatsUntil:
        return REPEATS_UNTIL_TAG  # `repeats: N | {until, ...}`: the form's tag, not a field
    kind = model.model_fields.get("kind") or model.model_fields.get("source")
    return kind.default if kind is not None and isinstance(kind.default, str) else None


def _without_tags(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """Drop a tagged union's tag from an error location: `tuning.triton_moe.options.x` → `tuning.options.x`,
    `prompts.conversation.path` → `prompts.path`."""
    out: list[Any] = []
    for i, p in enumerate(loc):
        if i and ((loc[i - 1] == "tuning" and p in TUNING_MODELS) or (loc[i - 1] == "prompts" and p in PROMPT_TAGS)
                  or (loc[i - 1] in ("input_tokens", "output_tokens") and p in LENGTH_TAGS)
                  or (loc[i - 1] == "num_steps" and p in STEP_TAGS) or (loc[i - 1] == "repeats" and p in REPEATS_TAGS)
                  or (loc[i - 1] == "deployment" and p in DEPLOYMENT_MODELS)):
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
        msg = f"{msg} (got {shown(err['input'].get('source') if isinstance(err['input'], dict) else err['input'])})"
    elif "input" in err and isinstance(err["input"], (dict, list)):
        msg = f"{msg} (got a {'mapping' if isinstance(err['input'], dict) else 'list'})"
    elif "input" in err:
        value = mask(err["input"]) if any(is_secret_name(str(p)) for p in loc) else shown(err["input"])
        msg = f"{msg} (got {value})"  # a secret-named field's value is never echoed
        if kind in ("int_type", "float_type") and isinstance(err["input"], str):
            msg += ": a quoted number is a string in YAML; remove the quotes"
    return _without_tags(loc), msg


def shown(value: Any) -> str:
    """A value as an error message quotes it: shortened, and an integer too long for repr() said by its size."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 3 * sys.get_int_max_str_digits():
        return f"an integer of {value.bit_length()} bits"
    return reprlib.repr(value)


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
            _walk_lines(root, (), lines, text)
        data = yaml.load(text, Loader=_SpecLoader)  # noqa: S506 - a SafeLoader subclass
    except SpecError as e:
        raise SpecError(file, e.line, e.field or "", e.message) from None
    except yaml.reader.ReaderError as e:
        line = text[: e.position].count("\n") + 1
        raise SpecError(file, line, "", f"invalid YAML: {e.reason} (character {e.character!r})") from None
    except yaml.YAMLError as e:
        line = _line_at(text, getattr(e, "problem_mark", None) or getattr(e, "context_mark", None))
        named = [path for path, n in lines.items() if n == line and path]  # parents come before children
        field = ".".join(named[0]) if named else ""
        what = "" if isinstance(e, _NumberTooLong) else "invalid YAML: "  # the YAML is fine, the number is not
        raise SpecError(file, line, field, f"{what}{getattr(e, 'problem', None) or e}") from None
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


class _ReadError(UserError):
    """What cluster.input_files says about the experiment file itself (becomes a SpecError)."""


def load_spec(path: Union[str, Path]) -> ExperimentSpec:
    """Read an experiment YAML file (UTF-8, a BOM dropped) through the bounded read and validate it."""
    p = Path(path)
    try:
        raw = read_input_bytes(path, _ReadError, "experiment file", limit_bytes=4 * MAX_SPEC_BYTES)
    except _ReadError as e:
        message = str(e).removeprefix(f"{path}: ")
        if "past the" in message:
            message = f"file is larger than {MAX_SPEC_BYTES} characters ({message})"
        raise SpecError(str(p), 1, "", f"cannot read file: {message}") from None
    bom = mid_file_bom(raw)
    if bom is not None:  # a YAML parser reads it as part of the next key, then blames a missing field
        raise SpecError(str(p), bom[0], "", f"{MID_FILE_BOM} (byte offset {bom[1]}: files joined with their BOMs?)")
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]  # an editor's byte-order mark is not part of the document
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise SpecError(str(p), line, "", f"file is not valid UTF-8 (byte 0x{raw[e.start]:02x} at offset {e.start})") from None
    return parse_spec_text(text, str(p))



def field_line(path: Union[str, Path], field: str) -> Optional[int]:
    """The line of `field` (dotted, as errors name it) in the experiment file, or None where the file does not write
    it (a default) or cannot be read again."""
    try:
        text = read_input_bytes(path, _ReadError, "experiment file", limit_bytes=4 * MAX_SPEC_BYTES).decode(
            "utf-8-sig")
        root = _compose(text)
        lines: dict[_Path, int] = {}
        if root is not None:
            _walk_lines(root, (), lines, text)
    except (UserError, UnicodeDecodeError, yaml.YAMLError):
        return None
    parts = tuple(field.split("."))
    while parts and parts not in lines:
        parts = parts[:-1]
    return lines[parts] if parts else None


def restate_at_field(experiment: Union[str, Path], error: UserError) -> Optional[str]:
    """An error found after loading (a prompt file, the output root, a flag the engine's parser refuses) restated
    at the experiment's `file:line: field:` that caused it, the referenced path kept in the message; None when the
    error names no field, or is located inside a referenced file by its own line (a bad row)."""
    exp, text, field = str(experiment), str(error), error.field or ""
    if not field or text.startswith(f"{exp}:"):
        return None
    if error.file and error.file != exp and re.match(rf"{re.escape(error.file)}:\d", text):
        return None
    rest = text.removeprefix(f"{error.file}: ") if error.file else text
    rest = rest.removeprefix(f"{field}: ").removeprefix(f"{field} ")
    if error.file and error.file != exp and error.file not in rest:
        rest = f"{error.file!r} {rest}"
    line = field_line(exp, field)
    return f"{exp}{f':{line}' if line else ''}: {field}: {rest}"
