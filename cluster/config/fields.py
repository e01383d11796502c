"""The spec's field rules, shared by every spec model: a frozen base model that reads no boolean as a number, no
quoted number as a number and no control character in a string that leaves the spec as an argv word, env value or
path; names that become path components; local paths; and the errors a validator raises (FieldProblem) and the loader
reports (SpecError)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Optional, Union, get_args, get_origin

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationInfo, field_validator

from cluster.errors import UserError, one_line
from cluster.config.locations import check_local_path, check_word
from cluster.config.secrets import is_secret_name

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
LocalPath = Annotated[str, AfterValidator(lambda v: check_local_path(v, "path"))]
"""A file or directory on the node: one line, no NUL, no URI scheme."""


class FieldProblem(UserError):
    """A validator's complaint about a sub-field (raised inside pydantic validators only, which turn it into a
    SpecError): `loc` is appended to the field's location in the error."""

    def __init__(self, loc: tuple[Union[str, int], ...], message: str) -> None:
        super().__init__(message)
        self.loc = loc


class SpecError(UserError):
    """A spec problem located in a file: `file:line: field: message` (`message` says what was expected)."""

    def __init__(self, file: str, line: Optional[int], field: str, message: str) -> None:
        where = f"{one_line(file)}:{line}" if line else one_line(file)
        super().__init__(f"{where}: {one_line(field) or '<root>'}: {one_line(message)}", file=file, field=field,
                         expected=message)
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


def coercible(text: str) -> bool:
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


class FrozenModel(BaseModel):
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
        quoted = [x for x in values if isinstance(x, str) and coercible(x)]
        if quoted and info.field_name is not None and _refuses_strings(cls.model_fields[info.field_name].annotation):
            raise ValueError(f"expected a number or boolean, got the string {quoted[0]!r} (remove the quotes)")
        # strict integers: pydantic reads 2.0 as 2 but refuses 2.5, so an integer field took a float only when it
        # happened to be integral; an integer field takes YAML integers only (seed: 1.5 and tp: 2.0 alike)
        floats = [x for x in values if isinstance(x, float)]
        if floats and info.field_name is not None and _integers_only(cls.model_fields[info.field_name].annotation):
            raise ValueError(f"expected an integer, got the number {floats[0]!r} (write it without a decimal point "
                             "or exponent)")
        if info.field_name is not None and info.field_name not in _FREE_TEXT_FIELDS \
                and not _holds_model(cls.model_fields[info.field_name].annotation):
            _check_words(v, ())  # a sub-model checks its own fields
        return v


def _integers_only(annotation: Any) -> bool:
    """An integer field (or a list of integers) that admits no float, string or free value."""
    kinds = _scalar_types(annotation)
    return int in kinds and not kinds & {float, str, Any}


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
            check_word(v, quote=not any(is_secret_name(str(p)) for p in loc))
        except ValueError as e:
            raise FieldProblem(loc, str(e)) from None
    elif isinstance(v, (list, tuple)):
        for i, x in enumerate(v):
            _check_words(x, loc + (i,))
    elif isinstance(v, dict):
        for k, x in v.items():
            _check_words(k, loc + (str(k),))
            _check_words(x, loc + (str(k),))
