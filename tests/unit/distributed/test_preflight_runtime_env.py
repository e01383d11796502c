"""The checkpoint probe's runtime-env failure (Ray's, not sglbench's): tried once more, then an EnvironmentFault
that says what failed and that nothing was measured (exit code 3), never 'a bug in sglbench' (exit code 70)."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import ray

from cluster.config.loader import parse_spec_text
from cluster.distributed import cluster_state
from cluster.errors import EXIT_ENVIRONMENT, report_error
from cluster.node.preflight import NodePreflight

SPEC = parse_spec_text("version: 1\nname: p\nmodel: {path: sim://m, engine: sim}\nvariants: [{name: base}]\n"
                       "workloads: [{name: w, input_tokens: 8, output_tokens: 8, num_requests: 8}]\n"
                       "load: {concurrency: [1]}\n")
RAY_SAID = ("Traceback (most recent call last):\n  ...\nOSError: Failed to download runtime_env file package "
            "gcs://_ray_pkg_a6.zip from the GCS to the Ray worker node.")


def _fake_ray(monkeypatch: pytest.MonkeyPatch, failures: int) -> list[int]:
    """Ray as remote_preflight uses it, whose probe task fails runtime-env setup `failures` times, then answers."""
    calls: list[int] = []

    class Task:
        def options(self, **opts: Any) -> "Task":
            return self

        def remote(self, *args: Any) -> int:
            calls.append(len(calls) + 1)
            return len(calls)

    def get(ref: int) -> Any:
        if ref <= failures:
            raise ray.exceptions.RuntimeEnvSetupError(RAY_SAID)
        return NodePreflight({}, ["a warning from the node"])

    monkeypatch.setattr(cluster_state, "ray", SimpleNamespace(remote=lambda **kw: lambda fn: Task(), get=get,
                                                              exceptions=ray.exceptions))
    monkeypatch.setattr(cluster_state, "gpu_nodes", lambda: [])
    return calls


def test_one_runtime_env_failure_is_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_ray(monkeypatch, failures=1)
    said: list[str] = []
    assert cluster_state.remote_preflight(SPEC, Path("."), said.append) == {}
    assert calls == [1, 2]
    assert said == ["the checkpoint probe's runtime environment could not be set up (try 1); trying again",
                    "a warning from the node"]


def test_a_second_failure_is_the_clusters_said_with_rays_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_ray(monkeypatch, failures=2)
    with pytest.raises(cluster_state.RuntimeEnvFault) as caught:
        cluster_state.remote_preflight(SPEC, Path("."), lambda line: None)
    assert calls == [1, 2]
    message = str(caught.value)
    assert "runtime environment of the checkpoint probe (2 tries)" in message
    assert "nothing was measured or written" in message
    assert "OSError: Failed to download runtime_env file package gcs://_ray_pkg_a6.zip" in message
    err = io.StringIO()
    assert report_error(caught.value, err) == EXIT_ENVIRONMENT
    assert "bug in sglbench" not in err.getvalue()
