"""Real SGLang 0.5.23 (CPU, NEXTN-3) recordings: the parsers take spec_correct_drafts_histogram as the server sent it,
from the native final event and from the OpenAI streams' return_spec_tokens_details chunk."""

from __future__ import annotations

import json

from test_contract_recordings import _sse, exchanges

from cluster.engines.streams import OpenAIStreamParser, SGLangNativeParser


def test_the_recorded_histograms_reach_request_meta() -> None:
    ex = exchanges("nextn3")
    for name in ("generate_stream", "generate_stream_adapter"):
        payloads = _sse(ex[name])
        p = SGLangNativeParser()
        for x in payloads:
            p.feed(x)
        sent = json.loads(payloads[-1])["meta_info"]
        m = p.meta()
        assert m.malformed is None and m.spec_correct_drafts_histogram == sent["spec_correct_drafts_histogram"]
        assert sum(m.spec_correct_drafts_histogram) == m.spec_verify_ct  # one count per verify step
    for name in ("completions_stream_adapter", "chat_stream_adapter"):
        q = OpenAIStreamParser()
        for x in _sse(ex[name]):
            q.feed(x)
        hist = q.meta().spec_correct_drafts_histogram
        assert hist is not None and sum(hist) == q.meta().spec_verify_ct, name
    base = exchanges("baseline")
    p = SGLangNativeParser()
    for x in _sse(base["generate_stream"]):
        p.feed(x)
    assert p.meta().spec_correct_drafts_histogram is None  # no speculation, no histogram
