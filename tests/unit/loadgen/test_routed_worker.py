"""The worker a gateway routed each request to (its ROUTED_WORKER_HEADER) goes from the response head to the record
and into the requests batch's nullable `worker` column: kept as sent, on every request the header came with (a
worker's error too), null where none came (one server, the gateway's own error)."""

from __future__ import annotations

import asyncio

from cluster.engines.gateway import ROUTED_WORKER_HEADER
from cluster.kernel.records import REQUEST_BATCH_SCHEMA, RequestRecord
from cluster.loadgen.client import StreamPool
from cluster.loadgen.sink import RecordSink
from tests.unit.loadgen.test_client import _chunked, _event, _one, _read_request, _serve

WORKERS = ("http://127.0.0.1:30001", "http://Worker-B.local:30002")


def _head(status: str, worker: str | None, extra: bytes = b"") -> bytes:
    # the header's name in another case than the constant's: HTTP header names are case-insensitive
    named = b"" if worker is None else ROUTED_WORKER_HEADER.title().encode() + b": " + worker.encode() + b"\r\n"
    return b"HTTP/1.1 " + status.encode() + b"\r\n" + named + extra


def test_each_record_carries_the_worker_its_response_named() -> None:
    answers = [
        _head("200 OK", WORKERS[0], b"Transfer-Encoding: chunked\r\n\r\n") + _chunked([_event(1, 1), b"data: [DONE]\n\n"]),
        _head("200 OK", WORKERS[1], b"Transfer-Encoding: chunked\r\n\r\n") + _chunked([_event(1, 1), b"data: [DONE]\n\n"]),
        _head("200 OK", None, b"Transfer-Encoding: chunked\r\n\r\n") + _chunked([_event(1, 1), b"data: [DONE]\n\n"]),
        # a worker's own error passes through the gateway with the header
        _head("503 Service Unavailable", WORKERS[1], b"Content-Length: 4\r\n\r\n") + b"busy",
        # the gateway's own error (a dead worker, retries disabled) names no worker in the header
        _head("500 Internal Server Error", None, b"x-smg-error-code: call_upstream_connection_failed\r\n"
              b"Content-Length: 2\r\n\r\n") + b"{}",
    ]

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        i = 0
        while await _read_request(r) is not None:
            w.write(answers[i])
            i += 1
            await w.drain()
        w.close()

    recs: list[RequestRecord] = []

    async def body(url: str) -> None:
        async with StreamPool(url, 1) as pool:
            for _ in answers:
                recs.append(await _one(pool))

    asyncio.run(_serve(handler, body))
    assert [r.worker for r in recs] == [WORKERS[0], WORKERS[1], None, WORKERS[1], None]
    assert [r.http_status for r in recs] == [200, 200, 200, 503, 500]
    assert recs[0].error is None and recs[3].error is not None

    sink = RecordSink(len(recs))
    for i, r in enumerate(recs):
        r.request_index = i
        sink.add(r, 10)
    sink.flush()
    reqs, _ = sink.kept_batches()
    assert reqs.schema.field("worker") == REQUEST_BATCH_SCHEMA.field("worker")
    assert REQUEST_BATCH_SCHEMA.field("worker").nullable
    assert reqs.column("worker").to_pylist() == [WORKERS[0], WORKERS[1], None, WORKERS[1], None]
