"""Per-request SSE payload parsers: SGLang native /generate and the OpenAI-compatible endpoints (SGLang, vLLM)."""

from __future__ import annotations

import json
import re
from abc import abstractmethod
from typing import Any, Mapping, Optional, Sequence

from cluster.engines.answer_fields import (MalformedAnswerError, as_object, count_field, count_list, finish_field,
                                           ids_field, list_field, number_field, object_field, shown, str_field)
from cluster.engines.answer_invariants import Answer
from cluster.engines.base import RequestMeta, StreamParser

_CT = b'"completion_tokens":'
_FIN = b'"finish_reason":'
_NULL = b"null"
_NULL_SP = b" null"
_OBJ = b":{"
_OBJ_SP = b": {"
_SGLEXT = b'"sglext"'
_USAGE = b'"usage"'
_TEXT_OPEN = (b'"text":"', b'"content":"', b'"text": "', b'"content": "')
_ERROR = b'"error"'
_META_OPEN = b'"meta_info":'
_META_OPEN_SP = b'"meta_info": '

EVENT_END = re.compile(rb"\r?\n\r?\n")
"""Where an SSE event ends: a blank line, its line ends LF or CRLF (SGLang writes LF; CRLF is SSE too)."""


def event_data(event: bytes) -> Optional[bytes]:
    """The data of one SSE event (its `data:` lines joined by LF, one leading space cut), None when it has none."""
    datas: list[bytes] = []
    for line in event.split(b"\n"):
        line = line.rstrip(b"\r")
        if line.startswith(b"data:"):
            d = line[5:]
            datas.append(d[1:] if d[:1] == b" " else d)
    return b"\n".join(datas) if datas else None


def split_events(body: bytes) -> list[bytes]:
    """A whole SSE body's events, each without its blank line (an unterminated last one is kept: a caller that
    needs the [DONE] event sees what came instead)."""
    return [e for e in EVENT_END.split(body) if e.strip()]


def _int_at(buf: bytes, start: int) -> int:
    """The JSON integer starting at `start` (after optional spaces), -1 when there is none."""
    end = buf.find(b",", start)
    brace = buf.find(b"}", start)
    if end < 0 or 0 <= brace < end:
        end = brace
    try:
        return int(buf[start:end]) if end > start else -1
    except ValueError:
        return -1


def _in_meta_info(payload: bytes, fpos: int, pos: int) -> bool:
    """Whether the keys found at `fpos` and `pos` (by rfind, from the end) are meta_info's own, not an object's
    after or inside it (the fuzz target's find: an extra top-level object holding look-alike counts was read as the
    stream's count): the last `{` before them opens meta_info, and no `}` closes it before them. SGLang 0.5.23
    writes both keys before its only nested object (cached_tokens_details); an answer that does not, or a brace
    inside a string there, takes the full decode."""
    hi = fpos if fpos > pos else pos
    o = payload.rfind(b"{", 0, hi)
    return 0 < o < fpos and o < pos and payload.find(b"}", o, hi) < 0 and (
        payload.startswith(_META_OPEN, o - len(_META_OPEN))
        or payload.startswith(_META_OPEN_SP, o - len(_META_OPEN_SP)))


def _decode_chunk(payload: bytes, meta: RequestMeta) -> Optional[dict[str, Any]]:
    """A chunk as a JSON object, or None after recording why it is not one: undecodable or not an object (the
    stream is malformed), or an error chunk, which both protocols send as {"error": {...}} before [DONE]."""
    try:
        obj = json.loads(payload)
    except (ValueError, RecursionError):  # syntax, bytes, an integer past the digit limit, deep nesting
        meta.malformed = meta.malformed or f"undecodable chunk: {payload[:80]!r}"
        return None
    if not isinstance(obj, dict):
        meta.malformed = meta.malformed or f"chunk: expected a JSON object, got {shown(obj)}"
        return None
    if "error" in obj:
        err = obj["error"]
        message = err.get("message", err) if isinstance(err, dict) else err
        meta.error = meta.error_event = message if isinstance(message, str) else shown(message)
        return None
    return obj


class _TypedChunks(StreamParser):
    """The full-decode path of both parsers: a chunk decoded and read typed (`_read`), or recorded as malformed."""

    __slots__ = ()
    _meta: RequestMeta

    def _feed_full(self, payload: bytes) -> int:
        obj = _decode_chunk(payload, self._meta)
        if obj is None:
            return 0
        try:
            return self._read(obj)
        except MalformedAnswerError as e:
            self._meta.malformed = self._meta.malformed or str(e)
            return 0

    @abstractmethod
    def _read(self, obj: Mapping[str, Any]) -> int:
        """The tokens a decoded chunk carried, its meta taken; MalformedAnswerError before any state changes."""


class SGLangNativeParser(_TypedChunks):
    """SGLang /generate stream: cumulative (default) or incremental chunks; meta_info.completion_tokens is cumulative.

    Hot path: each chunk costs one `rfind` for `"completion_tokens":` in meta_info (which SGLang writes after
    `text` and `output_ids`, so the last match is the real one) and a digit scan; only the finishing chunk
    (finish_reason not null) or an error chunk is JSON-decoded in full.
    """

    __slots__ = ("_ct", "_meta", "_keep_text", "_text", "_ids", "_fin")

    def __init__(self, keep_text: bool = False) -> None:
        self._ct = 0
        self._meta = RequestMeta()
        self._keep_text = keep_text
        self._text = ""
        self._ids: Optional[list[int]] = None
        self._fin = False

    def feed(self, payload: bytes) -> int:
        if self._keep_text or self._fin:  # after the finishing event: decoded whole, to be counted
            return self._feed_full(payload)
        # meta_info is the last object of the chunk, so searching from the end finds its keys after ~100 bytes
        # instead of scanning the cumulative text and output_ids before them
        fpos = payload.rfind(_FIN)
        if fpos < 0:
            return self._feed_full(payload)
        v = fpos + len(_FIN)
        if not (payload.startswith(_NULL, v) or payload.startswith(_NULL_SP, v)):
            return self._feed_full(payload)  # the finishing chunk: decode it whole for the final meta
        pos = payload.rfind(_CT)
        ct = _int_at(payload, pos + len(_CT)) if pos >= 0 else -1
        if ct < 0 or not _in_meta_info(payload, fpos, pos):
            return self._feed_full(payload)
        delta = ct - self._ct
        if delta > 0:
            self._ct = ct
            return delta
        if delta < 0 and self._meta.count_went_down is None:
            self._meta.count_went_down = (self._ct, ct)
        return 0

    def _read(self, obj: Mapping[str, Any]) -> int:
        # every field is read and type-checked before any state changes: a malformed chunk changes nothing
        mi = object_field(obj, "meta_info", "chunk")
        w = "chunk.meta_info"
        stated = count_field(mi, "completion_tokens", w)
        ct = stated or 0
        fr, abort = finish_field(mi, "finish_reason", w)
        text = str_field(obj, "text", "chunk")
        ids = ids_field(obj, "output_ids", "chunk", None if self._keep_text else (8 if fr is not None else 0))
        prompt, cached = count_field(mi, "prompt_tokens", w), count_field(mi, "cached_tokens", w)
        rid = str_field(mi, "id", w)
        if fr is not None:
            verify, accept = count_field(mi, "spec_verify_ct", w), number_field(mi, "spec_accept_length", w)
            hist = count_list(mi.get("spec_correct_drafts_histogram"), f"{w}.spec_correct_drafts_histogram")
            e2e = number_field(mi, "e2e_latency", w)
            retractions = count_field(mi, "num_retractions", w)
            raw_ids = obj.get("output_ids")
        delta = max(0, ct - self._ct)
        m = self._meta
        if stated is not None and stated < self._ct and m.count_went_down is None:
            m.count_went_down = (self._ct, stated)
        if self._fin:
            m.events_after_finish += 1
        self._ct = max(ct, self._ct)
        if self._keep_text and text is not None:
            # cumulative by default; incremental servers send deltas (detected by shrinking length)
            self._text = text if text.startswith(self._text) else self._text + text
        if self._keep_text and ids is not None:
            kept = self._ids or []
            self._ids = ids if ids[:len(kept)] == kept else kept + ids  # cumulative, or incremental deltas
        m.completion_tokens = self._ct
        m.prompt_tokens = m.prompt_tokens if prompt is None else prompt
        m.cached_tokens = m.cached_tokens if cached is None else cached
        m.request_id = m.request_id if rid is None else rid
        if fr is not None and not self._fin:
            self._fin = True
            m.final_event_tokens = delta
            m.final_output_ids = len(raw_ids) if isinstance(raw_ids, list) else None
            m.retractions = retractions
        if fr is not None:
            m.finish_reason = fr
            m.spec_verify_ct = m.spec_verify_ct if verify is None else verify
            m.spec_accept_length_server = m.spec_accept_length_server if accept is None else accept
            m.spec_correct_drafts_histogram = m.spec_correct_drafts_histogram if hist is None else hist
            m.server_e2e_s = m.server_e2e_s if e2e is None else e2e
            if abort is not None:
                m.error = abort
            if ids is not None:
                m.output_ids_tail = ids[-8:]
        return delta

    def meta(self) -> RequestMeta:
        if self._meta.completion_tokens is None and self._ct:
            self._meta.completion_tokens = self._ct
        return self._meta

    def text(self) -> str:
        return self._text

    def output_ids(self) -> Optional[list[int]]:
        return self._ids


class OpenAIStreamParser(_TypedChunks):
    """/v1/completions and /v1/chat/completions streams with `stream_options.include_usage` (+ continuous usage).

    Token counts per chunk come from continuous usage stats when the server sends them (vLLM, SGLang);
    otherwise each chunk with non-empty content counts as one token and the final usage chunk gives the total.
    SGLang's `sglext.spec_tokens_details` (return_spec_tokens_details) supplies spec_verify_ct.
    """

    __slots__ = ("_ct", "_meta", "_keep_text", "_parts", "_counted", "_fin")

    def __init__(self, keep_text: bool = False) -> None:
        self._ct = 0
        self._counted = 0
        self._meta = RequestMeta()
        self._keep_text = keep_text
        self._parts: list[str] = []
        self._fin = False

    def feed(self, payload: bytes) -> int:
        # Hot path: a mid-stream chunk (its last finish_reason null, no sglext, no error) needs no JSON decode. With
        # continuous usage stats (what our requests ask for) only the cumulative usage.completion_tokens is read;
        # without (usage absent or null) the chunk is one token when its text/content string is non-empty.
        # `"key"` can only match a key (quotes inside JSON strings are escaped). Final, usage-only, error and sglext
        # chunks take the full JSON path. Each marker is searched once, with find: on bytes `x in payload` first
        # tries x as an integer and raises and clears a TypeError, and the seven `in` tests this path had cost
        # 3.3 us a chunk here, the largest share of a saturated client's time on the plain OpenAI stream.
        if self._keep_text or self._fin:  # after the finishing event: decoded whole, to be judged
            return self._feed_full(payload)
        f = payload.rfind(_FIN)
        if f < 0:
            return self._feed_full(payload)
        f += len(_FIN)
        if not (payload.startswith(_NULL, f) or payload.startswith(_NULL_SP, f)) \
                or payload.find(_SGLEXT) >= 0 or payload.find(_ERROR) >= 0 \
                or payload.find(_FIN) != f - len(_FIN):  # a second finish_reason: which is the choice's? decode
            return self._feed_full(payload)
        u = payload.find(_USAGE)
        o = u + len(_USAGE) + 1 if u >= 0 and payload.startswith(_OBJ, u + len(_USAGE)) else \
            u + len(_USAGE) + 2 if u >= 0 and payload.startswith(_OBJ_SP, u + len(_USAGE)) else -1
        if o >= 0:
            pos = payload.find(_CT, o)
            ct = _int_at(payload, pos + len(_CT)) if pos >= 0 else -1
            # usage's own count: no brace between usage's `{` and the key (SGLang writes it before its nested
            # prompt_tokens_details); otherwise, or a look-alike after usage, the full decode reads it
            if ct < 0 or payload.find(b"}", o, pos) >= 0 or payload.find(b"{", o + 1, pos) >= 0:
                return self._feed_full(payload)
            delta = ct - self._ct if ct > self._ct else 0
            if ct < self._ct and self._meta.count_went_down is None:
                self._meta.count_went_down = (self._ct, ct)
            self._ct = ct if ct > self._ct else self._ct
            self._counted += delta
            return delta
        if u >= 0 and payload.find(_USAGE, u + 1) >= 0:
            return self._feed_full(payload)  # "usage" twice: not the one plain chunk this path reads
        for key in _TEXT_OPEN:
            pos = payload.find(key)
            if pos >= 0 and payload[pos + len(key) : pos + len(key) + 1] not in (b'"', b""):
                self._counted += 1
                self._meta.counts_stated = False
                return 1
        return self._feed_full(payload)

    def _read(self, obj: Mapping[str, Any]) -> int:
        # every field is read and type-checked before any state changes: a malformed chunk changes nothing
        rid = str_field(obj, "id", "chunk")
        content = ""
        finish: Optional[str] = None
        choices = list_field(obj, "choices", "chunk") or []
        for i, raw in enumerate(choices):
            w = f"chunk.choices[{i}]"
            ch = as_object(raw, w, null_ok=False)
            content += str_field(ch, "text", w) or ""
            delta_obj = object_field(ch, "delta", w)
            content += (str_field(delta_obj, "content", f"{w}.delta")
                        or str_field(delta_obj, "reasoning_content", f"{w}.delta") or "")
            finish = str_field(ch, "finish_reason", w) or finish
        usage = object_field(obj, "usage", "chunk")
        ct = count_field(usage, "completion_tokens", "chunk.usage")
        prompt = count_field(usage, "prompt_tokens", "chunk.usage")
        cached = count_field(object_field(usage, "prompt_tokens_details", "chunk.usage"), "cached_tokens",
                             "chunk.usage.prompt_tokens_details")
        details = object_field(object_field(obj, "sglext", "chunk"), "spec_tokens_details", "chunk.sglext")
        verify = count_field(details, "spec_verify_ct", "chunk.sglext.spec_tokens_details")
        accept = number_field(details, "spec_accept_length", "chunk.sglext.spec_tokens_details")
        hist = count_list(details.get("spec_correct_drafts_histogram"),
                          "chunk.sglext.spec_tokens_details.spec_correct_drafts_histogram")
        m = self._meta
        m.request_id = m.request_id if rid is None else rid
        if self._fin and choices and (content or finish is not None):
            m.events_after_finish += 1
        if ct is not None and ct < self._ct and m.count_went_down is None:
            m.count_went_down = (self._ct, ct)
        if finish is not None:
            m.finish_reason = finish
        if self._keep_text and content:
            self._parts.append(content)
        m.spec_verify_ct = m.spec_verify_ct if verify is None else verify
        m.spec_accept_length_server = m.spec_accept_length_server if accept is None else accept
        m.spec_correct_drafts_histogram = m.spec_correct_drafts_histogram if hist is None else hist
        delta = 0
        if ct is not None:
            m.prompt_tokens = m.prompt_tokens if prompt is None else prompt
            m.cached_tokens = m.cached_tokens if cached is None else cached
            if choices:
                # continuous usage: the cumulative count tells how many tokens this chunk carried
                delta = max(0, ct - self._ct)
            # a usage-only chunk (choices == []) carries no new tokens: they arrived earlier
            self._ct = max(self._ct, ct)
        elif content:
            delta = 1
            m.counts_stated = False
        self._counted += delta
        if finish is not None and not self._fin:
            self._fin = True
            m.final_event_tokens = delta
        return delta

    def meta(self) -> RequestMeta:
        self._meta.completion_tokens = self._ct or self._counted or self._meta.completion_tokens
        return self._meta

    def text(self) -> str:
        return "".join(self._parts)


def stream_answer(meta: RequestMeta, event_tokens: Sequence[int]) -> Answer:
    """The Answer of a parsed stream: its parser's meta and the tokens each token-carrying event brought."""
    return Answer(prompt_tokens=meta.prompt_tokens, completion_tokens=meta.completion_tokens,
                  cached_tokens=meta.cached_tokens, spec_verify_ct=meta.spec_verify_ct, retractions=meta.retractions,
                  event_tokens=tuple(event_tokens), counts_stated=meta.counts_stated,
                  count_went_down=meta.count_went_down, output_ids=meta.final_output_ids,
                  last_event_tokens=meta.final_event_tokens, events_after_finish=meta.events_after_finish,
                  error_event=meta.error_event)
