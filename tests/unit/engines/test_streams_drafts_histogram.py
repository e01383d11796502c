"""spec_correct_drafts_histogram (SGLang's verify steps by drafts accepted) reaches RequestMeta from the native final
meta_info and from the OpenAI streams' sglext.spec_tokens_details; a malformed form is that request's malformed
answer naming the field, and an absent or empty one is None."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cluster.engines.streams import OpenAIStreamParser, SGLangNativeParser

FIN = {"type": "length", "length": 4}


def _native(hist: Any, finish: Any = FIN) -> bytes:
    meta = {"id": "r", "finish_reason": finish, "prompt_tokens": 3, "completion_tokens": 4, "spec_verify_ct": 2,
            "spec_correct_drafts_histogram": hist}
    return json.dumps({"text": "abcd", "output_ids": [1, 2, 3, 4], "meta_info": meta}).encode()


def _oai(hist: Any) -> bytes:
    return json.dumps({"id": "c", "choices": [], "usage": None, "sglext": {"spec_tokens_details": {
        "spec_verify_ct": 2, "spec_correct_drafts_histogram": hist}}}).encode()


@pytest.mark.parametrize("keep_text", [False, True])
def test_the_native_final_event_gives_the_histogram(keep_text: bool) -> None:
    p = SGLangNativeParser(keep_text)
    p.feed(_native(None, finish=None).replace(b'"completion_tokens": 4', b'"completion_tokens": 1'))
    p.feed(_native([0, 1, 1]))
    m = p.meta()
    assert m.malformed is None and m.spec_correct_drafts_histogram == [0, 1, 1]


@pytest.mark.parametrize("keep_text", [False, True])
@pytest.mark.parametrize("hist", [None, []])
def test_no_or_an_empty_histogram_is_none(keep_text: bool, hist: Any) -> None:
    p = SGLangNativeParser(keep_text)
    p.feed(_native(hist))
    assert p.meta().malformed is None and p.meta().spec_correct_drafts_histogram is None
    q = OpenAIStreamParser(keep_text)
    q.feed(_oai(hist))  # SGLang's OpenAI details send [] when the request had none
    assert q.meta().malformed is None and q.meta().spec_correct_drafts_histogram is None


def test_the_openai_details_chunk_gives_the_histogram() -> None:
    p = OpenAIStreamParser()
    p.feed(b'{"id":"c","choices":[{"index":0,"text":"x","finish_reason":null}],"usage":null}')
    p.feed(_oai([1, 0, 2]))
    assert p.meta().spec_correct_drafts_histogram == [1, 0, 2]


BAD = [
    ("x", "spec_correct_drafts_histogram: expected a list, got a string 'x'"),
    ({"0": 1}, "spec_correct_drafts_histogram: expected a list, got an object"),
    ([1, -1], "spec_correct_drafts_histogram[1]: expected a non-negative integer, got an integer -1"),
    ([1, 2.5], "spec_correct_drafts_histogram[1]: expected a non-negative integer, got a number 2.5"),
    ([True], "spec_correct_drafts_histogram[0]: expected a non-negative integer, got a boolean"),
    ([[1]], "spec_correct_drafts_histogram[0]: expected a non-negative integer, got a list"),
    ([2**31], "spec_correct_drafts_histogram[0]: expected a count of at most 2147483647"),
]


@pytest.mark.parametrize("keep_text", [False, True])
@pytest.mark.parametrize("hist, says", BAD)
def test_a_malformed_native_histogram_is_the_requests_malformed_answer(keep_text: bool, hist: Any, says: str) -> None:
    p = SGLangNativeParser(keep_text)
    p.feed(_native(hist))
    m = p.meta()
    assert m.malformed is not None and f"chunk.meta_info.{says}" in m.malformed, m.malformed
    assert m.spec_correct_drafts_histogram is None and m.finish_reason is None  # nothing of that chunk was taken


@pytest.mark.parametrize("hist, says", BAD)
def test_a_malformed_openai_histogram_is_the_requests_malformed_answer(hist: Any, says: str) -> None:
    p = OpenAIStreamParser()
    p.feed(_oai(hist))
    m = p.meta()
    assert m.malformed is not None and f"chunk.sglext.spec_tokens_details.{says}" in m.malformed, m.malformed
    assert m.spec_correct_drafts_histogram is None and m.spec_verify_ct is None
