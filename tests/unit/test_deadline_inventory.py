"""Every wait has a deadline. The inventory (scripts/deadline_inventory.py) finds, by AST, every call in cluster/ that
blocks on Ray, a subprocess, a socket or HTTP server, a chat-template render or a thread; each must carry a timeout
argument or be declared with its bound and why, and docs/deadlines.md is that table. Then each kind is driven against
a peer that never answers (a listener that accepts and says nothing, a closed port, a child that sleeps) with a
small deadline, and must end within it with an error that says what did not answer. Joining a Ray cluster and
template renders are driven in tests/unit/distributed/test_join_deadline.py and
tests/unit/loadgen/test_chat_template_bounds.py."""

from __future__ import annotations

import asyncio
import importlib.util
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
SHORT_S = 0.5
"""The deadline every call here is given: small, so the file stays fast."""
SLACK_S = 5.0
"""What a loaded machine may add past the deadline."""


def _inventory() -> ModuleType:
    spec = importlib.util.spec_from_file_location("deadline_inventory", REPO / "scripts" / "deadline_inventory.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclass looks itself up there
    spec.loader.exec_module(mod)
    return mod


def test_every_blocking_call_has_a_deadline() -> None:
    inv = _inventory()
    waits = inv.scan()
    assert {w.kind for w in waits} >= {"ray", "ray join", "subprocess", "http", "socket", "template"}
    missing = [f"{w.path}:{w.line} {w.function}: {w.call}" for w in inv.unbounded(waits)]
    assert missing == [], "blocking calls without a deadline (give them a timeout argument, or declare their bound " \
                          f"and why in scripts/deadline_inventory.py DECLARED): {missing}"


def test_every_declared_bound_still_matches_a_call() -> None:
    inv = _inventory()
    sites = {(w.path, w.function, w.call) for w in inv.scan()}
    assert [k for k in inv.DECLARED if k not in sites] == []


def test_the_committed_table_is_the_generated_one() -> None:
    inv = _inventory()
    assert (REPO / "docs" / "deadlines.md").read_text(encoding="utf-8") == inv.render(inv.scan()), \
        "docs/deadlines.md is stale: run python scripts/deadline_inventory.py"


NEW_CODE = '''
import subprocess, socket, time, urllib.request, ray
def f(proc, ref, session, addr):
    subprocess.run(["x"])
    proc.wait()
    proc.communicate()
    ray.get(ref)
    ray.wait([ref])
    urllib.request.urlopen("http://x")
    session.post("http://x")
    socket.create_connection(addr)
    s = socket.socket()
    s.connect(addr)
    while not proc.poll():
        time.sleep(1)
'''
BOUNDED_CODE = '''
import subprocess, socket, time, urllib.request, ray
def f(proc, ref, session, addr):
    subprocess.run(["x"], timeout=1)
    proc.wait(timeout=1)
    proc.communicate(timeout=1)
    ray.get(ref, timeout=1)
    ray.wait([ref], timeout=1)
    urllib.request.urlopen("http://x", timeout=1)
    session.post("http://x", timeout=1)
    socket.create_connection(addr, 1)
    s = socket.socket()
    s.settimeout(1)
    s.connect(addr)
    deadline = time.monotonic() + 1
    while not proc.poll() and time.monotonic() < deadline:
        time.sleep(1)
'''


def test_a_new_unbounded_call_of_each_kind_is_caught() -> None:
    inv = _inventory()
    found = inv.unbounded(inv.scan_source(NEW_CODE, "cluster/new_module.py"))
    assert [w.call for w in found] == ["subprocess.run", "proc.wait", "proc.communicate", "ray.get", "ray.wait",
                                       "urllib.request.urlopen", "session.post", "socket.create_connection",
                                       "s.connect", "while not proc.poll()"]
    assert inv.unbounded(inv.scan_source(BOUNDED_CODE, "cluster/new_module.py")) == []
    jinja = "from jinja2 import Template\ndef g(t):\n    return Template(t).render()\n"
    assert [w.kind for w in inv.unbounded(inv.scan_source(jinja, "cluster/other.py"))] == ["template"]


# ------------------------------------------------------------------------------ each kind against a silent peer


@pytest.fixture
def silent() -> Iterator[str]:
    """host:port of a loopback listener that accepts and never answers (closed by this fixture)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield f"127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
def closed() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def _timed(fn):  # type: ignore[no-untyped-def]
    start = time.monotonic()
    try:
        return fn(), time.monotonic() - start
    except Exception as e:  # noqa: BLE001 - the test asserts on it
        return e, time.monotonic() - start


@pytest.mark.timeout(60)
def test_a_server_call_to_a_silent_server_ends_at_its_deadline(silent: str, closed: str) -> None:
    from cluster.engines.http_call import ServerRefusedError, ServerTimeoutError, call

    got, took = _timed(lambda: call(f"http://{silent}", "/health", timeout_s=SHORT_S))
    assert isinstance(got, ServerTimeoutError) and took < SHORT_S + SLACK_S, (got, took)
    assert silent in str(got) and "0.5 s" in str(got)
    got, took = _timed(lambda: call(f"http://{closed}", "/health", timeout_s=SHORT_S))
    assert isinstance(got, ServerRefusedError) and took < SLACK_S, (got, took)


@pytest.mark.timeout(60)
def test_the_load_generators_calls_end_at_their_deadline(silent: str) -> None:
    import aiohttp

    from cluster.engines.registry import get_engine
    from cluster.loadgen.gate import ask_greedy
    from cluster.loadgen.runner import flush

    engine = get_engine("sim")

    async def gate() -> object:
        async with aiohttp.ClientSession() as session:
            return await ask_greedy(session, engine, f"http://{silent}", "hi", 4, "m", SHORT_S)

    got, took = _timed(lambda: asyncio.run(gate()))
    assert took < SHORT_S + SLACK_S and "timed out after 0.5 s" in str(getattr(got, "error", got)), (got, took)
    got, took = _timed(lambda: asyncio.run(flush(engine, f"http://{silent}", SHORT_S)))
    assert got is False and took < SHORT_S + SLACK_S, (got, took)


@pytest.mark.timeout(60)
def test_a_streamed_request_to_a_silent_server_ends_at_its_deadline(silent: str) -> None:
    from cluster.engines.streams import SGLangNativeParser
    from cluster.kernel.records import RequestRecord
    from cluster.loadgen.client import StreamPool, stream_request

    rec = RequestRecord(request_index=0, intended_send_ns=0, actual_send_ns=0, prompt_tokens_sent=3, max_tokens=2)

    async def send() -> None:
        async with StreamPool(f"http://{silent}", 1) as pool:
            await stream_request(pool, "/generate", b"{}", SGLangNativeParser(), time.monotonic_ns(), SHORT_S, rec)

    got, took = _timed(lambda: asyncio.run(send()))
    assert got is None and took < SHORT_S + SLACK_S and rec.error == "timeout after 0.5 s", (got, took, rec.error)


@pytest.mark.timeout(60)
def test_the_device_sampler_ends_at_its_deadline(silent: str) -> None:
    from cluster.engines.sim import SimDeviceSampler

    got, took = _timed(lambda: SimDeviceSampler(f"http://{silent}", ["0"], {}, timeout_s=SHORT_S).sample())
    assert isinstance(got, TimeoutError) and took < SHORT_S + SLACK_S, (got, took)


@pytest.mark.timeout(60)
def test_a_subprocess_that_sleeps_is_stopped_at_its_deadline() -> None:
    from cluster.engines.environment import _run

    got, took = _timed(lambda: _run([sys.executable, "-c", "import time; time.sleep(60)"], SHORT_S))
    assert got is None and took < SHORT_S + SLACK_S, (got, took)


@pytest.mark.timeout(60)
def test_the_job_api_that_never_answers_is_refused_at_its_deadline(silent: str, closed: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from cluster.distributed.jobs import JobClient, JobError
    from cluster.kernel.deadlines import JOB_API

    monkeypatch.setenv(JOB_API.env, str(SHORT_S))
    got, took = _timed(lambda: JobClient(f"http://{silent}"))
    assert isinstance(got, JobError) and took < SHORT_S + SLACK_S, (got, took)
    assert str(got) == f"the Ray job API at http://{silent} did not answer GET /api/version within 0.5 s " \
                       f"({JOB_API.env})"
    got, took = _timed(lambda: JobClient(f"http://{closed}"))
    assert isinstance(got, JobError) and f"cannot reach the Ray job API at http://{closed}" in str(got)
