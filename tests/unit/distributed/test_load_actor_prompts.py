"""A load actor builds a workload's window inputs (prompts, session plan, the audited selection) once per (workload,
seed) and reuses them across its load points; a new seed or another workload builds anew (no Ray: the actor's class
is called in this process, against a loopback SSE server)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Callable

import pytest

import cluster.loadgen.prompt_sources as prompt_sources
from cluster.config.workload import WorkloadSpec
from cluster.distributed.actors import LoadActorImpl, LoadBatch
from cluster.distributed.built_prompts import BuiltPrompts, WindowInputs
from cluster.kernel.runs import LoadPoint
from cluster.kernel.window import MeasuredWindow
from cluster.kernel.window_job import WindowJob
from tests.unit.loadgen.test_batches import CHUNKS, RawSSEServer


def _wl(name: str = "w", n: int = 8) -> WorkloadSpec:
    return WorkloadSpec.model_validate({"name": name, "input_tokens": 16, "output_tokens": CHUNKS, "num_requests": n})


def _counting(monkeypatch: pytest.MonkeyPatch, calls: Counter[str]) -> None:
    def wrap(module: Any, name: str) -> None:
        real: Callable[..., Any] = getattr(module, name)

        def counted(*a: Any, **kw: Any) -> Any:
            calls[name] += 1
            return real(*a, **kw)

        monkeypatch.setattr(module, name, counted)

    wrap(prompt_sources, "build_prompt_sequence")
    wrap(prompt_sources, "build_session_plan")
    wrap(prompt_sources, "workload_selection")


def test_a_load_actor_builds_a_workloads_prompts_once_across_its_points(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    calls: Counter[str] = Counter()
    _counting(monkeypatch, calls)
    actor = LoadActorImpl("sglang", str(tmp_path))
    sent: list[int] = []
    with RawSSEServer() as srv:
        for load, seed, wl in [(LoadPoint("concurrency", 2.0), 5, _wl()), (LoadPoint("concurrency", 4.0), 5, _wl()),
                               (LoadPoint("rate", 500.0), 5, _wl()), (LoadPoint("concurrency", 2.0), 6, _wl()),
                               (LoadPoint("concurrency", 2.0), 5, _wl("other"))]:
            job = WindowJob(srv.url, "native", CHUNKS, load, seed, True, 0.0, "m", 30.0, workload=wl,
                            scrape_metrics=False)
            msgs = list(actor.run_point_stream(job))
            assert isinstance(msgs[-1], MeasuredWindow) and msgs[-1].selection is not None
            sent.append(sum(m.requests.num_rows for m in msgs if isinstance(m, LoadBatch)))
    assert sent == [8] * 5
    # three points of (w, 5) share one build; (w, 6) and (other, 5) build their own
    assert calls == Counter({"build_prompt_sequence": 3, "build_session_plan": 3, "workload_selection": 3})


def test_kept_inputs_are_bounded_by_their_requests_and_the_newest_stays() -> None:
    kept = BuiltPrompts(max_requests=10)
    built: list[str] = []

    def build(tag: str) -> Callable[[], WindowInputs]:
        return lambda: built.append(tag) or WindowInputs([tag], None, None)  # type: ignore[func-returns-value]

    a, b = _wl("a", 6), _wl("b", 6)
    kept.get(a, 1, True, build("a"))
    kept.get(a, 1, True, build("a"))
    assert built == ["a"]
    kept.get(b, 1, True, build("b"))  # 12 > 10: the older is let go, the newest stays although over the bound
    kept.get(b, 1, True, build("b"))
    kept.get(a, 1, True, build("a"))
    assert built == ["a", "b", "a"]
    kept.get(a, 1, False, build("a-unaudited"))  # the shard that does not audit builds no selection
    assert built[-1] == "a-unaudited"
