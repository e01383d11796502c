"""Joining a Ray cluster ends within its declared deadline: a closed port is refused at once, a listener that accepts
and never answers within SGLBENCH_RAY_JOIN_TIMEOUT_S (Ray's own connect loop cut to fit), each as one `error:` line
naming the address, exit 3. Before, both waited on Ray's retry loop (~14 minutes) until killed."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import NoReturn

import pytest
import ray

from cluster.distributed.cluster_state import join_cluster, ray_join_knobs
from cluster.errors import EXIT_ENVIRONMENT, EnvironmentFault, UserError
from cluster.kernel.deadlines import RAY_JOIN

SLACK_S = 10.0
"""What a loaded machine may add past the deadline (Ray's import and driver set-up, the last try's 1 s sleep)."""


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def silent_listener() -> Iterator[int]:
    """A loopback port that accepts TCP connections and never says a word. Tests talk to loopback only: with
    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 (tests/conftest.py) Ray keeps a loopback address as it is
    (services.get_node_ip_address), so nothing needs to listen on the machine's other addresses."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield int(s.getsockname()[1])


@pytest.mark.timeout(60)
def test_a_closed_port_is_refused_at_once_naming_the_address(monkeypatch: pytest.MonkeyPatch) -> None:
    port = _closed_port()
    start = time.monotonic()
    with pytest.raises(EnvironmentFault) as e:
        join_cluster(f"127.0.0.1:{port}", note=lambda line: None)
    assert time.monotonic() - start < SLACK_S
    assert f"cannot join the Ray cluster at 127.0.0.1:{port}: " in str(e.value) and "refused" in str(e.value)
    assert e.value.exit_code == EXIT_ENVIRONMENT and not ray.is_initialized()


@pytest.mark.timeout(120)
def test_a_peer_that_never_answers_is_refused_at_the_deadline(silent_listener: int,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RAY_JOIN.env, "4")
    before = {k: os.environ.get(k) for k in ray_join_knobs(4.0)}
    start = time.monotonic()
    with pytest.raises(EnvironmentFault) as e:
        join_cluster(f"127.0.0.1:{silent_listener}", note=lambda line: None)
    took = time.monotonic() - start
    assert took < 4.0 + SLACK_S, took
    assert f"cannot join the Ray cluster at 127.0.0.1:{silent_listener} within its 4 s deadline ({RAY_JOIN.env})" \
        in str(e.value)
    assert not ray.is_initialized()
    assert {k: os.environ.get(k) for k in before} == before  # the knobs were for the join only


@pytest.mark.timeout(60)
def test_a_name_that_never_resolves_is_refused_at_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Failed before: the TCP check's name lookup (getaddrinfo, which takes no timeout) held the join for as long as
    the resolver took (here 20 s, then its failure), past SGLBENCH_RAY_JOIN_TIMEOUT_S."""
    release = threading.Event()

    def resolver_that_hangs(*args: object, **kwargs: object) -> NoReturn:
        release.wait(20.0)
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", resolver_that_hangs)  # no lookup leaves the machine
    monkeypatch.setenv(RAY_JOIN.env, "2")
    start = time.monotonic()
    try:
        with pytest.raises(EnvironmentFault) as e:
            join_cluster("ray-head.invalid:6379", note=lambda line: None)
    finally:
        release.set()
    took = time.monotonic() - start
    assert took < 2.0 + 1.0, took
    assert "cannot join the Ray cluster at ray-head.invalid:6379: resolving 'ray-head.invalid' did not finish " \
        "within 2 s" in str(e.value)
    assert e.value.exit_code == EXIT_ENVIRONMENT and not ray.is_initialized()


@pytest.mark.timeout(60)
def test_doctor_on_a_closed_port_is_one_error_line_and_exit_3() -> None:
    from typer.testing import CliRunner

    from cluster.cli import app

    port = _closed_port()
    res = CliRunner().invoke(app, ["doctor", "--address", f"127.0.0.1:{port}"])
    errors = [ln for ln in res.output.splitlines() if ln.startswith("error: ")]
    assert res.exit_code == 3 and len(errors) == 1 and f"127.0.0.1:{port}" in errors[0], res.output
    assert "Traceback" not in res.output


@pytest.mark.parametrize("deadline_s", [4.0, 5.5, 12.0, 30.0, 90.0, 600.0])
def test_rays_tries_fit_the_deadline(deadline_s: float) -> None:
    knobs = ray_join_knobs(deadline_s)
    step_s = int(knobs["RAY_gcs_rpc_server_connect_timeout_s"])
    assert int(knobs["RAY_py_gcs_connect_timeout_s"]) == step_s
    tries = int(knobs["RAY_gcs_server_port_wait_time_s"])
    per_try_s = 3 * step_s + 1  # GCS channel + pubsub channel + cluster id + Ray's 1 s sleep
    assert tries * per_try_s <= deadline_s < (tries + 1) * per_try_s + 3 * step_s + 1


def test_a_smaller_deadline_than_one_try_still_gets_one() -> None:
    assert ray_join_knobs(0.5) == {"RAY_gcs_rpc_server_connect_timeout_s": "1", "RAY_py_gcs_connect_timeout_s": "1",
                                   "RAY_gcs_server_port_wait_time_s": "1"}


@pytest.mark.parametrize("raw", ["0", "-3", "nan", "inf", "soon"])
def test_an_override_that_is_not_a_deadline_is_refused_naming_it(raw: str) -> None:
    with pytest.raises(UserError, match=f"{RAY_JOIN.env}='{raw}' is not a deadline; expected a positive number"):
        RAY_JOIN.seconds({RAY_JOIN.env: raw})
    assert RAY_JOIN.seconds({}) == RAY_JOIN.default_s
