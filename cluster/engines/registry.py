"""The registered engines' adapters, and each fact of an engine for the consumer that owns it: `get_engine(name)` the
adapter, `is_simulated(name)` for labels over stored rows, and one narrow question per consumer (tuning surface, cap
flags, metric names, packages, argv dialect, checkpoint probe).

Engines are registered by name in cluster/config/engines.py (the spec below this package validates the names; see
its docstring): this module resolves an entry's `module:Class` to the adapter class, which holds every other fact.
"""

from __future__ import annotations

import functools
import importlib

from cluster.config.engines import engine_entries, engine_entry, engine_names
from cluster.engines.base import Engine
from cluster.engines.sim import SimDeviceSampler
from cluster.engines.tuning_surfaces import AnyTuningSurface
from cluster.errors import UserError


@functools.lru_cache(maxsize=None)
def _load(adapter: str) -> type[Engine]:
    module, _, attr = adapter.partition(":")
    found = getattr(importlib.import_module(module), attr)
    if not (isinstance(found, type) and issubclass(found, Engine)):
        raise TypeError(f"{adapter} is not an Engine subclass")
    return found


def engine_class(name: str) -> type[Engine]:
    """The adapter class registered under `name`; UserError (naming the registered engines) for any other name."""
    entry = engine_entry(name)
    if entry is None:
        names = engine_names()
        expected = ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]
        raise UserError(f"unknown engine {name!r} (expected {expected})", field="engine", expected=expected)
    cls = _load(entry.adapter)
    if cls.name != name:
        raise TypeError(f"engine {name!r} is registered with {entry.adapter}, whose name is {cls.name!r}")
    return cls


def get_engine(name: str) -> Engine:
    return engine_class(name)()


def is_simulated(engine_name: str) -> bool:
    """True when the engine named (a variant's, or a stored row's `engine` column) is the simulator: its figures
    are labelled simulated. An unknown name (a row written by another version) is not."""
    return engine_entry(engine_name) is not None and engine_class(engine_name).simulated


def is_simulated_source(source: str) -> bool:
    """True when device readings (gpu_metrics' `source` column) come from the simulator's device model."""
    return source == SimDeviceSampler.source


def get_tuning_surface(name: str) -> AnyTuningSurface:
    """An engine's answers to the tuning stage (cluster/engines/tuning_surfaces.py); UserError as get_engine's."""
    return engine_class(name).tuning_surface()


def cap_flags(name: str) -> frozenset[str]:
    """The server flags (full names, dashes) that cap the requests the engine's server runs at once."""
    return engine_class(name).cap_flags


def speaks_sglang_argv(name: str) -> bool:
    """The engine's server takes SGLang's flags (SGLang's fairness rules apply to its argv)."""
    return engine_class(name).sglang_argv


def sglang_argv_engines() -> tuple[str, ...]:
    """The registered engines whose server takes SGLang's flags, in registration order."""
    return tuple(n for n in engine_names() if speaks_sglang_argv(n))


def probes_checkpoint(name: str) -> bool:
    """Preflight probes the engine's model path even where it is not a directory here."""
    return engine_class(name).checkpoint_probed


def _union(per_engine: list[tuple[str, ...]]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(x for names in per_engine for x in names))


def scraped_metric_names() -> tuple[str, ...]:
    """Every registered engine's scraped Prometheus names (a server only exposes its own engine's): its gauges and
    counters, then its TTFT-part histograms' _sum and _count series."""
    return _union([engine_class(e.name).scraped_metrics
                   + tuple(x for h in engine_class(e.name).ttft_part_histograms for x in h.series)
                   for e in engine_entries()])


def reported_packages() -> tuple[str, ...]:
    """Every registered engine's packages, whose versions a run's environment records where installed."""
    return _union([engine_class(e.name).packages for e in engine_entries()])
