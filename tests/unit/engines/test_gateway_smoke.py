"""`sglbench smoke` against a deployment, over in-test loopback fakes: what makes a URL SGLang's gateway, a PD gateway
with its prefill and decode workers (the prefill's refusal expected, the decode sent a synthetic decode-only request),
the routed-worker header, and the ranks of a server across nodes. The real gateway over two simulators:
tests/integration/test_smoke_gateway.py."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator, Optional

import pytest
from typer.testing import CliRunner

from cluster.engines.gateway_smoke import (ERROR_CODE_HEADER, ROUTED_WORKER_HEADER, listed_workers,
                                           smoke_deployment)
from cluster.engines.http_call import HttpReply
from cluster.engines.smoke import FAKE_BOOTSTRAP_HOST
from cluster.server.process import free_port


def _stream() -> bytes:
    events = []
    for ct in (1, 6, 11, 16):
        meta = {"id": "r", "finish_reason": None if ct < 16 else {"type": "length", "length": 16},
                "prompt_tokens": 8, "completion_tokens": ct, "cached_tokens": 0}
        events.append(b"data: " + json.dumps({"text": "OK" * ct, "meta_info": meta}).encode() + b"\n\n")
    return b"".join(events) + b"data: [DONE]\n\n"


class Fake(BaseHTTPRequestHandler):
    """A worker: `mode` is its --disaggregation-mode ("null": a regular server)."""

    mode = "null"
    nnodes = 1
    prefill_serves_plain = False
    routed: Optional[str] = None
    bodies: list[dict[str, Any]] = []

    def log_message(self, *a: Any) -> None:
        pass

    def _send(self, status: int, body: bytes, ctype: str = "application/json",
              headers: tuple[tuple[str, str], ...] = ()) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(200, b"")
        elif self.path == "/model_info":
            self._send(200, json.dumps({"model_path": "/m"}).encode())
        elif self.path == "/server_info":
            self._send(200, json.dumps({"version": "0.5.23", "max_running_requests": 64, "nnodes": self.nnodes,
                                        "disaggregation_mode": self.mode,
                                        "internal_states": [{"effective_max_running_requests_per_dp": 64}]}).encode())
        else:
            self._send(404, b'{"detail":"Not Found"}')

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if self.path == "/flush_cache":
            self._send(200, b"Cache flushed.", "text/plain")
        elif self.path != "/generate":
            self._send(404, b"")
        else:
            self.bodies.append(body)
            if self.mode == "prefill" and not self.prefill_serves_plain and "bootstrap_room" not in body:
                self._send(400, b'{"error":"Disaggregated request received without bootstrap room id"}')
            elif self.mode == "decode" and body.get("bootstrap_host") is None:
                self._send(500, b"scheduler died")  # SGLang 0.5.23's decode server: decode.py:155
            else:
                headers = ((ROUTED_WORKER_HEADER, self.routed),) if self.routed else ()
                self._send(200, _stream(), "text/event-stream", headers)


class FakeGateway(Fake):
    workers: list[dict[str, str]] = []

    def do_GET(self) -> None:
        n = len(self.workers)
        answers = {"/liveness": b"OK", "/workers": json.dumps({"workers": self.workers}).encode(),
                   "/readiness": json.dumps({"status": "ready", "healthy_workers": n, "total_workers": n}).encode(),
                   "/v1/models": b'{"object":"list","data":[{"id":"tiny"}]}', "/health": b"OK",
                   "/get_server_info": b'{"version":"0.5.23"}'}
        if self.path in answers:
            self._send(200, answers[self.path])
        else:
            self._send(404, b'{"error":{"code":"unknown_url"}}', headers=((ERROR_CODE_HEADER, "unknown_url"),))


def _serve(handler: type[BaseHTTPRequestHandler]) -> tuple[ThreadingHTTPServer, str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"


@pytest.fixture
def pd() -> Iterator[tuple[str, type[Fake], type[Fake], type[FakeGateway]]]:
    """A PD gateway over one prefill and one decode fake (each served by its own server, shut down after)."""
    prefill = type("P", (Fake,), {"mode": "prefill", "bodies": []})
    decode = type("D", (Fake,), {"mode": "decode", "bodies": []})
    servers = []
    try:
        p_srv, p_url = _serve(prefill)
        servers.append(p_srv)
        d_srv, d_url = _serve(decode)
        servers.append(d_srv)
        gateway = type("G", (FakeGateway,), {"routed": d_url, "bodies": [], "workers": [
            {"url": p_url, "worker_type": "prefill"}, {"url": d_url, "worker_type": "decode"}]})
        g_srv, g_url = _serve(gateway)
        servers.append(g_srv)
        yield g_url, prefill, decode, gateway
    finally:
        for srv in servers:
            srv.shutdown()
            srv.server_close()


def _reply(status: int, body: bytes, headers: tuple[tuple[str, str], ...] = ()) -> HttpReply:
    return HttpReply(status, headers, body, "GET http://h:1/workers")


def test_only_a_worker_list_or_the_gateways_error_header_makes_a_url_a_gateway() -> None:
    assert listed_workers(_reply(404, b'{"detail":"Not Found"}')) is None  # SGLang's own server
    assert listed_workers(_reply(200, b'{"workers": "x"}')) is None
    got = listed_workers(_reply(200, b'{"workers":[{"url":"http://a:1","worker_type":"regular","id":"x"}]}'))
    assert got is not None and [(w.url, w.worker_type) for w in got.workers] == [("http://a:1", "regular")]
    assert got.problem is None
    odd = listed_workers(_reply(200, b'{"workers":[{"url":"http://a:1","worker_type":"encode"}]}'))
    assert odd is not None and odd.workers == () and odd.problem and "encode" in odd.problem
    refused = listed_workers(_reply(401, b'{"error":"no"}', ((ERROR_CODE_HEADER, "unauthorized"),)))
    assert refused is not None and refused.problem and "401" in refused.problem


def test_a_pd_gateway_smokes_itself_and_each_worker_in_its_role(
        pd: tuple[str, type[Fake], type[Fake], type[FakeGateway]]) -> None:
    url, prefill, decode, _ = pd
    targets = smoke_deployment(url, 5.0)
    assert [t.target for t in targets] == ["gateway", "prefill worker", "decode worker"]
    assert [(t.target, c.name, c.found) for t in targets for c in t.checks if not c.ok] == []
    pre = {c.name: c for c in targets[1].checks}
    assert pre["POST /generate refused (prefill)"].found.startswith("400")
    assert "POST /generate (stream)" not in pre and pre["server_info.disaggregation_mode"].found == "prefill"
    # the decode server got SGLang's synthetic decode-only request: a plain one would kill its scheduler
    assert [b.get("bootstrap_host") for b in decode.bodies] == [FAKE_BOOTSTRAP_HOST]
    assert {c.name for c in targets[0].checks} >= {"GET /liveness", "GET /readiness", "GET /workers", "GET /v1/models",
                                                   ROUTED_WORKER_HEADER}


def test_a_prefill_worker_that_serves_a_plain_generate_is_a_mismatch_named_by_its_target(
        pd: tuple[str, type[Fake], type[Fake], type[FakeGateway]]) -> None:
    from cluster.cli import app

    url, prefill, _, _ = pd
    prefill.prefill_serves_plain = True
    prefill.mode = "null"
    res = CliRunner().invoke(app, ["smoke", url, "--timeout", "5"])
    assert res.exit_code == 1, res.output
    flat = " ".join(res.output.split())
    assert "prefill worker" in flat and "POST /generate refused (prefill)" in flat
    assert "server_info.disaggregation_mode" in flat and "over 3 targets" in flat


def test_a_routed_header_naming_an_unlisted_worker_fails(
        pd: tuple[str, type[Fake], type[Fake], type[FakeGateway]]) -> None:
    url, _, _, gateway = pd
    gateway.routed = "http://10.9.9.9:1"
    (row,) = [c for c in smoke_deployment(url, 5.0)[0].checks if c.name == ROUTED_WORKER_HEADER]
    assert not row.ok and row.found == "http://10.9.9.9:1"
    gateway.routed = None
    (row,) = [c for c in smoke_deployment(url, 5.0)[0].checks if c.name == ROUTED_WORKER_HEADER]
    assert not row.ok and row.found == "absent"


def test_a_listed_worker_that_does_not_answer_is_exit_4_naming_it(
        pd: tuple[str, type[Fake], type[Fake], type[FakeGateway]]) -> None:
    from cluster.cli import app

    url, _, _, gateway = pd
    dead = f"http://127.0.0.1:{free_port()}"
    gateway.workers = [*gateway.workers, {"url": dead, "worker_type": "decode"}]
    res = CliRunner().invoke(app, ["smoke", url, "--timeout", "5"])
    flat = " ".join(res.output.split())
    assert res.exit_code == 4 and f"decode worker {dead}: GET /health" in flat and "connection refused" in flat, flat


def test_ranks_of_a_server_across_nodes() -> None:
    from cluster.cli import app

    rank0 = type("R0", (Fake,), {"nnodes": 2})

    class Rank(BaseHTTPRequestHandler):  # SGLang's dummy health server on a rank >= 1
        def log_message(self, *a: Any) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200 if self.path in ("/health", "/ping") else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()

    s0, url0 = _serve(rank0)
    s1, url1 = _serve(Rank)
    try:
        targets = smoke_deployment(url0, 5.0, [url1])
        assert [(t.target, t.url) for t in targets] == [("rank 0", url0), ("rank 1", url1)]
        assert [c.name for c in targets[1].checks if c.ok] == ["GET /health", "GET /ping"]
        assert all(c.ok for t in targets for c in t.checks), [(c.name, c.found) for t in targets for c in t.checks]
        rank0.nnodes = 1  # rank 0 does not know of the other rank
        (row,) = [c for c in smoke_deployment(url0, 5.0, [url1])[0].checks if c.name == "server_info.nnodes"]
        assert not row.ok and row.found == "1"
        gone = f"http://127.0.0.1:{free_port()}"
        res = CliRunner().invoke(app, ["smoke", url0, "--timeout", "5", "--rank-url", url1, "--rank-url", gone])
        flat = " ".join(res.output.split())
        assert res.exit_code == 4 and f"rank 2 {gone}: GET /health" in flat, flat
        res = CliRunner().invoke(app, ["smoke", url0, "--rank-url", "htp://x:1"])
        assert res.exit_code == 2 and "htp" in res.output
    finally:
        for srv in (s0, s1):
            srv.shutdown()
            srv.server_close()
