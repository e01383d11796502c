"""Record real SGLang 0.5.23 CPU-server transcripts, redacted, as the contract suite's fixtures (one server at a time).

    flock /tmp/sglbench-heavy.lock python tests/sglang_cpu/record_transcripts.py [OUT_DIR]
        [--models-dir DIR] [--model mix] [--steps 3] [--venv .ci/venvs/sglang]
OUT_DIR defaults to tests/contract/fixtures/sglang-0.5.23-cpu. Without --models-dir the tiny MiMo models are built
into a temporary directory (build_mimo_model.py --seed 0). Each server (a torch_native baseline and NEXTN-<steps>)
becomes one JSON file: its launch and the exchanges in the order they were made (the adapter's own request bodies
where it has them), with machine paths, the port, pids, request ids, timestamps and latencies normalised; key
order, value types and the SSE framing are kept as the server sent them.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))
from sglang_cpu_server import PROMPTS, SGLangCPUServer, baseline_args, nextn_args  # noqa: E402

from cluster.engines.base import Prompt, StreamRequest  # noqa: E402
from cluster.engines.sglang import SGLangEngine  # noqa: E402
from cluster.engines.sglang_dialect import sglang_request_body  # noqa: E402

FIXTURE_DIR = REPO / "tests" / "contract" / "fixtures" / "sglang-0.5.23-cpu"
SGLANG_VERSION = "0.5.23"
FIXED_PORT = 30000
FIXED_EPOCH_S = 1796000000.0
FIXED_DURATION_S = 0.25
INPUT_IDS = (101, 202, 303, 404, 505)
MAX_NEW_TOKENS = 12
BUSY_MAX_NEW_TOKENS = 1024
EPOCH_KEYS = re.compile(r"(_ts|_time)$")
DURATION_KEYS = re.compile(r"(latency|_wait|throughput|queue_time)$")
FLOAT_TREES = ("startup_time", "memory_usage")
"""Keys whose whole subtree holds machine-dependent floats (timings, memory sizes): floats set to 0.0."""
RID = re.compile(r"^[0-9a-f]{32}$")


# ---- HTTP ---------------------------------------------------------------------------------------------------------
def http(base: str, method: str, path: str, body: Optional[dict[str, Any]] = None,
         timeout_s: float = 300.0) -> tuple[int, str, bytes]:
    """One exchange: status, content type (parameters dropped), raw body."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"} if data is not None else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return r.status, (r.headers.get("Content-Type") or "").split(";")[0].strip(), r.read()
    except urllib.error.HTTPError as e:
        return e.code, (e.headers.get("Content-Type") or "").split(";")[0].strip(), e.read()


# ---- redaction ----------------------------------------------------------------------------------------------------
class Redactor:
    """Normalises what differs between machines and runs, keeping every key, its order and its value's type."""

    def __init__(self, port: int, paths: dict[str, str]) -> None:
        self.port = port
        self.paths = sorted(paths.items(), key=lambda kv: -len(kv[0]))  # longest first
        self.host = socket.gethostname()
        self.rids: dict[str, str] = {}

    def rid(self, s: str) -> str:
        if s not in self.rids:
            self.rids[s] = f"{len(self.rids) + 1:032x}"
        return self.rids[s]

    def text(self, s: str) -> str:
        for real, fake in self.paths:
            s = s.replace(real, fake)
        if self.host and len(self.host) > 3:
            s = s.replace(self.host, "host")
        s = re.sub(rf"(?<![0-9]){self.port}(?![0-9])", str(FIXED_PORT), s)
        return self.rid(s) if RID.match(s) else s

    def value(self, v: Any, key: str = "", floats_only: bool = False) -> Any:
        if isinstance(v, dict):
            tree = floats_only or key in FLOAT_TREES
            return {k: self.value(x, k, tree) for k, x in v.items()}
        if isinstance(v, list):
            return [self.value(x, key, floats_only) for x in v]
        if isinstance(v, bool) or v is None:
            return v
        if isinstance(v, str):
            return self.text(v)
        if floats_only:
            return 0.0 if isinstance(v, float) else v
        if key == "port" and v == self.port:
            return FIXED_PORT
        if key == "random_seed":
            return 0
        if key == "created":
            return int(FIXED_EPOCH_S)
        if isinstance(v, float) and EPOCH_KEYS.search(key) and v > 1e9:
            return FIXED_EPOCH_S
        if isinstance(v, float) and (DURATION_KEYS.search(key) or EPOCH_KEYS.search(key)):
            return FIXED_DURATION_S
        return v

    def sse(self, body: bytes) -> str:
        """Each `data: {json}` event redacted and re-serialised compactly (SGLang's orjson framing); others kept."""
        out = []
        for ev in body.decode().split("\n\n"):
            if ev.startswith("data: {"):
                obj = json.loads(ev[len("data: "):])
                ev = "data: " + json.dumps(self.value(obj), separators=(",", ":"), ensure_ascii=False)
            out.append(ev)
        return "\n\n".join(out)

    def metrics(self, text: str, window_only: bool = False) -> str:
        """Prometheus text without HELP lines and histogram buckets (size), pids normalised; `window_only` keeps
        just the counters a window is diffed on (metrics_before)."""
        return self.text(re.sub(r'pid="\d+"', 'pid="0"', compact_metrics(text, window_only)))


WINDOW_COUNTERS = ("sglang:generation_tokens_total", "sglang:prompt_tokens_total", "sglang:num_requests_total",
                   "sglang:spec_verify_calls_total")


def compact_metrics(text: str, window_only: bool) -> str:
    lines = [ln for ln in text.splitlines() if not ln.startswith("# HELP ") and "_bucket{" not in ln]
    if window_only:
        lines = [ln for ln in lines if ln.replace("# TYPE ", "").split("{")[0].split(" ")[0] in WINDOW_COUNTERS]
    return "\n".join(lines) + "\n"


# ---- the exchanges ------------------------------------------------------------------------------------------------
def _greedy(n: int, **extra: Any) -> dict[str, Any]:
    return {"temperature": 0, "max_new_tokens": n, "ignore_eos": True, **extra}


def exchanges(model_name: str) -> list[tuple[str, str, str, Optional[dict[str, Any]]]]:
    """(name, method, path, body) in recording order; metrics_before/after bracket the native /generate requests."""
    def adapter(api: str, prompt: Prompt) -> tuple[str, dict[str, Any]]:
        return sglang_request_body(StreamRequest(api, prompt, MAX_NEW_TOKENS, True, 0.0, model_name))

    gate = json.loads(SGLangEngine().gate_request(PROMPTS[1], 8, model_name).body)
    return [
        ("health", "GET", "/health", None),
        ("metrics_before", "GET", "/metrics", None),
        ("generate_nonstream", "POST", "/generate", {"text": PROMPTS[0], "sampling_params": _greedy(MAX_NEW_TOKENS)}),
        ("generate_stream", "POST", "/generate",
         {"text": PROMPTS[0], "sampling_params": _greedy(MAX_NEW_TOKENS), "stream": True}),
        ("generate_stream_adapter", "POST", *adapter("native", Prompt(input_ids=INPUT_IDS))),
        ("generate_batch", "POST", "/generate", {"text": list(PROMPTS[:2]), "sampling_params": _greedy(8)}),
        ("generate_gate", "POST", "/generate", gate),
        ("metrics_after", "GET", "/metrics", None),
        ("completions_nonstream", "POST", "/v1/completions",
         {"model": model_name, "prompt": PROMPTS[0], "max_tokens": MAX_NEW_TOKENS, "temperature": 0,
          "ignore_eos": True}),
        ("completions_stream_adapter", "POST", *adapter("completions", Prompt(text=PROMPTS[0]))),
        ("chat_nonstream", "POST", "/v1/chat/completions",
         {"model": model_name, "messages": [{"role": "user", "content": PROMPTS[0]}], "max_tokens": MAX_NEW_TOKENS,
          "temperature": 0, "ignore_eos": True}),
        ("chat_stream_adapter", "POST", *adapter("chat", Prompt(text=PROMPTS[0]))),
        ("error_negative_max_new_tokens", "POST", "/generate",
         {"text": PROMPTS[0], "sampling_params": {"max_new_tokens": -1}}),
        ("error_negative_max_new_tokens_stream", "POST", "/generate",
         {"text": PROMPTS[0], "sampling_params": {"max_new_tokens": -1}, "stream": True}),
        ("error_no_prompt", "POST", "/generate", {"sampling_params": {"max_new_tokens": 4}}),
        ("error_completions_negative_max_tokens", "POST", "/v1/completions",
         {"model": model_name, "prompt": PROMPTS[0], "max_tokens": -1}),
        ("server_info", "GET", "/server_info", None),
        ("model_info", "GET", "/model_info", None),
        ("v1_models", "GET", "/v1/models", None),
        ("flush_cache_idle", "POST", "/flush_cache", None),
    ]


def record_one(exch: tuple[str, str, str, Optional[dict[str, Any]]], base: str, red: Redactor) -> dict[str, Any]:
    name, method, path, body = exch
    status, ctype, raw = http(base, method, path, body)
    out: dict[str, Any] = {"name": name, "request": {"method": method, "path": path, "body": body},
                           "status": status, "content_type": ctype}
    text = raw.decode()
    if path == "/metrics":
        out["text"] = red.metrics(text, window_only=name == "metrics_before")
    elif ctype == "text/event-stream" or text.startswith("data: "):
        out["sse"] = red.sse(raw)
    else:
        try:
            out["json"] = red.value(json.loads(text))
        except ValueError:
            out["text"] = red.text(text)
    return out


def record_busy_flush(base: str, red: Redactor, model_name: str) -> dict[str, Any]:
    """POST /flush_cache while a long request runs (SGLang refuses to flush then); the request is waited for."""
    body = {"text": PROMPTS[2], "sampling_params": _greedy(BUSY_MAX_NEW_TOKENS)}
    t = threading.Thread(target=http, args=(base, "POST", "/generate", body), daemon=True)
    t.start()
    deadline = time.monotonic() + 60
    busy = False
    while time.monotonic() < deadline and not busy:
        time.sleep(0.2)
        _, _, m = http(base, "GET", "/metrics")
        busy = any(ln.startswith("sglang:num_running_reqs{") and not ln.endswith(" 0.0")
                   for ln in m.decode().splitlines())
    out = record_one(("flush_cache_busy", "POST", "/flush_cache", None), base, red)
    out["busy_seen_in_metrics"] = busy
    t.join(600)
    return out


def record_running(server: SGLangCPUServer, tag: str, paths: dict[str, str],
                   launch_argv: Optional[list[str]] = None) -> dict[str, Any]:
    """The transcript of one healthy server (the caller owns its start and stop); `launch_argv` when another
    launcher started it (the sglbench EngineActor) and `server` only addresses it."""
    red = Redactor(server.port, paths)
    name = "tiny"
    recs = [record_one(e, server.url, red) for e in exchanges(name)]
    recs.append(record_busy_flush(server.url, red, name))
    doc = {"sglang_version": SGLANG_VERSION, "tag": tag, "model": red.text(str(server.model)),
           "launch_args": red.value((launch_argv or server.argv())[3:]), "recorded_by": "tests/sglang_cpu/record_transcripts.py",
           "exchanges": recs}
    leftover = [p for p in paths if p in json.dumps(doc)]
    if leftover:
        raise RuntimeError(f"redaction left machine paths in the {tag} transcript: {leftover}")
    return doc


def redaction_paths(python: Path, models_dir: Path, tmp: Path) -> dict[str, str]:
    """Machine paths replaced by stable placeholders, so transcripts recorded anywhere compare equal."""
    paths = {str(models_dir.resolve()): "/models", str(models_dir): "/models", str(python.parent.parent): "/venv",
             str(REPO): "/repo", str(tmp): "/tmp/record", str(Path.home()): "/home/user"}
    return {k: v for k, v in paths.items() if k not in ("", "/")}


def record_server(python: Path, model: Path, tag: str, args: list[str], log_dir: Path,
                  paths: dict[str, str]) -> dict[str, Any]:
    server = SGLangCPUServer(python=python, model=model, extra_args=args, log_path=log_dir / f"{tag}.log")
    try:
        start_s = server.start()
        print(f"[record] {tag}: healthy after {start_s:.1f} s", flush=True)
        return record_running(server, tag, paths)
    finally:
        server.stop()


HIT_DEPENDENT_KEYS = frozenset({"cached_tokens_details"})
"""Keys whose value is null or an object depending on the traffic before (SGLang 0.5.23
scheduler_components/output_streamer.py get_cached_tokens_details: None when no token came from the prefix
cache, else {"device": n, "host": n}); their shape is "cache-dependent", whichever was seen."""


def value_shape(v: Any) -> Any:
    """Keys in order and JSON types, recursively; a list's shape is its distinct element shapes."""
    if isinstance(v, dict):
        return {k: "cache-dependent" if k in HIT_DEPENDENT_KEYS and (x is None or isinstance(x, dict))
                else value_shape(x) for k, x in v.items()}
    if isinstance(v, list):
        seen: list[Any] = []
        for x in v:
            sx = value_shape(x)
            if sx not in seen:
                seen.append(sx)
        return ["list", seen]
    return "null" if v is None else type(v).__name__


def exchange_shape(e: dict[str, Any]) -> Any:
    """Status, content type and body shape; SSE events run-length collapsed (their count follows acceptance);
    Prometheus text as family → (type, label-key sets)."""
    out: dict[str, Any] = {"status": e["status"], "content_type": e["content_type"]}
    if "json" in e:
        out["json"] = value_shape(e["json"])
    elif "sse" in e:
        events: list[Any] = []
        for ev in e["sse"].split("\n\n"):
            sx = value_shape(json.loads(ev[6:])) if ev.startswith("data: {") else ev
            if not events or events[-1] != sx:
                events.append(sx)
        out["sse"] = events
    elif e["request"]["path"] == "/metrics":
        fams: dict[str, Any] = {}
        for line in e["text"].splitlines():
            if line.startswith("# TYPE "):
                fams.setdefault(line.split()[2], {"type": line.split()[3], "labels": []})
            elif line and not line.startswith("#"):
                name = line.split("{", 1)[0].split(" ", 1)[0]
                for fam in (name, name.rsplit("_", 1)[0]):
                    if fam in fams:
                        labels = sorted(kv.split("=", 1)[0] for kv in
                                        (line.split("{", 1)[1].split("}", 1)[0].split(",") if "{" in line else []))
                        if labels not in fams[fam]["labels"]:
                            fams[fam]["labels"].append(labels)
                        break
        out["metrics"] = fams
    return out


def shapes_match(a: Any, b: Any) -> bool:
    """Equal shapes, where a JSON null (value_shape "null") matches any type: a null carries none, and a field is
    null or set by the server's arguments (`max_running_requests` unset on one server, 16 on another)."""
    if a == "null" or b == "null":
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(shapes_match(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(shapes_match(x, y) for x, y in zip(a, b))
    return bool(a == b)


def shape_diffs(recorded: dict[str, Any], live: dict[str, Any]) -> list[str]:
    """Exchanges whose shape differs between two transcripts of the same server (names of both must match)."""
    a = {e["name"]: e for e in recorded["exchanges"]}
    b = {e["name"]: e for e in live["exchanges"]}
    diffs = [f"exchange set: {sorted(set(a) ^ set(b))}"] if set(a) != set(b) else []
    for name in a:
        if name not in b:
            continue
        if name == "flush_cache_busy" and a[name].get("busy_seen_in_metrics") != b[name].get("busy_seen_in_metrics"):
            continue
        sa, sb = exchange_shape(a[name]), exchange_shape(b[name])
        if not shapes_match(sa, sb):
            diffs.append(f"{name}: recorded {json.dumps(sa)[:1500]}\n  live {json.dumps(sb)[:1500]}")
    return diffs


def assert_keeps_recorded_shapes(tag: str, live: dict[str, Any]) -> None:
    """The committed contract fixture `<tag>.json` has the shapes the live server's transcript answers in."""
    recorded = json.loads((FIXTURE_DIR / f"{tag}.json").read_text())
    problems = [f"{tag}.json: {d}" for d in shape_diffs(recorded, live)]
    assert not problems, "SGLang's wire shapes changed; re-record with tests/sglang_cpu/record_transcripts.py " \
                         "and update the contract assertions:\n" + "\n".join(problems)


def build_models(python: Path, out: Path) -> None:
    cmd = [str(python), str(HERE / "build_mimo_model.py"), str(out), "--seed", "0", "--variants", "echo", "mix",
           "rand"]
    subprocess.run(cmd, check=True, capture_output=True, timeout=600)


def record(out_dir: Path, python: Path, models_dir: Optional[Path], model: str, steps: list[int]) -> list[Path]:
    """Record every server's transcript into out_dir; returns the files written."""
    tmp = Path(tempfile.mkdtemp(prefix="sglang-record-"))
    try:
        if models_dir is None:
            models_dir = tmp / "models"
            build_models(python, models_dir)
        paths = redaction_paths(python, models_dir, tmp)
        servers = [("baseline", baseline_args())] + [(f"nextn{s}", nextn_args(s)) for s in steps]
        out_dir.mkdir(parents=True, exist_ok=True)
        written = []
        for tag, args in servers:
            doc = record_server(python, models_dir / model, tag, args, tmp, paths)
            path = out_dir / f"{tag}.json"
            path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
            written.append(path)
            print(f"[record] {tag}: {path} ({path.stat().st_size} bytes)", flush=True)
        return written
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir", type=Path, nargs="?", default=FIXTURE_DIR)
    ap.add_argument("--models-dir", type=Path, default=None)
    ap.add_argument("--model", default="mix", choices=["echo", "mix", "rand"])
    ap.add_argument("--steps", nargs="+", type=int, default=[3])
    ap.add_argument("--venv", type=Path, default=REPO / ".ci" / "venvs" / "sglang")
    ns = ap.parse_args(argv)
    record(ns.out_dir, ns.venv / "bin" / "python", ns.models_dir, ns.model, ns.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
