"""`sglbench smoke`: check every assumption sglbench makes about a live SGLang server, expected vs found."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Optional

META_KEYS = ("id", "finish_reason", "prompt_tokens", "completion_tokens", "cached_tokens")
"""meta_info keys SGLang 0.5.23 always sends on /generate chunks (reference §3.2) that sglbench reads."""

SERVER_INFO_TOP_KEYS = ("version", "max_running_requests", "internal_states")
SPEC_KEYS = ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    expected: str
    found: str


def _get(base: str, path: str, timeout_s: float, method: str = "GET", body: Optional[bytes] = None
         ) -> tuple[int, bytes]:
    req = urllib.request.Request(base.rstrip("/") + path, data=body, method=method,
                                 headers={"Content-Type": "application/json"} if body else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (urllib.error.URLError, OSError) as e:
        return 0, str(getattr(e, "reason", e)).encode()


def _json(raw: bytes | str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _short(x: Any, n: int = 80) -> str:
    s = x if isinstance(x, str) else json.dumps(x, default=str)
    return s if len(s) <= n else s[: n - 1] + "…"


def run_smoke(base_url: str, timeout_s: float = 30.0) -> list[Check]:
    """Probe a live server (idle, ideally) and return one Check per assumption."""
    checks: list[Check] = []

    def add(name: str, ok: bool, expected: str, found: Any) -> None:
        checks.append(Check(name, ok, expected, _short(found)))

    status, _ = _get(base_url, "/health", timeout_s)
    add("GET /health", status == 200, "200", status or "unreachable")
    if status == 0:
        return checks
    status, raw = _get(base_url, "/model_info", timeout_s)
    mi = _json(raw)
    add("GET /model_info", status == 200 and isinstance(mi, dict) and "model_path" in mi,
        "200 with model_path", f"{status} {sorted(mi)[:6] if isinstance(mi, dict) else _short(raw, 40)}")
    status, raw = _get(base_url, "/server_info", timeout_s)
    path = "/server_info"
    if status == 404:
        path = "/get_server_info"
        status, raw = _get(base_url, path, timeout_s)
    si = _json(raw) if status == 200 else None
    add("GET /server_info", path == "/server_info" and isinstance(si, dict),
        "200 JSON at /server_info", f"{status} at {path}")
    si = si if isinstance(si, dict) else {}
    for key in SERVER_INFO_TOP_KEYS:
        add(f"server_info.{key}", key in si, "present", si.get(key, "missing") if key != "internal_states" else
            (f"list of {len(si[key])}" if isinstance(si.get(key), list) else "missing or not a list"))
    states = si.get("internal_states")
    if "internal_states" in si:
        checks[-1] = Check("server_info.internal_states", isinstance(states, list) and len(states) > 0,
                           "non-empty list (one per DP rank)", checks[-1].found)
    mrr = si.get("max_running_requests")
    from cluster.engines.sglang import concurrency_cap_from_server_info

    cap = concurrency_cap_from_server_info(si)
    # real 0.5.23 reports max_running_requests None when the flag is unset without speculative decoding; the
    # scheduler's own cap is internal_states[0].effective_max_running_requests_per_dp
    add("resolved running-request cap", cap is not None, "a positive int (internal_states or max_running_requests)",
        f"{cap.value} ({cap.source})" if cap else mrr)
    speculative = bool(si.get("speculative_algorithm"))
    if speculative:
        for key in SPEC_KEYS[1:]:
            add(f"server_info.{key}", isinstance(si.get(key), int), "int on a speculative server", si.get(key))
        if mrr == 48:
            add("max_running_requests not silently capped", False, "explicit value (48 is SGLang's spec cap)", mrr)
    checks.extend(Check(c.name, c.ok, c.expected, _short(c.found)) for c in _check_generate(base_url, timeout_s, speculative))
    status, raw = _get(base_url, "/flush_cache", timeout_s, method="POST")
    add("POST /flush_cache when idle", status == 200, "200", f"{status} {_short(raw.decode(errors='replace'), 50)}")
    return checks


def _check_generate(base_url: str, timeout_s: float, speculative: bool) -> list[Check]:
    body = json.dumps({"text": "Reply with exactly one word: OK", "stream": True,
                       "sampling_params": {"max_new_tokens": 16, "temperature": 0.0, "ignore_eos": True}}).encode()
    status, raw = _get(base_url, "/generate", timeout_s, method="POST", body=body)
    out = [Check("POST /generate (stream)", status == 200, "200", str(status))]
    if status != 200:
        return out
    events = [e for e in raw.decode(errors="replace").split("\n\n") if e.strip()]
    framed = all(e.startswith("data: ") for e in events)
    out.append(Check("SSE framing", framed and bool(events), "every event 'data: <json>'",
                     _short(events[0] if events else "no events", 50)))
    done = bool(events) and events[-1].strip() == "data: [DONE]"
    out.append(Check("stream ends with [DONE]", done, "data: [DONE]", _short(events[-1] if events else "", 40)))
    chunks = [_json(e[len("data: "):]) for e in events if e.startswith("data: ") and "[DONE]" not in e]
    chunks = [c for c in chunks if isinstance(c, dict)]
    last = chunks[-1] if chunks else {}
    meta = last.get("meta_info") or {}
    missing = [k for k in META_KEYS if k not in meta]
    out.append(Check("meta_info keys", not missing, ", ".join(META_KEYS), f"missing {missing}" if missing else "all"))
    cts = [int((c.get("meta_info") or {}).get("completion_tokens") or 0) for c in chunks]
    out.append(Check("completion_tokens cumulative", cts == sorted(cts) and bool(cts) and cts[-1] == 16,
                     "non-decreasing, 16 at the end (ignore_eos)", _short(cts[-5:])))
    fin = meta.get("finish_reason")
    out.append(Check("finish_reason on the last chunk", isinstance(fin, dict) and "type" in fin,
                     "object with 'type'", _short(fin)))
    if speculative:
        ver = meta.get("spec_verify_ct")
        out.append(Check("meta_info.spec_verify_ct", isinstance(ver, int) and ver > 0,
                         "positive int on a speculative server", _short(ver)))
    return out
