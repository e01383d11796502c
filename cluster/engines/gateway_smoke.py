"""`sglbench smoke` against a deployment: SGLang's gateway (smg 1.13.0) and each worker it lists, and the health
servers of the other ranks of a server across nodes (facts: docs/deployments-facts.md §1, §3).

A URL is the gateway when GET /workers answers its worker list (an object whose `workers` is a list): SGLang's own
server has no such route (404), smg 1.13.0 lists every registered worker there with its `url` and `worker_type`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from cluster.engines.answer_fields import MalformedAnswerError, shown
from cluster.engines.http_call import HttpReply, ServerURL, call
from cluster.engines.smoke import (Check, Role, SmokeFault, SmokeMismatch, check_generate, short, SmokeCalls,
                                   failed_calls, mismatch, run_smoke, smoke_url)
from cluster.errors import EngineFault, EnvironmentFault, SglbenchError

from cluster.engines.gateway import (ERROR_CODE_HEADER, LIVENESS_PATH, READINESS_PATH, ROUTED_WORKER_HEADER,
                                     WORKERS_PATH)

RANK_PATHS = ("/health", "/ping")
"""What a rank ≥ 1 of a server across nodes serves: SGLang's dummy health server, 200 with an empty body
(utils/common.py launch_dummy_health_check_server); no API."""


@dataclass(frozen=True)
class ListedWorker:
    """One worker as the gateway lists it."""

    url: str
    worker_type: str
    """regular, prefill or decode."""


@dataclass(frozen=True)
class Gateway:
    """What GET /workers said of a gateway: its workers, or why they could not be read."""

    workers: tuple[ListedWorker, ...]
    problem: Optional[str] = None


@dataclass(frozen=True)
class TargetChecks:
    """The checks of one target of a deployment: the gateway, a worker, a rank's health server, or one server."""

    target: str
    """`server`, `gateway`, `regular worker`, `prefill worker`, `decode worker`, `rank 1`."""
    url: str
    checks: list[Check]


def listed_workers(reply: HttpReply) -> Optional[Gateway]:
    """The gateway's answer to GET /workers read, or None when the answer is not a gateway's (a server's 404)."""
    gateway_error = any(k == ERROR_CODE_HEADER for k, _ in reply.headers)
    try:
        doc = reply.json() if reply.status == 200 else None
    except MalformedAnswerError:
        doc = None
    listed = doc.get("workers") if isinstance(doc, dict) else None
    if not isinstance(listed, list):
        if gateway_error:
            return Gateway((), f"GET {WORKERS_PATH} answered {reply.status} {short(reply.text(), 80)}")
        return None
    workers, bad = [], []
    for w in listed:
        url, kind = (w.get("url"), w.get("worker_type")) if isinstance(w, dict) else (None, None)
        if isinstance(url, str) and kind in ("regular", "prefill", "decode"):
            workers.append(ListedWorker(url, kind))
        else:
            bad.append(shown(w))
    return Gateway(tuple(workers), f"workers without a url or a known worker_type: {short(bad, 120)}" if bad
                   else None)


def find_gateway(url: ServerURL, timeout_s: float) -> Optional[Gateway]:
    """The gateway at `url` (its workers), or None when `url` is not one (or GET /workers failed: the server's
    own checks then say what is wrong)."""
    try:
        reply = call(url, WORKERS_PATH, timeout_s=timeout_s)
    except (EngineFault, EnvironmentFault):
        return None
    return listed_workers(reply)


def _readiness(s: SmokeCalls, listed: int) -> None:
    name, expected = f"GET {READINESS_PATH}", f"200 ready, healthy_workers == total_workers == {listed} listed"
    reply = s.get(name, expected, READINESS_PATH)
    if reply is None:
        return
    usable, doc = s.json(name, expected, reply)
    if not usable:
        return
    d = doc if isinstance(doc, dict) else {}
    healthy, total = d.get("healthy_workers"), d.get("total_workers")
    ok = reply.status == 200 and d.get("status") == "ready" and healthy == total == listed
    s.add(name, ok, expected, f"{reply.status} {short(doc if doc is not None else reply.text(), 70)}")


def _models(s: SmokeCalls) -> None:
    name, expected = "GET /v1/models", "200, at least one model"
    reply = s.get(name, expected, "/v1/models")
    if reply is None:
        return
    usable, doc = s.json(name, expected, reply)
    if not usable:
        return
    data = doc.get("data") if isinstance(doc, dict) else None
    ids = [m.get("id") for m in data if isinstance(m, dict)] if isinstance(data, list) else []
    s.add(name, reply.status == 200 and bool(ids), expected, f"{reply.status} {ids if ids else short(doc, 60)}")


def _speculative(s: SmokeCalls) -> bool:
    """Whether the workers decode speculatively, from /get_server_info (proxied to one worker; the gateway answers
    404 at /server_info)."""
    name, expected = "GET /get_server_info (proxied)", "200 JSON object from a worker"
    reply = s.get(name, expected, "/get_server_info")
    if reply is None:
        return False
    usable, doc = s.json(name, expected, reply)
    if usable:
        s.add(name, reply.status == 200 and isinstance(doc, dict), expected,
              f"{reply.status} " + (f"version {doc.get('version')}" if isinstance(doc, dict) else short(reply.text(), 60)))
    return isinstance(doc, dict) and bool(doc.get("speculative_algorithm"))


def gateway_checks(url: ServerURL, gateway: Gateway, health_status: int, timeout_s: float) -> list[Check]:
    """The gateway's own contract: /health, /liveness, /readiness over every listed worker, the list itself,
    /v1/models, and a streamed /generate through it (the per-server rows and invariants) that names, in its
    routed-worker header, one of the listed workers that answer requests (a decode worker in PD mode)."""
    s = SmokeCalls(url, timeout_s)
    s.add("GET /health", health_status == 200, "200", health_status)
    reply = s.get(f"GET {LIVENESS_PATH}", "200", LIVENESS_PATH)
    if reply is not None:
        s.add(f"GET {LIVENESS_PATH}", reply.status == 200, "200", reply.status)
    kinds = sorted({w.worker_type for w in gateway.workers})
    pd = "prefill" in kinds or "decode" in kinds
    expected = "prefill and decode workers" if pd else "at least one worker"
    listed_ok = gateway.problem is None and ((kinds == ["decode", "prefill"]) if pd else bool(gateway.workers))
    s.add(f"GET {WORKERS_PATH}", listed_ok, expected, gateway.problem or ", ".join(
        f"{sum(w.worker_type == k for w in gateway.workers)} {k}" for k in kinds) or "none")
    _readiness(s, len(gateway.workers))
    _models(s)
    generate = check_generate(s, _speculative(s))
    serving = {w.url for w in gateway.workers if w.worker_type != "prefill"}
    if generate is not None and generate.status == 200:
        routed = [v for k, v in generate.headers if k == ROUTED_WORKER_HEADER]
        s.add(ROUTED_WORKER_HEADER, len(routed) == 1 and routed[0] in serving,
              f"one of the listed {'decode' if pd else 'regular'} workers", routed[0] if routed else "absent")
    return s.checks


def rank_checks(base_url: str, timeout_s: float) -> list[Check]:
    """A rank ≥ 1's dummy health server: /health and /ping answer 200."""
    checks = []
    for path in RANK_PATHS:
        try:
            reply = call(smoke_url(base_url), path, timeout_s=timeout_s)
        except SglbenchError as e:
            checks.append(Check(f"GET {path}", False, "200", short(str(e), 200), fault=True))
            continue
        checks.append(Check(f"GET {path}", reply.status == 200, "200", str(reply.status)))
    return checks


def _worker(w: ListedWorker, timeout_s: float) -> TargetChecks:
    role: Role = "prefill" if w.worker_type == "prefill" else "decode" if w.worker_type == "decode" else "regular"
    try:
        checks = run_smoke(w.url, timeout_s, role=role)
    except SglbenchError as e:  # the worker as the gateway registered it does not answer from here
        checks = [Check("GET /health", False, "200 (the worker URL as the gateway lists it)", short(str(e), 200),
                        fault=True)]
    return TargetChecks(f"{w.worker_type} worker", w.url, checks)


def smoke_deployment(base_url: str, timeout_s: float = 30.0, rank_urls: Sequence[str] = ()) -> list[TargetChecks]:
    """One server's checks, or, when `base_url` is SGLang's gateway, the gateway's and each listed worker's; then
    each of `rank_urls` (the other ranks of the server across nodes) as a health server.

    Raises as run_smoke does when nothing answers at `base_url`, and ServerURLError for an unusable rank URL."""
    url = smoke_url(base_url)
    for r in rank_urls:
        smoke_url(r)
    health = call(url, "/health", timeout_s=timeout_s)  # nothing answers: there is nothing to check
    gateway = find_gateway(url, timeout_s)
    if gateway is None:
        nnodes = 1 + len(rank_urls) if rank_urls else None
        out = [TargetChecks("server" if not rank_urls else "rank 0", str(url),
                            run_smoke(base_url, timeout_s, nnodes=nnodes))]
    else:
        out = [TargetChecks("gateway", str(url), gateway_checks(url, gateway, health.status, timeout_s))]
        out += [_worker(w, timeout_s) for w in gateway.workers]
    out += [TargetChecks(f"rank {i}", r, rank_checks(r, timeout_s)) for i, r in enumerate(rank_urls, start=1)]
    return out


def deployment_failure(targets: Sequence[TargetChecks]) -> Optional[SglbenchError]:
    """The error a smoke ends with: SmokeFault (exit 4) when a call failed at a target's end, naming the first;
    SmokeMismatch (exit 1) when an assumption missed, naming each target's; None when every check passed."""
    for t in targets:
        faults = failed_calls(t.checks)
        if faults and len(targets) == 1:
            return SmokeFault(f"smoke: {len(faults)} call(s) to {t.url} failed at the server's end; first: "
                              f"{faults[0].name}: {faults[0].found}")
        if faults:
            return SmokeFault(f"smoke: {sum(len(failed_calls(x.checks)) for x in targets)} call(s) failed at the "
                              f"server's end; first: {t.target} {t.url}: {faults[0].name}: {faults[0].found}")
    missed = [t for t in targets if any(not c.ok for c in t.checks)]
    if not missed:
        return None
    if len(targets) == 1:
        return mismatch(missed[0].checks, missed[0].url)
    return SmokeMismatch("smoke: " + ". ".join(f"{t.target} {str(mismatch(t.checks, t.url)).removeprefix('smoke: ')}"
                                               for t in missed))

