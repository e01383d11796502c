"""The parsers' fast paths read meta_info's and usage's own counts, never a look-alike key of another object (the
answer-invariant fuzz target's find: an extra top-level object after meta_info holding "completion_tokens" was read
as the stream's count, so the events' token split was wrong and the next count looked like one that went down), and
recorded SGLang 0.5.23 mid-stream chunks still take the fast path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cluster.engines.base import StreamParser
from cluster.engines.streams import OpenAIStreamParser, SGLangNativeParser

FIXTURE = Path(__file__).resolve().parents[2] / "contract" / "fixtures" / "sglang-0.5.23-cpu" / "nextn3.json"
EXCHANGES = {e["name"]: e for e in json.loads(FIXTURE.read_text())["exchanges"]}


def _docs(name: str) -> list[dict[str, Any]]:
    return [json.loads(x[6:]) for x in EXCHANGES[name]["sse"].split("\n\n") if x and x != "data: [DONE]"]


def _feed(parser: StreamParser, docs: list[dict[str, Any]]) -> tuple[list[int], int]:
    decodes = [0]
    full = parser._feed_full  # type: ignore[attr-defined]

    def spy(payload: bytes) -> int:
        decodes[0] += 1
        return int(full(payload))

    parser._feed_full = spy  # type: ignore[attr-defined]
    counts = [parser.feed(json.dumps(d, separators=(",", ":")).encode()) for d in docs]
    return counts, decodes[0]


@pytest.mark.parametrize("name, parser", [("generate_stream", SGLangNativeParser),
                                          ("completions_stream_adapter", OpenAIStreamParser)])
def test_an_extra_object_with_look_alike_counts_is_not_read(name: str, parser: type[StreamParser]) -> None:
    docs = _docs(name)
    expected, _ = _feed(parser(), docs)
    for d in docs:
        d["extra"] = {"completion_tokens": 99, "finish_reason": None, "prompt_tokens": 0}
    p = parser()
    got, _ = _feed(p, docs)
    assert got == expected and p.meta().count_went_down is None and p.meta().completion_tokens == 12


def test_a_finish_reason_look_alike_does_not_hide_the_choice_s() -> None:
    docs = _docs("completions_stream_adapter")
    last_choice = max(i for i, d in enumerate(docs) if d["choices"])
    docs[last_choice]["extra"] = {"finish_reason": None}
    p = OpenAIStreamParser()
    _feed(p, docs)
    assert p.meta().finish_reason == "length"


@pytest.mark.parametrize("name, parser, decoded", [
    ("generate_stream", SGLangNativeParser, 1),  # the finishing chunk only
    ("completions_stream_adapter", OpenAIStreamParser, 3),  # the finishing, sglext and usage-only chunks
])
def test_recorded_mid_stream_chunks_still_take_the_fast_path(name: str, parser: type[StreamParser],
                                                            decoded: int) -> None:
    _, decodes = _feed(parser(), _docs(name))
    assert decodes == decoded
