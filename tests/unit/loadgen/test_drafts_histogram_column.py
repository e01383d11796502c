"""A request's spec_correct_drafts_histogram goes from the parser's RequestMeta to its record and into the requests
batch as a nullable list column (null where the server sent none, the request errored or the engine has no drafts)."""

from __future__ import annotations

import json

from cluster.engines.streams import SGLangNativeParser
from cluster.kernel.records import REQUEST_BATCH_SCHEMA, RequestRecord
from cluster.loadgen.client import _apply_meta
from cluster.loadgen.sink import RecordSink


def _final(hist: object) -> bytes:
    return json.dumps({"text": "ab", "output_ids": [1, 2], "meta_info": {
        "id": "r", "finish_reason": {"type": "length", "length": 2}, "completion_tokens": 2, "spec_verify_ct": 1,
        "spec_correct_drafts_histogram": hist}}).encode()


def _record(i: int, payload: bytes) -> RequestRecord:
    rec = RequestRecord(request_index=i, intended_send_ns=0, actual_send_ns=0, prompt_tokens_sent=3, max_tokens=2,
                        chunk_arrival_ns=[10], chunk_tokens=[2])
    parser = SGLangNativeParser()
    parser.feed(payload)
    _apply_meta(parser, rec)
    return rec


def test_the_histogram_reaches_the_requests_batch() -> None:
    recs = [_record(0, _final([0, 1])), _record(1, _final(None)), _record(2, _final([1, "x"]))]
    assert recs[0].spec_correct_drafts_histogram == [0, 1] and recs[0].error is None
    assert recs[1].spec_correct_drafts_histogram is None and recs[1].error is None
    assert recs[2].spec_correct_drafts_histogram is None
    assert recs[2].error is not None and "spec_correct_drafts_histogram[1]" in recs[2].error  # the request's error
    sink = RecordSink(3)
    for r in recs:
        sink.add(r, 10)
    sink.flush()
    reqs, _ = sink.kept_batches()
    assert reqs.schema.field("spec_correct_drafts_histogram").type == REQUEST_BATCH_SCHEMA.field(
        "spec_correct_drafts_histogram").type
    assert reqs.column("spec_correct_drafts_histogram").to_pylist() == [[0, 1], None, None]
