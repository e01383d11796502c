"""The engines an experiment may name (registered once, here) and how each is started on the node (`engines:`).

Why an engine is registered in the config package and not in cluster/engines/registry.py: the spec (this package,
the second floor of tests/unit/test_layout.py) must know every engine's name to validate `model.engine`, a
variant's `engine` and the `engines:` keys, and to write the schema's enum, but it may not import the adapters (they
sit four floors up and import the spec). So a registration is one `EngineEntry`: the engine's name, where its adapter
class is (`module:Class`, resolved by cluster/engines/registry.py, never imported here) and the one fact the spec
itself judges. Every other fact of an engine (flags and their domains, its cap flags, tuning surface, metric names,
packages, argv dialect, how its checkpoint and flags are checked) is an attribute of its adapter class.
`EngineName` is a `str` checked against the registrations when a spec is validated and listed from them when the
schema is written, so an engine registered later (a test's) is accepted and listed without editing any model.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any, Iterator, Optional

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler, model_validator
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema

from cluster.config.fields import FieldProblem, FrozenModel, LocalPath
from cluster.config.locations import check_local_path


@dataclass(frozen=True)
class EngineEntry:
    """One engine's registration."""

    name: str
    """What `model.engine`, `variants[].engine` and `engines:` call it (also the `engine` column of stored rows)."""
    adapter: str
    """`package.module:Class` of its adapter (a subclass of cluster/engines/base.py's Engine)."""
    reports_sglbench_version: bool = False
    """The engine is part of sglbench and reports sglbench's version: `engines.<name>.version` is refused (the spec
    judges it at its YAML line, before any adapter is imported)."""
    deployments: tuple[str, ...] = ("endpoint",)
    """The deployment kinds a variant of this engine may declare (its servers speak SGLang's gateway, prefill/decode
    and multi-node flags, or not); the spec judges it at the variant's `deployment` line."""


ALL_DEPLOYMENTS = ("endpoint", "replicas", "pd", "nodes")

_ENTRIES: dict[str, EngineEntry] = {}


def register_engine(entry: EngineEntry) -> EngineEntry:
    """Add an engine; a second registration under a name already taken is a bug (ValueError)."""
    if entry.name in _ENTRIES:
        raise ValueError(f"engine {entry.name!r} is registered twice ({_ENTRIES[entry.name].adapter}, {entry.adapter})")
    _ENTRIES[entry.name] = entry
    return entry


@contextmanager
def registered(entry: EngineEntry) -> Iterator[EngineEntry]:
    """An engine registered for the block only (a test's throwaway engine)."""
    register_engine(entry)
    try:
        yield entry
    finally:
        del _ENTRIES[entry.name]


def engine_entries() -> tuple[EngineEntry, ...]:
    """Every registered engine, in registration order."""
    return tuple(_ENTRIES.values())


def engine_entry(name: str) -> Optional[EngineEntry]:
    return _ENTRIES.get(name)


def engine_names() -> tuple[str, ...]:
    return tuple(_ENTRIES)


register_engine(EngineEntry("sglang", "cluster.engines.sglang:SGLangEngine", deployments=ALL_DEPLOYMENTS))
register_engine(EngineEntry("sim", "cluster.engines.sim:SimEngine", reports_sglbench_version=True,
                            deployments=ALL_DEPLOYMENTS))
register_engine(EngineEntry("vllm", "cluster.engines.vllm:VLLMEngine"))


def _quoted(names: tuple[str, ...]) -> str:
    """'a', 'b' or 'c': how pydantic words a Literal's choices (the error is the one a Literal gave)."""
    words = [repr(n) for n in names]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def _registered_name(value: Any) -> str:
    names = engine_names()
    if isinstance(value, str) and value in _ENTRIES:
        return value
    raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": _quoted(names)})


class RegisteredEngine:
    """Pydantic's view of EngineName: validated and listed from the registrations when used, not when imported."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(_registered_name)

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: core_schema.CoreSchema,
                                     handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return {"enum": list(engine_names()), "type": "string"}


EngineName = Annotated[str, RegisteredEngine]
"""A registered engine's name."""


class EngineLauncher(FrozenModel):
    """How to start one engine on the node: its own interpreter or a full launcher command."""

    python: Optional[LocalPath] = None
    """Interpreter path for the engine (e.g. SGLang's venv); `python -m <engine module>` is run with it."""
    launcher: Optional[list[str]] = None
    """A full command that replaces `python -m <module>` (e.g. ["sglang", "serve"]); server args follow it."""
    version: Optional[str] = None
    """Engine version when it cannot be read from the installed package (a remote image)."""
    gateway: Optional[LocalPath] = None
    """SGLang's gateway executable (`smg`) for the deployments behind it (replicas, prefill/decode); default: `smg`
    in the bin directory of `python` (or of sglbench's interpreter)."""

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
