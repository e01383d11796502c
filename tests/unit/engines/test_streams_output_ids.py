"""Issue 15 item 4: a text-keeping native parser keeps the whole output ids, cumulative or incremental chunks."""

from __future__ import annotations

import json

from cluster.engines.streams import SGLangNativeParser


def _chunk(ids: list[int], ct: int, last: bool = False) -> bytes:
    meta = {"completion_tokens": ct, "finish_reason": {"type": "length"} if last else None}
    return json.dumps({"text": "x", "output_ids": ids, "meta_info": meta}).encode()


def test_cumulative_and_incremental_ids() -> None:
    cum = SGLangNativeParser(keep_text=True)
    for ids, last in (([5], False), ([5, 6, 7], False), ([5, 6, 7, 8], True)):
        cum.feed(_chunk(ids, len(ids), last))
    assert cum.output_ids() == [5, 6, 7, 8]
    inc = SGLangNativeParser(keep_text=True)
    for ids, ct, last in (([5], 1, False), ([6, 7], 3, False), ([8], 4, True)):
        inc.feed(_chunk(ids, ct, last))
    assert inc.output_ids() == [5, 6, 7, 8]
    fast = SGLangNativeParser()
    fast.feed(_chunk([5], 1))
    assert fast.output_ids() is None  # the hot path keeps nothing
