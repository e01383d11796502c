"""The framing's fast event-end checks say what EVENT_END's regex says, on every byte string over CR, LF and text."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cluster.engines.streams import EVENT_END
from cluster.loadgen.framing import _holds_event_end, _tail3

_BYTES = st.binary().map(lambda b: bytes(b"\r\na"[x % 3] for x in b))


@given(_BYTES)
def test_holds_event_end_is_the_regex(data: bytes) -> None:
    assert _holds_event_end(data) == (EVENT_END.search(data) is not None)


@given(st.lists(_BYTES, min_size=1, max_size=6))
def test_tail3_is_the_joined_tail(parts: list[bytes]) -> None:
    assert _tail3(parts) == b"".join(parts)[-3:]
