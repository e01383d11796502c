"""Per-request SSE payload parsers: SGLang native /generate and the OpenAI-compatible endpoints (SGLang, vLLM)."""

from __future__ import annotations

import json
from typing import Any, Optional

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


def _finish_str(fr: Any) -> Optional[str]:
    if fr is None:
        return None
    if isinstance(fr, dict):
        return str(fr.get("type"))
    return str(fr)


def _decode_chunk(payload: bytes, meta: RequestMeta) -> Optional[dict[str, Any]]:
    """A chunk as a JSON object, or None after recording why it is not one (undecodable, not an object, or an
    error chunk, which both protocols send as {"error": {...}} before [DONE])."""
    try:
        obj = json.loads(payload)
    except ValueError:
        meta.error = f"undecodable chunk: {payload[:80]!r}"
        return None
    if not isinstance(obj, dict):
        meta.error = "chunk is not a JSON object"
        return None
    if "error" in obj:
        err = obj["error"]
        meta.error = str(err.get("message", err) if isinstance(err, dict) else err)
        return None
    return obj


class SGLangNativeParser(StreamParser):
    """SGLang /generate stream: cumulative (default) or incremental chunks; meta_info.completion_tokens is cumulative.

    Hot path: each chunk costs one `rfind` for `"completion_tokens":` in meta_info (which SGLang writes after
    `text` and `output_ids`, so the last match is the real one) and a digit scan; only the finishing chunk
    (finish_reason not null) or an error chunk is JSON-decoded in full.
    """

    __slots__ = ("_ct", "_meta", "_keep_text", "_text", "_ids")

    def __init__(self, keep_text: bool = False) -> None:
        self._ct = 0
        self._meta = RequestMeta()
        self._keep_text = keep_text
        self._text = ""
        self._ids: Optional[list[int]] = None

    def feed(self, payload: bytes) -> int:
        if self._keep_text:
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
        if ct < 0:
            return self._feed_full(payload)
        delta = ct - self._ct
        if delta > 0:
            self._ct = ct
            return delta
        return 0

    def _feed_full(self, payload: bytes) -> int:
        obj = _decode_chunk(payload, self._meta)
        if obj is None:
            return 0
        mi = obj.get("meta_info") or {}
        ct = int(mi.get("completion_tokens") or 0)
        delta = max(0, ct - self._ct)
        self._ct = max(ct, self._ct)
        if self._keep_text and isinstance(obj.get("text"), str):
            # cumulative by default; incremental servers send deltas (detected by shrinking length)
            t = obj["text"]
            self._text = t if t.startswith(self._text) else self._text + t
        if self._keep_text and isinstance(obj.get("output_ids"), list):
            got = [int(x) for x in obj["output_ids"] if isinstance(x, int) and not isinstance(x, bool)]
            kept = self._ids or []
            self._ids = got if got[:len(kept)] == kept else kept + got  # cumulative, or incremental deltas
        m = self._meta
        m.completion_tokens = self._ct
        m.prompt_tokens = mi.get("prompt_tokens", m.prompt_tokens)
        m.cached_tokens = mi.get("cached_tokens", m.cached_tokens)
        m.request_id = mi.get("id", m.request_id)
        fr = mi.get("finish_reason")
        if fr is not None:
            m.finish_reason = _finish_str(fr)
            m.spec_verify_ct = mi.get("spec_verify_ct", m.spec_verify_ct)
            m.spec_accept_length_server = mi.get("spec_accept_length", m.spec_accept_length_server)
            m.server_e2e_s = mi.get("e2e_latency", m.server_e2e_s)
            if isinstance(fr, dict) and fr.get("type") == "abort":
                m.error = str(fr.get("message") or "aborted")
            ids = obj.get("output_ids")
            if isinstance(ids, list):
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


class OpenAIStreamParser(StreamParser):
    """/v1/completions and /v1/chat/completions streams with `stream_options.include_usage` (+ continuous usage).

    Token counts per chunk come from continuous usage stats when the server sends them (vLLM, SGLang);
    otherwise each chunk with non-empty content counts as one token and the final usage chunk gives the total.
    SGLang's `sglext.spec_tokens_details` (return_spec_tokens_details) supplies spec_verify_ct.
    """

    __slots__ = ("_ct", "_meta", "_keep_text", "_parts", "_counted")

    def __init__(self, keep_text: bool = False) -> None:
        self._ct = 0
        self._counted = 0
        self._meta = RequestMeta()
        self._keep_text = keep_text
        self._parts: list[str] = []

    def feed(self, payload: bytes) -> int:
        # Hot path: a mid-stream chunk (its last finish_reason null, no sglext, no error) needs no JSON decode. With
        # continuous usage stats (what our requests ask for) only the cumulative usage.completion_tokens is read;
        # without (usage absent or null) the chunk is one token when its text/content string is non-empty.
        # `"key"` can only match a key (quotes inside JSON strings are escaped). Final, usage-only, error and sglext
        # chunks take the full JSON path. Each marker is searched once, with find: on bytes `x in payload` first
        # tries x as an integer and raises and clears a TypeError, and the seven `in` tests this path had cost
        # 3.3 us a chunk here, the largest share of a saturated client's time on the plain OpenAI stream.
        if self._keep_text:
            return self._feed_full(payload)
        f = payload.rfind(_FIN)
        if f < 0:
            return self._feed_full(payload)
        f += len(_FIN)
        if not (payload.startswith(_NULL, f) or payload.startswith(_NULL_SP, f)) \
                or payload.find(_SGLEXT) >= 0 or payload.find(_ERROR) >= 0:
            return self._feed_full(payload)
        u = payload.find(_USAGE)
        if u >= 0 and (payload.startswith(_OBJ, u + len(_USAGE)) or payload.startswith(_OBJ_SP, u + len(_USAGE))):
            pos = payload.rfind(_CT)
            ct = _int_at(payload, pos + len(_CT)) if pos >= 0 else -1
            if ct < 0:
                return self._feed_full(payload)
            delta = ct - self._ct if ct > self._ct else 0
            self._ct = ct if ct > self._ct else self._ct
            self._counted += delta
            return delta
        if u >= 0 and payload.find(_USAGE, u + 1) >= 0:
            return self._feed_full(payload)  # "usage" twice: not the one plain chunk this path reads
        for key in _TEXT_OPEN:
            pos = payload.find(key)
            if pos >= 0 and payload[pos + len(key) : pos + len(key) + 1] not in (b'"', b""):
                self._counted += 1
                return 1
        return self._feed_full(payload)

    def _feed_full(self, payload: bytes) -> int:
        obj = _decode_chunk(payload, self._meta)
        if obj is None:
            return 0
        m = self._meta
        m.request_id = obj.get("id", m.request_id)
        delta = 0
        content = ""
        for ch in obj.get("choices") or []:
            if "text" in ch and ch["text"]:
                content += ch["text"]
            delta_obj = ch.get("delta") or {}
            c = delta_obj.get("content") or delta_obj.get("reasoning_content")
            if c:
                content += c
            if ch.get("finish_reason") is not None:
                m.finish_reason = str(ch["finish_reason"])
        if self._keep_text and content:
            self._parts.append(content)
        usage = obj.get("usage")
        sglext = obj.get("sglext") or {}
        details = sglext.get("spec_tokens_details") if isinstance(sglext, dict) else None
        if isinstance(details, dict):
            m.spec_verify_ct = details.get("spec_verify_ct", m.spec_verify_ct)
            m.spec_accept_length_server = details.get("spec_accept_length", m.spec_accept_length_server)
        if isinstance(usage, dict) and usage.get("completion_tokens") is not None:
            ct = int(usage["completion_tokens"])
            m.prompt_tokens = usage.get("prompt_tokens", m.prompt_tokens)
            ptd = usage.get("prompt_tokens_details") or {}
            if isinstance(ptd, dict) and ptd.get("cached_tokens") is not None:
                m.cached_tokens = ptd["cached_tokens"]
            if obj.get("choices"):
                # continuous usage: the cumulative count tells how many tokens this chunk carried
                delta = max(0, ct - self._ct)
            # a usage-only chunk (choices == []) carries no new tokens: they arrived earlier
            self._ct = max(self._ct, ct)
        elif content:
            delta = 1
        self._counted += delta
        return delta

    def meta(self) -> RequestMeta:
        self._meta.completion_tokens = self._ct or self._counted or self._meta.completion_tokens
        return self._meta

    def text(self) -> str:
        return "".join(self._parts)
