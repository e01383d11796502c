"""Every engine adapter satisfies every consumer's protocol: the members exist and each method takes the parameters
the protocol declares (names, order, defaults), bound to an API key or not; no protocol is wider than six members."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from cluster.analysis.engine_facts import EngineFacts
from cluster.engines.base import Engine
from cluster.config.engines import engine_names
from cluster.engines.registry import get_engine
from cluster.loadgen.gate import GateTarget
from cluster.loadgen.load_target import LoadTarget
from cluster.server.engine_server import ServerInfoSource, ServerInstruments, ServerLauncher

PROTOCOLS: tuple[Any, ...] = (LoadTarget, GateTarget, ServerLauncher, ServerInfoSource, ServerInstruments,
                              EngineFacts)


def _members(protocol: Any) -> dict[str, Any]:
    return {name: value for name, value in vars(protocol).items()
            if not name.startswith("_") and (callable(value) or isinstance(value, property))}


def _params(fn: Any) -> list[tuple[str, Any]]:
    return [(p.name, p.default) for p in inspect.signature(fn).parameters.values() if p.name != "self"]


@pytest.mark.parametrize("bound", [False, True])
@pytest.mark.parametrize("name", sorted(engine_names()))
@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda p: p.__name__)
def test_each_adapter_satisfies_each_consumer_protocol(protocol: Any, name: str, bound: bool) -> None:
    adapter: Engine = get_engine(name).with_api_key("k" if bound else None)
    assert isinstance(adapter, protocol)
    for member, declared in _members(protocol).items():
        if isinstance(declared, property):
            assert not callable(getattr(adapter, member)), f"{name}.{member} is a value, not a method"
            continue
        assert _params(getattr(type(adapter), member)) == _params(declared), f"{name}.{member}"


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda p: p.__name__)
def test_no_consumer_protocol_is_wider_than_six_members(protocol: Any) -> None:
    assert 0 < len(_members(protocol)) <= 6, sorted(_members(protocol))


def test_an_adapter_that_lacks_a_member_is_not_a_load_target() -> None:
    class NoParser:
        headers: dict[str, str] = {}
        metrics_path = "/metrics"
        flush_path = None

        def build_request(self, *a: Any) -> None: ...

        def spec_counters(self, metrics_text: str) -> dict[str, float]:
            return {}

    assert not isinstance(NoParser(), LoadTarget)
