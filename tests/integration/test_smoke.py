"""`sglbench smoke` against a tiny in-test fake SGLang (good and broken) and against the simulator."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import pytest
from typer.testing import CliRunner

from cluster.engines.http_call import ServerRefusedError
from cluster.engines.smoke import run_smoke
from cluster.server.process import free_port


class FakeSGLang(BaseHTTPRequestHandler):
    speculative = True
    server_info_path = "/server_info"
    drop_done = False
    mrr = 64

    def log_message(self, *a: Any) -> None:
        pass

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(200, b"")
        elif self.path == "/model_info":
            self._send(200, json.dumps({"model_path": "/m", "is_generation": True}).encode())
        elif self.path == self.server_info_path:
            doc: dict[str, Any] = {"version": "0.5.23", "max_running_requests": self.mrr,
                                   "internal_states": [{"avg_spec_accept_length": 2.5}]}
            if self.speculative:
                doc.update(speculative_algorithm="EAGLE", speculative_num_steps=2, speculative_eagle_topk=1,
                           speculative_num_draft_tokens=3)
            self._send(200, json.dumps(doc).encode())
        else:
            self._send(404, b'{"detail":"Not Found"}')

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(n)
        if self.path == "/flush_cache":
            self._send(200, b"Cache flushed.", "text/plain")
            return
        if self.path != "/generate":
            self._send(404, b"")
            return
        events = []
        for ct in (1, 4, 7, 10, 13, 16):
            meta = {"id": "r", "finish_reason": None if ct < 16 else {"type": "length", "length": 16},
                    "prompt_tokens": 8, "completion_tokens": ct, "cached_tokens": 0}
            if ct == 16 and self.speculative:
                meta["spec_verify_ct"] = 5
            events.append(b"data: " + json.dumps({"text": "OK" * ct, "meta_info": meta}).encode() + b"\n\n")
        if not self.drop_done:
            events.append(b"data: [DONE]\n\n")
        self._send(200, b"".join(events), "text/event-stream")


@pytest.fixture
def fake() -> Iterator[tuple[str, type[FakeSGLang]]]:
    handler = type("H", (FakeSGLang,), {})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", handler
    finally:
        srv.shutdown()
        srv.server_close()


def failed(url: str) -> set[str]:
    return {c.name for c in run_smoke(url, 5.0) if not c.ok}


def test_good_speculative_server_passes(fake: tuple[str, type[FakeSGLang]]) -> None:
    url, _ = fake
    checks = run_smoke(url, 5.0)
    assert [c.name for c in checks if not c.ok] == []
    assert "meta_info.spec_verify_ct" in {c.name for c in checks}


def test_each_broken_assumption_is_reported(fake: tuple[str, type[FakeSGLang]]) -> None:
    url, h = fake
    h.drop_done = True
    assert failed(url) == {"stream ends with [DONE]"}
    h.drop_done, h.mrr = False, 48
    assert failed(url) == {"max_running_requests not silently capped"}
    h.mrr, h.server_info_path = 64, "/get_server_info"
    assert failed(url) == {"GET /server_info"}


def test_unreachable_server_fails_fast_and_says_nothing_listens() -> None:
    port = free_port()  # bound and released: nothing listens there
    t0 = time.monotonic()
    with pytest.raises(ServerRefusedError, match=rf"connection refused \(nothing listening on 127.0.0.1:{port}\)"):
        run_smoke(f"http://127.0.0.1:{port}", 2.0)
    assert time.monotonic() - t0 < 1.0


def test_cli_prints_table_and_exits_1_on_failure(fake: tuple[str, type[FakeSGLang]]) -> None:
    from cluster.cli import app

    url, h = fake
    res = CliRunner().invoke(app, ["smoke", url, "--timeout", "5"])
    assert res.exit_code == 0, res.output
    assert "27 passed, 0 failed" in res.output  # 18 checks and the 9 answer invariants, one row each
    h.drop_done = True
    res = CliRunner().invoke(app, ["smoke", url])
    assert res.exit_code == 1 and "FAIL" in res.output and "26 passed, 1 failed" in res.output


@pytest.mark.parametrize("spec", [False, True])
def test_smoke_against_the_simulator(spec: bool) -> None:
    pytest.importorskip("cluster.sim.server")
    port = free_port()
    argv = [sys.executable, "-m", "cluster.sim.server", "--model-path", "sim://q", "--host", "127.0.0.1",
            "--port", str(port), "--max-running-requests", "64"]
    if spec:
        argv += ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "2", "--speculative-eagle-topk", "1",
                 "--speculative-num-draft-tokens", "3"]
    env = {**os.environ, "SGLBENCH_SIM": json.dumps({"time_scale": 0.05})}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, "simulator exited"
                time.sleep(0.1)
        checks = run_smoke(f"http://127.0.0.1:{port}", 10.0)
        assert [(c.name, c.expected, c.found) for c in checks if not c.ok] == []
        assert ("meta_info.spec_verify_ct" in {c.name for c in checks}) is spec
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize("url, says", [
    ("http://127.0.0.1:99999", "invalid port '99999'"), ("htp://127.0.0.1:30000", "unknown URI scheme 'htp'"),
    ("127.0.0.1:30000", "no scheme"), ("http://:30000", "no host")])
def test_cli_a_bad_url_is_exit_2_and_says_what_is_wrong(url: str, says: str) -> None:
    from cluster.cli import app

    res = CliRunner().invoke(app, ["smoke", url, "--timeout", "1"])
    assert res.exit_code == 2 and says in res.output, res.output


def test_cli_nothing_listening_is_exit_4_connection_refused() -> None:
    from cluster.cli import app

    port = free_port()
    res = CliRunner().invoke(app, ["smoke", f"http://127.0.0.1:{port}", "--timeout", "1"])
    assert res.exit_code == 4 and "connection refused (nothing listening on" in res.output, res.output
    assert "unreachable" not in res.output


def test_cli_a_silent_server_is_exit_4_timed_out_after_its_deadline() -> None:
    from cluster.cli import app
    from tests.fuzz.replay_server import ReplayServer, Script

    with ReplayServer(lambda m, p: Script((b"HTTP/1.1 200 OK\r\n",), gap_s=0.05, then="trickle")) as srv:
        t0 = time.monotonic()
        res = CliRunner().invoke(app, ["smoke", srv.url, "--timeout", "0.5"])
        assert time.monotonic() - t0 < 2.0
    assert res.exit_code == 4 and "GET /health" not in res.output and "timed out after 0.5 s" in res.output, \
        res.output


def _smoke_cli(handler: type[FakeSGLang], timeout_s: float) -> tuple[int, str]:
    """`sglbench smoke` against `handler` served on loopback: its exit code and its output on one line."""
    from cluster.cli import app

    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        res = CliRunner().invoke(app, ["smoke", f"http://127.0.0.1:{srv.server_address[1]}", "--timeout",
                                       str(timeout_s)])
    finally:
        srv.shutdown()
        srv.server_close()
    return res.exit_code, " ".join(res.output.split())


class MalformedMeta(FakeSGLang):
    """Answers /health and the info calls well; its stream's meta_info is a string, or its /generate never ends."""

    mode = "meta-str"

    def do_POST(self) -> None:
        if self.path != "/generate":
            super().do_POST()
            return
        n = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(n)
        if self.mode == "meta-str":
            self._send(200, b'data: {"text": "OK", "meta_info": "oops"}\n\ndata: [DONE]\n\n', "text/event-stream")
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", "1000000")
        self.end_headers()
        try:
            for _ in range(400):  # a byte every 10 ms: never done inside smoke's deadline
                self.wfile.write(b"d")
                self.wfile.flush()
                time.sleep(0.01)
        except OSError:
            pass


@pytest.mark.parametrize("mode, says", [
    ("meta-str", "chunk.meta_info: expected an object, got a string 'oops'"),
    ("trickle", "POST /generate (stream)"),
])
def test_cli_a_malformed_or_endless_generate_is_its_row_and_exit_4(mode: str, says: str) -> None:
    t0 = time.monotonic()
    code, flat = _smoke_cli(type("H", (MalformedMeta,), {"mode": mode}), 1.0)
    assert time.monotonic() - t0 < 6.0
    assert code == 4 and "failed at the server's end" in flat and says in flat, flat
    if mode == "trickle":
        assert "timed out after 1 s" in flat


class NotJsonInfo(FakeSGLang):
    """/server_info answers 200 with a body that is not JSON (or JSON of the wrong types)."""

    body = b"<html>oops</html>"

    def do_GET(self) -> None:
        if self.path == "/server_info":
            self._send(200, self.body)
        else:
            super().do_GET()


@pytest.mark.parametrize("body, says", [
    (b"<html>oops</html>", "GET /server_info"),
    (b'{"version": 5, "max_running_requests": 64, "internal_states": []}',
     "/server_info.version: expected a string, got an integer 5"),
])
def test_cli_a_server_info_that_is_not_json_or_mistyped_is_exit_4(body: bytes, says: str) -> None:
    code, flat = _smoke_cli(type("H", (NotJsonInfo,), {"body": body}), 2.0)
    assert code == 4 and "failed at the server's end" in flat and says in flat, flat


class MistypedInfo(FakeSGLang):
    """/server_info and /model_info answer with SGLang's keys in the wrong types (F20)."""

    def do_GET(self) -> None:
        if self.path == "/server_info":
            self._send(200, json.dumps({"version": 5, "max_running_requests": "64", "internal_states": []}).encode())
        elif self.path == "/model_info":
            self._send(200, json.dumps({"model_path": 3}).encode())
        else:
            super().do_GET()


def test_a_key_of_the_wrong_type_is_said_to_be_present_with_that_type_not_missing() -> None:
    """F20: version 5 and max_running_requests "64" were rows 'missing'; model_path 3 was 'ok'."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), MistypedInfo)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        rows = {c.name: c for c in run_smoke(f"http://127.0.0.1:{srv.server_address[1]}", 2.0)}
    finally:
        srv.shutdown()
        srv.server_close()
    assert rows["GET /model_info"].fault and "model_path: expected a string, got an integer 3" in \
        rows["GET /model_info"].found
    v, m = rows["server_info.version"], rows["server_info.max_running_requests"]
    assert not v.ok and "present" in v.found and "expected a string, got an integer 5" in v.found, v
    assert not m.ok and "present" in m.found and "non-negative integer, got a string '64'" in m.found, m
    assert rows["server_info types"].fault
