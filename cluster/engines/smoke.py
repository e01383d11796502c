"""`sglbench smoke`: check every assumption sglbench makes about a live SGLang server, expected vs found.

Every call goes through engines/http_call.py: a total deadline of `timeout_s` per call (not per read) and a size
limit per answer. What the command exits with, and why:

- 2: the URL cannot be used as given (unknown scheme, no host, a port outside 1-65535); nothing is contacted;
- 3: the host's name does not resolve, or the network has no route to it (this machine's side);
- 4: the server is at fault: GET /health was refused (nothing listening), timed out or answered malformed HTTP
  (then no table: there is nothing to check), or a later call failed the same way or answered with a body that
  is not what SGLang sends (a meta_info that is not an object, a count that is not an integer): that check's row
  says what happened and the command exits 4 after the table;
- 1: every call was answered, but some assumption missed (a key missing, a count wrong, an answer invariant of
  engines/answer_invariants.py broken: each invariant is its own row and the error line names the broken ones);
- 0: every check passed.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Literal, Mapping, Optional

from cluster.engines.answer_fields import MalformedAnswerError, as_object, decode_json, object_field, shown
from cluster.engines.answer_invariants import BY_NAME, INVARIANTS
from cluster.engines.http_call import HttpReply, ServerURL, ServerURLError, call, parse_server_url
from cluster.engines.streams import SGLangNativeParser, event_data, split_events, stream_answer
from cluster.errors import EngineFault, EnvironmentFault, SglbenchError

META_KEYS = ("id", "finish_reason", "prompt_tokens", "completion_tokens", "cached_tokens")
"""meta_info keys SGLang 0.5.23 always sends on /generate chunks (reference §3.2) that sglbench reads."""

SERVER_INFO_TOP_KEYS = ("version", "max_running_requests", "internal_states")
SPEC_KEYS = ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")



FAKE_BOOTSTRAP_HOST = "2.2.2.2"
"""SGLang 0.5.23's marker of a synthetic decode-only request (disaggregation/utils.py:53): a decode server given it
skips the KV transfer and makes the first token up, as its own /health probe does (http_server.py:762-765). A
request to a decode server WITHOUT bootstrap fields kills its scheduler (decode.py:155 builds the prefill's address
from None), so smoke never sends one."""


def decode_only_fields() -> dict[str, str | int]:
    """The /generate body fields that make a request to a decode server synthetic decode-only (its text is noise;
    the framing, counts and invariants are still the server's)."""
    return {"bootstrap_host": FAKE_BOOTSTRAP_HOST, "bootstrap_room": 0}


FLUSH_IDLE_WAIT_S = 10.0
"""How long smoke's idle flush may wait for the server to release its last request (bounded by the --timeout)."""
FLUSH_RETRY_S = 0.25

class SmokeFault(EngineFault):
    """Some of smoke's calls failed at the server's end (refused, timed out, a malformed answer): exit 4."""


class SmokeMismatch(SglbenchError):
    """Every call was answered and some assumption missed (an answer invariant broken, a key missing): exit 1."""

    exit_code = 1


def mismatch(checks: list["Check"], url: str) -> SmokeMismatch:
    """The error that ends a smoke whose checks missed: how many, and which answer invariants broke."""
    failed = [c for c in checks if not c.ok]
    broken = [c.name.removeprefix("invariant ") for c in failed if c.name.startswith("invariant ")]
    others = [c.name for c in failed if not c.name.startswith("invariant ")]
    parts = ([f"answer invariant(s) broken: {', '.join(broken)}"] if broken else []) + (
        [f"other checks missed: {', '.join(others)}"] if others else [])
    return SmokeMismatch(f"smoke: {len(failed)} check(s) of {url} missed; " + "; ".join(parts))


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    expected: str
    found: str
    fault: bool = False
    """The call itself failed (refused, deadline, malformed answer), not just the assumption it checks."""


def short(x: Any, n: int = 80) -> str:
    try:
        s = x if isinstance(x, str) else json.dumps(x, default=str)
    except (RecursionError, ValueError):  # a value nested past the encoder's depth (a server's junk)
        s = shown(x)
    return s if len(s) <= n else s[: n - 1] + "…"


class SmokeCalls:
    """The checks so far, and the calls that make them: a call that fails becomes its check's `fault` row."""

    def __init__(self, url: ServerURL, timeout_s: float) -> None:
        self.url, self.timeout_s = url, timeout_s
        self.checks: list[Check] = []

    def add(self, name: str, ok: bool, expected: str, found: Any) -> None:
        self.checks.append(Check(name, ok, expected, short(found)))

    def get(self, name: str, expected: str, path: str, method: str = "GET", body: Optional[bytes] = None
            ) -> Optional[HttpReply]:
        try:
            return call(self.url, path, method=method, body=body, timeout_s=self.timeout_s)
        except (EngineFault, EnvironmentFault) as e:
            self.checks.append(Check(name, False, expected, short(str(e), 200), fault=True))
            return None

    def json(self, name: str, expected: str, reply: HttpReply) -> tuple[bool, Any]:
        """(usable, the body as JSON): a 200 whose body is not JSON is this check's fault row (not usable); any
        other status's body that is not JSON is None (the check fails on the status)."""
        try:
            return True, reply.json()
        except MalformedAnswerError as e:
            if reply.status != 200:
                return True, None
            self.checks.append(Check(name, False, expected, short(str(e), 200), fault=True))
            return False, None


def smoke_url(base_url: str) -> ServerURL:
    """The URL smoke may call: ServerURLError (exit 2) for an unusable one, or one that ends in /v1."""
    url = parse_server_url(base_url, base=True)
    if url.prefix == "/v1" or url.prefix.endswith("/v1"):
        root = ServerURL(url.scheme, url.host, url.port, url.prefix[:-3])
        raise ServerURLError(f"URL: {base_url!r} ends in /v1, the prefix of the OpenAI-compatible API; smoke checks "
                             f"SGLang's own endpoints (/health, /server_info, /generate) at the server's root: give "
                             f"{root}", field="URL", expected="the server's base URL, without /v1")
    return url


Role = Literal["regular", "prefill", "decode"]
"""What a server is to smoke: one that serves plain requests, or one side of a prefill/decode pair (its
--disaggregation-mode)."""


def run_smoke(base_url: str, timeout_s: float = 30.0, role: Role = "regular",
              nnodes: Optional[int] = None) -> list[Check]:
    """Probe a live server (idle, ideally) and return one Check per assumption.

    `role` prefill: a plain /generate must be refused (the server serves only requests that carry the bootstrap
    fields the gateway adds); decode: /generate is sent as a synthetic decode-only request (decode_only_fields).
    `nnodes`: rank 0 of a server across that many nodes (its /server_info must say so).
    Raises ServerURLError (exit 2) for an unusable URL and the /health call's own error (exit 3 or 4) when the
    server cannot be reached at all; a later call's failure is its check's row, marked `fault`."""
    s = SmokeCalls(smoke_url(base_url), timeout_s)
    health = call(s.url, "/health", timeout_s=timeout_s)  # nothing answers: there is nothing to check
    s.add("GET /health", health.status == 200, "200", health.status)
    reply = s.get("GET /model_info", "200 with model_path", "/model_info")
    usable, mi = s.json("GET /model_info", "200 with model_path", reply) if reply is not None else (False, None)
    if reply is not None and usable:
        path_ok = isinstance(mi, dict) and isinstance(mi.get("model_path"), str)
        if reply.status == 200 and isinstance(mi, dict) and "model_path" in mi and not path_ok:
            s.checks.append(Check("GET /model_info", False, "200 with model_path", short(
                f"model_path: expected a string, got {shown(mi['model_path'])}", 200), fault=True))  # malformed
        else:
            s.add("GET /model_info", reply.status == 200 and path_ok, "200 with model_path",
                  f"{reply.status} {sorted(mi)[:6] if isinstance(mi, dict) else short(reply.text(), 40)}")
    si, answered = _server_info(s)
    for key in SERVER_INFO_TOP_KEYS:
        if key in answered and key not in si:  # present, but the types row refused the document
            s.add(f"server_info.{key}", False, "present", f"present, not read: {_wrong_type(key, answered[key])}")
            continue
        s.add(f"server_info.{key}", key in si, "present", si.get(key, "missing") if key != "internal_states" else
              (f"list of {len(si[key])}" if isinstance(si.get(key), list) else "missing or not a list"))
    states = si.get("internal_states")
    if "internal_states" in si:
        s.checks[-1] = Check("server_info.internal_states", isinstance(states, list) and len(states) > 0,
                             "non-empty list (one per DP rank)", s.checks[-1].found)
    mrr = si.get("max_running_requests")
    from cluster.engines.sglang_server_info import concurrency_cap_from_server_info

    cap = concurrency_cap_from_server_info(si)
    # real 0.5.23 reports max_running_requests None when the flag is unset without speculative decoding; the
    # scheduler's own cap is internal_states[0].effective_max_running_requests_per_dp
    s.add("resolved running-request cap", cap is not None, "a positive int (internal_states or max_running_requests)",
          f"{cap.value} ({cap.source})" if cap else mrr)
    speculative = bool(si.get("speculative_algorithm"))
    if speculative:
        for key in SPEC_KEYS[1:]:
            value = si.get(key)
            s.add(f"server_info.{key}", isinstance(value, int) and not isinstance(value, bool),
                  "int on a speculative server", value)
        if mrr == 48:
            s.add("max_running_requests not silently capped", False, "explicit value (48 is SGLang's spec cap)", mrr)
    if role != "regular":
        mode = si.get("disaggregation_mode")
        s.add("server_info.disaggregation_mode", mode == role, role, mode if "disaggregation_mode" in si else "missing")
    if nnodes is not None:
        s.add("server_info.nnodes", si.get("nnodes") == nnodes, f"{nnodes} (rank 0 and the --rank-url ranks)",
              si.get("nnodes", "missing"))
    if role == "prefill":
        _check_prefill_refuses(s)
    else:
        check_generate(s, speculative, decode_only_fields() if role == "decode" else {})
    # SGLang refuses a flush (400) while a request is still being released, and the smoke's own streams may have
    # ended a moment ago: ask again until it is idle, within FLUSH_IDLE_WAIT_S, as the load runner's flush does
    deadline, tries = time.monotonic() + min(FLUSH_IDLE_WAIT_S, s.timeout_s), 0
    while True:
        tries += 1
        reply = s.get("POST /flush_cache when idle", "200", "/flush_cache", method="POST", body=b"")
        if reply is None or reply.status == 200 or time.monotonic() + FLUSH_RETRY_S > deadline:
            break
        time.sleep(FLUSH_RETRY_S)
    if reply is not None:
        s.add("POST /flush_cache when idle", reply.status == 200, "200",
              f"{reply.status} {short(reply.text(), 50)}" + (f" (after {tries} tries)" if tries > 1 else ""))
    return s.checks


def _wrong_type(key: str, value: Any) -> str:
    """What is wrong with one /server_info value ("its type is right" when another key made the document fail)."""
    from cluster.engines.sglang_server_info import check_server_info

    try:
        check_server_info({key: value})
    except MalformedAnswerError as e:
        return str(e).split(": ", 1)[-1]
    return f"{shown(value)} (its own type is right; another key's is not)"


def _server_info(s: SmokeCalls) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """(the document when its types are SGLang's, else {}; the object as answered, else {}): a key that is there
    with the wrong type is then said to be, not 'missing' (F20)."""
    reply = s.get("GET /server_info", "200 JSON at /server_info", "/server_info")
    path = "/server_info"
    if reply is not None and reply.status == 404:
        path = "/get_server_info"
        reply = s.get("GET /server_info", "200 JSON at /server_info", path)
    if reply is None:
        return {}, {}
    usable, si = s.json("GET /server_info", "200 JSON at /server_info", reply) if reply.status == 200 else (True, None)
    if not usable:
        return {}, {}
    s.add("GET /server_info", path == "/server_info" and isinstance(si, dict), "200 JSON at /server_info",
          f"{reply.status} at {path}" + ("" if si is None or isinstance(si, dict) else f", {shown(si)}"))
    if not isinstance(si, dict):
        return {}, {}
    from cluster.engines.sglang_server_info import check_server_info

    try:
        check_server_info(si)
    except MalformedAnswerError as e:
        s.checks.append(Check("server_info types", False, "SGLang's types for the keys sglbench reads",
                              short(str(e), 200), fault=True))
        return {}, si
    return si, si


def _check_prefill_refuses(s: SmokeCalls) -> None:
    """A prefill server answers a /generate without bootstrap fields with a refusal (SGLang 0.5.23: 400 "without
    bootstrap room id"): expected, not a failure; only the gateway's requests carry them."""
    body = json.dumps({"text": "Reply with exactly one word: OK",
                       "sampling_params": {"max_new_tokens": 1, "temperature": 0.0}}).encode()
    name, expected = "POST /generate refused (prefill)", "4xx: a prefill server serves only the gateway's requests"
    reply = s.get(name, expected, "/generate", method="POST", body=body)
    if reply is not None:
        s.add(name, 400 <= reply.status < 500, expected, f"{reply.status} {short(reply.text(), 60)}")


def check_generate(s: SmokeCalls, speculative: bool, extra: Mapping[str, str | int] = {}) -> Optional[HttpReply]:
    """The streamed /generate and its rows; the reply (None when the call failed), for a gateway's header check."""
    body = json.dumps({"text": "Reply with exactly one word: OK", "stream": True, **extra,
                       "sampling_params": {"max_new_tokens": 16, "temperature": 0.0, "ignore_eos": True}}).encode()
    reply = s.get("POST /generate (stream)", "200", "/generate", method="POST", body=body)
    if reply is None:
        return None
    out = s.checks
    out.append(Check("POST /generate (stream)", reply.status == 200, "200", str(reply.status)))
    if reply.status != 200:
        return reply
    events = split_events(reply.body)  # LF or CRLF line ends: both are SSE
    payloads = [event_data(e) for e in events]
    framed = all(p is not None for p in payloads)
    out.append(Check("SSE framing", framed and bool(events), "every event 'data: <json>'",
                     short(events[0].decode("utf-8", "replace") if events else "no events", 50)))
    done = bool(payloads) and payloads[-1] == b"[DONE]"
    out.append(Check("stream ends with [DONE]", done, "data: [DONE]",
                     short(events[-1].decode("utf-8", "replace") if events else "", 40)))
    chunks = [p for p in payloads if p is not None and p != b"[DONE]"]
    parser = SGLangNativeParser(keep_text=True)  # the load generator's parser, every chunk decoded and typed
    tokens = [k for k in (parser.feed(p) for p in chunks) if k > 0]
    meta = parser.meta()
    if meta.malformed is not None:
        out.append(Check("meta_info types", False, "each chunk an object whose meta_info has SGLang's types",
                         short(meta.malformed, 200), fault=True))
        return reply
    answer = stream_answer(meta, tokens)
    if meta.error_event is not None:  # the server answered with an error: its counts are not there to judge
        inv = BY_NAME["no_error_event"]
        out.append(Check(f"invariant {inv.name}", False, inv.statement, short(inv.broken(answer), 200)))
        return reply
    metas = [object_field(as_object(decode_json(p, "a /generate chunk"), "a /generate chunk"), "meta_info",
                          "a /generate chunk") for p in chunks]  # decoded and typed by the parser already
    cts = [c if isinstance(c, int) else 0 for c in (m.get("completion_tokens") for m in metas)]
    meta_last = metas[-1] if metas else {}
    missing = [k for k in META_KEYS if k not in meta_last]
    out.append(Check("meta_info keys", not missing, ", ".join(META_KEYS), f"missing {missing}" if missing else "all"))
    out.append(Check("completion_tokens cumulative", cts == sorted(cts) and bool(cts) and cts[-1] == 16,
                     "non-decreasing, 16 at the end (ignore_eos)", short(cts[-5:])))
    raw_fin = meta_last.get("finish_reason")
    out.append(Check("finish_reason on the last chunk", meta.finish_reason is not None and isinstance(raw_fin, dict),
                     "object with 'type'", short(raw_fin)))
    if speculative:
        verify = meta.spec_verify_ct
        out.append(Check("meta_info.spec_verify_ct", verify is not None and verify > 0,
                         "positive int on a speculative server", short(verify)))
    for inv in INVARIANTS:  # every answer invariant its own row, named, even where it holds
        why = inv.broken(answer)
        out.append(Check(f"invariant {inv.name}", why is None, inv.statement, "holds" if why is None else
                         short(why, 200)))
    return reply


def failed_calls(checks: list[Check]) -> list[Check]:
    """The checks whose call itself failed (the server's fault): the CLI exits 4 when there is any."""
    return [c for c in checks if c.fault]
