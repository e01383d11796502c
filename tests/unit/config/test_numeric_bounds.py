"""Every number an experiment file can set has a lower and an upper bound, and each bound says where it comes from.

The walk goes through every model reachable from ExperimentSpec (the simulator's Knobs included), into Optional,
unions, lists, tuples and mappings, and finds each int or float slot with the constraints that apply to it there.
This is the check that would have caught `concurrency: [1000000000000]` (list[int] with no item bounds).
"""

from __future__ import annotations

import ast
import collections.abc
import types
from pathlib import Path
from typing import Annotated, Any, Iterator, Literal, Optional, Union, get_args, get_origin

import annotated_types as at
import pytest
from pydantic import BaseModel, Field
from pydantic.fields import FieldInfo

from cluster.config import bounds
from cluster.config.loader import parse_spec_text
from cluster.config.experiment import ExperimentSpec
from cluster.config.fields import SpecError
from tests.unit.config.test_bad_inputs import VALID

EXEMPT = {
    ("ServerSpec", "args"): "server flags: the engine's own parser judges each value (cluster/engines/flagcheck.py); "
                            "port and the flags with a numeric domain (cluster/engines/flag_domains.py) are "
                            "bounded by _check_args",
    ("VariantSpec", "args"): "as ServerSpec.args",
    ("PoolSpec", "args"): "as ServerSpec.args",
    ("ReplicasDeployment", "gateway_args"): "the gateway's flags: smg's own parser judges each value at start; "
                                            "bounded by _check_args as server flags are",
    ("PDDeployment", "gateway_args"): "as ReplicasDeployment.gateway_args",
}
"""Fields whose numbers are not the spec's to bound, with the reason."""

_LOWER = (at.Ge, at.Gt)
_UPPER = (at.Le, at.Lt)


def _constraints(meta: Any) -> Iterator[Any]:
    if isinstance(meta, FieldInfo):
        yield from meta.metadata
    else:
        yield meta


def _slots(ann: Any, where: str, found: tuple[Any, ...], seen: set[type]) -> Iterator[tuple[str, bool, bool]]:
    """(location, has a lower bound, has an upper bound) for every int/float slot of an annotation."""
    origin = get_origin(ann)
    if origin is Annotated:
        base, *meta = get_args(ann)
        extra = tuple(c for m in meta for c in _constraints(m))
        yield from _slots(base, where, found + extra, seen)
    elif ann is bool or ann is type(None) or ann is str or ann is Any or origin is Literal:
        return
    elif ann in (int, float):
        yield (where, any(isinstance(c, _LOWER) for c in found), any(isinstance(c, _UPPER) for c in found))
    elif isinstance(ann, type) and issubclass(ann, BaseModel):
        yield from _model_slots(ann, seen)
    elif origin in (Union, types.UnionType):
        for a in get_args(ann):  # a bound on Optional[int] applies to the int
            yield from _slots(a, where, found, seen)
    elif origin in (list, tuple, dict, collections.abc.Mapping, collections.abc.Sequence):
        for a in get_args(ann):  # a container's own constraints (min_length) bound no item
            if a is not Ellipsis:
                yield from _slots(a, f"{where}[]", (), seen)


def _model_slots(model: type[BaseModel], seen: set[type]) -> Iterator[tuple[str, bool, bool]]:
    if model in seen:
        return
    seen.add(model)
    for name, info in model.model_fields.items():
        if (model.__name__, name) in EXEMPT:
            continue
        yield from _slots(info.annotation, f"{model.__name__}.{name}", tuple(info.metadata), seen)


def unbounded(model: type[BaseModel]) -> list[str]:
    return sorted({f"{w} ({'no lower' if not lo else ''}{' and ' if not lo and not hi else ''}"
                   f"{'no upper' if not hi else ''} bound)" for w, lo, hi in _model_slots(model, set())
                   if not (lo and hi)})


def test_every_numeric_field_of_the_spec_is_bounded_both_ways() -> None:
    assert unbounded(ExperimentSpec) == []


def test_the_walk_finds_numbers_in_every_kind_of_container() -> None:
    slots = [w for w, _, _ in _model_slots(ExperimentSpec, set())]
    for where in ("LoadSpec.concurrency[]", "LoadSpec.request_rate[]", "Knobs.accept_probs[]",
                  "Knobs.category_accept_probs[][]", "WorkloadSpec.input_tokens", "SpeculativeSpec.num_steps[]",
                  "ModelSpec.tp", "ExperimentSpec.seed", "Knobs.backend_speed_factors[]"):
        assert where in slots, where
    assert len(slots) >= 85


class _Unbounded(BaseModel):
    plain: int = 0
    low_only: int = Field(default=0, ge=0)
    items: list[int] = Field(default_factory=list, min_length=1)
    optional: Optional[Annotated[float, Field(gt=0)]] = None
    mapped: dict[str, tuple[Annotated[int, Field(le=3)], ...]] = Field(default_factory=dict)
    bounded: Annotated[int, Field(ge=0, le=9)] = 0


def test_the_walk_reports_what_has_no_bound() -> None:
    assert unbounded(_Unbounded) == [
        "_Unbounded.items[] (no lower and no upper bound)",
        "_Unbounded.low_only (no upper bound)",
        "_Unbounded.mapped[][] (no lower bound)",
        "_Unbounded.optional (no upper bound)",
        "_Unbounded.plain (no lower and no upper bound)",
    ]


def test_every_bound_says_where_it_comes_from() -> None:
    """Each constant of cluster/config/bounds.py is followed by its docstring (the domain fact behind it)."""
    tree = ast.parse(Path(bounds.__file__).read_text())
    body = tree.body
    def documented(i: int) -> bool:
        after = body[i + 1] if i + 1 < len(body) else None
        return isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) \
            and isinstance(after.value.value, str)

    missing = [ast.unparse(stmt.targets[0]) for i, stmt in enumerate(body)
               if isinstance(stmt, ast.Assign) and not documented(i)]
    assert missing == []
    assert sum(isinstance(s, ast.Assign) for s in body) >= 25


def test_a_concurrency_search_is_held_to_the_concurrency_bound() -> None:
    """load.search.max shares its float field with request-rate searches; over: concurrency it is a concurrency."""
    text = VALID.replace("  concurrency: [1, 4]", "  search: {slo_attainment: 0.9, min: 1, max: 1000000}") \
        + "slo: {ttft_ms: 500}\n"
    with pytest.raises(SpecError) as info:
        parse_spec_text(text, "x.yaml")
    assert info.value.field == "load.search.max" and "at most 65536" in info.value.message
    assert parse_spec_text(text.replace("max: 1000000", "max: 65536"), "x.yaml").load.search is not None
