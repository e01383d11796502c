"""Prompt sources: one registered class per source owns its config model, its prompts, what it offers (the audit's
selection) and how a session's later turn is rendered; building a workload's prompts dispatches through the registry
by the type of its `prompts:` model.

The config models sit in cluster/config/prompts.py (below every package that reads them). A source whose model is
not one of the union's members there registers its model in that module's REGISTERED_SOURCES table on registration,
and the union validates such a `prompts:` by it, so config imports no source. Adding a source is one module with one
decorated class (imported before the spec that names it is loaded); no other file names it.
"""

from __future__ import annotations

import pathlib
from typing import ClassVar, Optional, Sequence, TypeVar

import numpy as np

from cluster.config.fields import FrozenModel
from cluster.config.prompts import (PROMPT_SOURCES, REGISTERED_SOURCES, ConversationPrompts, JsonlPrompts,
                                    RandomIdsPrompts, SourceOptions, TextPrompts, TracePrompts)
from cluster.config.workload import WorkloadSpec
from cluster.engines.base import Prompt
from cluster.kernel.planned_workload import PlannedWorkload
from cluster.loadgen import datasets as D
from cluster.loadgen import selection as S
from cluster.loadgen.sessions import Render, SessionPlan, session_plan


class Source:
    """One prompt source. `config`: its model (the workload's `prompts:`); `names`: the `source:` values it answers,
    when the model is not one of config/prompts.py's own (registered there under these names)."""

    config: ClassVar[type[FrozenModel]]
    """Its model: one of config/prompts.py's own, or a SourceOptions registered under `names`."""
    names: ClassVar[tuple[str, ...]] = ()

    def prompts(self, workload: WorkloadSpec, n: int, seed: int, base_dir: pathlib.Path,
                model_path: str) -> list[Prompt]:
        """`n` prompts, deterministic in (workload, n, seed); relative paths against `base_dir`."""
        raise NotImplementedError

    def prompt_sequence(self, workload: WorkloadSpec, n: int, seed: int, base_dir: pathlib.Path,
                        model_path: str) -> Sequence[Prompt]:
        """The same prompts, in the most compact form the source has (default: the list)."""
        return self.prompts(workload, n, seed, base_dir, model_path)

    def selection(self, workload: WorkloadSpec, n: int, seed: int, base_dir: pathlib.Path,
                  model_path: str) -> PlannedWorkload:
        """What the source offers a window of `n` requests, read from the source itself (the workload audit)."""
        raise NotImplementedError

    def check(self, workload: WorkloadSpec, base_dir: pathlib.Path, model_path: str) -> Optional[str]:
        """Preflight, before any server starts, of a source registered beside config/prompts.py's own: raise a
        PreflightError naming the field, or return a note for `validate` to print (None: nothing to say)."""
        return None

    def session_render(self, workload: WorkloadSpec, base_dir: pathlib.Path, model_path: str) -> Optional[Render]:
        """How a session's later turn becomes what is sent (None: the turns' ids joined, as the first turn was)."""
        return None


_SOURCES: dict[type[FrozenModel], Source] = {}
C = TypeVar("C", bound=type[Source])


def register_source(cls: C) -> C:
    """Class decorator: the source answers for workloads whose `prompts:` is a `cls.config`; a model that is not one
    of config/prompts.py's own is accepted under each of `cls.names`."""
    if cls.config in _SOURCES and type(_SOURCES[cls.config]) is not cls:
        raise LookupError(f"prompt source {cls.config.__name__} is registered twice ({cls.__name__})")
    _SOURCES[cls.config] = cls()
    for name in cls.names:
        if name in PROMPT_SOURCES or not issubclass(cls.config, SourceOptions):
            raise LookupError(f"prompt source {name!r}: a registered name needs a SourceOptions model, not one of "
                              "config/prompts.py's own names")
        REGISTERED_SOURCES[name] = cls.config
    return cls


def unregister_source(cls: type[Source]) -> None:
    """Forget a registered source (a test's throwaway source, so it does not outlive the test)."""
    _SOURCES.pop(cls.config, None)
    for name in cls.names:
        REGISTERED_SOURCES.pop(name, None)


def source_of(workload: WorkloadSpec) -> Source:
    """The registered source of a workload's `prompts:`."""
    try:
        return _SOURCES[type(workload.prompts)]
    except KeyError:
        raise LookupError(f"workload {workload.name!r}: no prompt source is registered for "
                          f"{type(workload.prompts).__name__}") from None


def build_prompts(workload: WorkloadSpec, n: int, seed: int, base_dir: pathlib.Path,
                  model_path: str = "") -> list[Prompt]:
    """`n` prompts for `workload`, deterministic in (workload, n, seed); relative paths resolve against `base_dir`.

    A length distribution draws each prompt's input length (random_ids) and each request's max_tokens from
    their own seeded streams (cluster/loadgen/lengths.py); `model_path` is where a tokenizer defaults to."""
    if n < 0:
        raise ValueError(f"number of prompts must be >= 0, got {n}")
    return source_of(workload).prompts(workload, n, seed, base_dir, model_path)


def build_prompt_sequence(workload: WorkloadSpec, n: int, seed: int, base_dir: pathlib.Path,
                          model_path: str = "") -> Sequence[Prompt]:
    """The prompts of `build_prompts`, identical, in the source's most compact form (fixed-length random ids: one
    int32 array, each Prompt built when its request is sent)."""
    if n < 0:
        raise ValueError(f"number of prompts must be >= 0, got {n}")
    return source_of(workload).prompt_sequence(workload, n, seed, base_dir, model_path)


def build_session_plan(workload: WorkloadSpec, n: int, seed: int, base_dir: pathlib.Path,
                       model_path: str = "") -> Optional[SessionPlan]:
    """How a window of `n` requests of `workload` runs as sessions (None: not a session workload): the seeded think
    times, and for conversations how a later turn's text becomes what is sent."""
    if workload.sessions is None:
        return None
    return session_plan(workload.sessions, n, seed, source_of(workload).session_render(workload, base_dir, model_path))


def workload_selection(workload: WorkloadSpec, n: int, seed: int, base_dir: pathlib.Path,
                       model_path: str = "") -> PlannedWorkload:
    """What `workload`'s source offers a window of `n` requests (the same files and tokenizer its prompts use)."""
    return source_of(workload).selection(workload, n, seed, base_dir, model_path)


@register_source
class RandomIds(Source):
    config = RandomIdsPrompts

    def prompts(self, workload: WorkloadSpec, n: int, seed: int, base_dir: pathlib.Path,
                model_path: str) -> list[Prompt]:
        return D.workload_random_ids(workload, n, seed)

    def prompt_sequence(self, workload: WorkloadSpec, n: int, seed: int, base_dir: pathlib.Path,
                        model_path: str) -> Sequence[Prompt]:
        return D.workload_random_ids_sequence(workload, n, seed)

    def selection(self, workload: WorkloadSpec, n: int, seed: int, base_dir: pathlib.Path,
                  model_path: str) -> PlannedWorkload:
        return S.random_ids_selection(workload, seed)


@register_source
class Jsonl(Source):
    config = JsonlPrompts

    def prompts(self, workload: WorkloadSpec, n: int, seed: int, base_dir: pathlib.Path,
                model_path: str) -> list[Prompt]:
        src = workload.prompts
        assert isinstance(src, JsonlPrompts)
        rows = D.load_jsonl_prompts(D.resolve_path(src.path, base_dir))
        return D.with_output_budgets(D.sample_jsonl(rows, n, np.random.default_rng(seed)), workload, seed)

    def selection(self, workload: WorkloadSpec, n: int, seed: int, base_dir: pathlib.Path,
                  model_path: str) -> PlannedWorkload:
        return S.jsonl_selection(workload, base_dir)


@register_source
class Text(Source):
    config = TextPrompts

    def prompts(self, workload: WorkloadSpec, n: int, seed: int, base_dir: pathlib.Path,
                model_path: str) -> list[Prompt]:
        from cluster.loadgen.text_prompts import build_text_prompts

        return D.with_output_budgets(build_text_prompts(workload, n, seed, base_dir, model_path), workload, seed)

    def selection(self, workload: WorkloadSpec, n: int, seed: int, base_dir: pathlib.Path,
                  model_path: str) -> PlannedWorkload:
        return S.text_selection(workload, seed, base_dir, model_path)


@register_source
class Conversations(Source):
    config = ConversationPrompts

    def prompts(self, workload: WorkloadSpec, n: int, seed: int, base_dir: pathlib.Path,
                model_path: str) -> list[Prompt]:
        from cluster.loadgen.conversations import conversation_prompts, load_selection

        sel, encode = load_selection(workload, base_dir, model_path)
        return conversation_prompts(sel, workload, n, seed, encode)

    def selection(self, workload: WorkloadSpec, n: int, seed: int, base_dir: pathlib.Path,
                  model_path: str) -> PlannedWorkload:
        return S.conversation_selection(workload, base_dir, model_path)

    def session_render(self, workload: WorkloadSpec, base_dir: pathlib.Path, model_path: str) -> Optional[Render]:
        from cluster.loadgen.conversations import session_renderer

        return session_renderer(workload, base_dir, model_path)


@register_source
class Trace(Source):
    config = TracePrompts

    def prompts(self, workload: WorkloadSpec, n: int, seed: int, base_dir: pathlib.Path,
                model_path: str) -> list[Prompt]:
        from cluster.loadgen.traces import load_trace, replayed_rows

        src = workload.prompts
        assert isinstance(src, TracePrompts)
        path = D.resolve_path(src.path, base_dir)
        return D.trace_prompts(replayed_rows(load_trace(path), n, path), src.vocab_size, np.random.default_rng(seed))

    def selection(self, workload: WorkloadSpec, n: int, seed: int, base_dir: pathlib.Path,
                  model_path: str) -> PlannedWorkload:
        return S.trace_selection(workload, n, base_dir)
