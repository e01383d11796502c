"""Chat template settings as an axis: a workload whose `prompts.chat_template_kwargs` gives a list of values expands
into one workload per value (per combination, over several lists), the way a num_steps list expands a variant.

Names are deterministic and sanitised: NAME-<setting>, the setting joined from each listed variable's label in the
order declared. A boolean variable's label is its name without an `enable_` prefix, `no-` before it when false
(`enable_thinking: [true, false]` → NAME-thinking, NAME-no-thinking); any other value is `<name>-<value>`
(`reasoning_effort: [low, high]` → NAME-reasoning-effort-low, ...); characters outside letters, digits and '.' become
'-'. Past 64 characters a hash keeps the name unique. Variables given one value are the same in every expansion and
are not named. An expanded workload keeps its declared workload's prompt seed, so every setting sends the same rows,
rendered differently: the setting is the only difference between their runs (their run keys differ by name and
kwargs)."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from typing import Optional, Sequence

from cluster.config.expansion import MAX_NAME_CHARS
from cluster.config.prompts import ConversationPrompts, TemplateScalar
from cluster.config.workload import WorkloadSpec

_UNSAFE = re.compile(r"[^A-Za-z0-9.]+")


def _safe(text: str) -> str:
    return _UNSAFE.sub("-", text).strip("-") or "empty"


def setting_label(name: str, value: TemplateScalar) -> str:
    """One variable's part of an expanded workload's name (`thinking`, `no-thinking`, `reasoning-effort-low`)."""
    base = _safe(name[len("enable_"):] if name.startswith("enable_") and len(name) > len("enable_") else name)
    if isinstance(value, bool):
        return base if value else f"no-{base}"
    return f"{base}-{_safe(value if isinstance(value, str) else json.dumps(value))}"


def setting_key(name: str, value: TemplateScalar) -> str:
    """`name=value` with the value as JSON (`enable_thinking=false`): how a request's setting is written where it
    travels as text (the simulator's template_accept_probs keys, the request header it reads them from)."""
    return f"{name}={json.dumps(value)}"


def _axes(w: WorkloadSpec) -> list[tuple[str, list[TemplateScalar]]]:
    p = w.prompts
    if not isinstance(p, ConversationPrompts):
        return []
    return [(k, list(v)) for k, v in p.chat_template_kwargs.items() if isinstance(v, list)]


def settings(w: WorkloadSpec) -> list[tuple[str, dict[str, TemplateScalar]]]:
    """(setting label, the listed variables' values) per expansion, in declared order; [] without an axis."""
    axes = _axes(w)
    if not axes:
        return []
    out = []
    for combo in itertools.product(*(values for _, values in axes)):
        chosen = {k: v for (k, _), v in zip(axes, combo)}
        out.append(("-".join(setting_label(k, v) for k, v in chosen.items()), chosen))
    return out


def _name(base: str, label: str) -> str:
    name = f"{base}-{label}"
    if len(name) > MAX_NAME_CHARS:
        name = f"{base[:40]}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
    return name


def expanded_workload_names(w: WorkloadSpec) -> list[str]:
    """The names a declared workload expands into (itself without an axis)."""
    found = settings(w)
    return [_name(w.name, label) for label, _ in found] if found else [w.name]


def expand_workload(w: WorkloadSpec) -> list[WorkloadSpec]:
    """One workload per setting, each with plain values only (the declared one itself without an axis)."""
    found = settings(w)
    if not found:
        return [w]
    p = w.prompts
    assert isinstance(p, ConversationPrompts)
    out = []
    for label, chosen in found:
        kwargs = {**p.chat_template_kwargs, **chosen}
        x = w.model_copy(update={"name": _name(w.name, label),
                                 "prompts": p.model_copy(update={"chat_template_kwargs": kwargs})})
        x._setting_of = (w.name, label)
        out.append(x)
    return out


def expand_workloads(workloads: Sequence[WorkloadSpec]) -> list[WorkloadSpec]:
    """Every declared workload's expansions, in declared order (what the planner runs)."""
    return [x for w in workloads for x in expand_workload(w)]


def duplicate_label(w: WorkloadSpec) -> Optional[str]:
    """A label two of the workload's settings share after sanitising (e.g. values 'a b' and 'a/b'), else None."""
    labels = [label for label, _ in settings(w)]
    return next((x for i, x in enumerate(labels) if x in labels[:i]), None)
