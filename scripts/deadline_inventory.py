"""Inventory every blocking wait in cluster/ (Ray, subprocesses, sockets and HTTP, template renders, threads, polling
loops) and write docs/deadlines.md: each call site with what it waits on and its deadline.

A call's deadline is its own timeout argument, or an entry of DECLARED below (what bounds it, and why it takes no
argument). tests/unit/test_deadline_inventory.py fails on a wait that has neither, on a DECLARED entry that no
longer matches a call, and when docs/deadlines.md is not what this script writes.

    python scripts/deadline_inventory.py            # rewrite docs/deadlines.md
    python scripts/deadline_inventory.py --check    # exit 1 when it is stale
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "cluster"
OUT = REPO / "docs" / "deadlines.md"

SUBPROCESS_RUNS = {"subprocess.run", "subprocess.call", "subprocess.check_call", "subprocess.check_output"}
HTTP_VERBS = {"get", "post", "put", "delete", "head", "request", "patch"}
SOCKET_BLOCKING = {"connect", "recv", "recv_into", "accept", "sendall"}
JOB_API_CALLS = {"submit_job", "get_job_status", "get_job_logs", "stop_job", "tail_job_logs", "JobSubmissionClient",
                 "_BoundedJobSubmissionClient"}
BOUNDED_HTTP = {("cluster.engines.http_call", "call"): "30 s", ("cluster.server.process", "http_get_json"): "5 s",
                ("cluster.server.process", "http_post"): "30 s", ("cluster.server.process", "http_status"): "5 s"}
"""The project's own HTTP calls (engines/http_call.py): a whole-call deadline each, `timeout_s` or its default."""
ASYNC_SOCKET = {"sock_connect", "sock_recv", "sock_recv_into", "sock_sendall", "getaddrinfo", "open_connection"}


@dataclass(frozen=True)
class Wait:
    """One blocking call: where, what kind of peer it waits on, the call as written and its timeout argument."""

    path: str
    function: str
    line: int
    kind: str
    call: str
    timeout: Optional[str]
    """The timeout argument as written (`timeout=timeout_s`), or None when the call has none."""


# (file, function, call) -> (deadline, why it takes no timeout argument). `call` is the callee as written.
DECLARED: dict[tuple[str, str, str], tuple[str, str]] = {
    ("cluster/sim/disagg.py", "PdRole._kv", "room.ready.wait"): (
        "asyncio.wait_for(timeout=SGLANG_DISAGGREGATION_WAITING_TIMEOUT, 300 s as SGLang's)",
        "a decode waits for its room's KV as long as SGLang's decode would"),
    ("cluster/sim/disagg.py", "Ticket._prefill_bootstrap", "room.registered.wait"): (
        "asyncio.wait_for(timeout=SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT, 300 s as SGLang's)",
        "a prefill waits for the decode's handshake as long as SGLang's bootstrap would"),
    ("cluster/sim/disagg.py", "Ticket.hand_off", "room.received.wait"): (
        "asyncio.wait_for(timeout=SGLANG_DISAGGREGATION_WAITING_TIMEOUT)",
        "the prefill holds the KV until the decode confirms, as long as SGLang's waiting timeout"),
    ("cluster/sim/ranks.py", "RankGroup.lead", "self.joined.wait"): (
        "the first of: every rank joined, or the process stopped (SIGTERM from its owner)",
        "rank 0 waits for its ranks like SGLang's; its owner (the EngineActor's health timeout) bounds the start"),
    ("cluster/sim/ranks.py", "RankGroup.lead", "stop.wait"): (
        "the first of: every rank joined, or the process stopped (SIGTERM from its owner)",
        "the same wait as joined: whichever comes first ends it"),
    ("cluster/sim/ranks.py", "follow", "asyncio.open_connection"): (
        "retried until JOIN_TIMEOUT_S; each try is a loopback/LAN connect that fails fast when nothing listens",
        "a rank reaches rank 0's rendezvous or exits 1 naming it"),
    ("cluster/sim/ranks.py", "follow", "stop.wait"): (
        "the process's life: until rank 0's connection ends (it then exits) or its owner stops it",
        "a rank >= 1 serves its health server while the server lives, as SGLang's does"),
    ("cluster/sim/ranks.py", "follow", "leader.result"): (
        "none: the future is already done (asyncio.wait returned it)",
        "reading a finished future does not block"),
    ("cluster/distributed/cluster_state.py", "join_cluster", "ray.init"): (
        "SGLBENCH_RAY_JOIN_TIMEOUT_S (30 s); a ray:// address: the TCP check, then the Ray client's own 3 tries "
        "(5 + 10 + 15 s)",
        "ray.init takes no timeout: a TCP check first, then Ray's own GCS connect tries cut to fit by its knobs "
        "(the Ray client reads its knobs once, at import)"),
    ("cluster/distributed/cluster_state.py", "remote_preflight", "ray.get"): (
        "the probe's own subprocess waits (engine argv parser, version, imports: each with its timeout)",
        "the probe task runs checks that are each bounded in this table; Ray reports a dead node as an error"),
    ("cluster/distributed/driver.py", "init_ray", "ray.init"): (
        "the join: SGLBENCH_RAY_JOIN_TIMEOUT_S via join_cluster; a local start: Ray's own start timeouts",
        "with an address it goes through join_cluster; without, it starts a new cluster on 127.0.0.1"),
    ("cluster/distributed/driver.py", "Driver._run", "f.result"): (
        "each segment's own waits (this table)", "futures of the segment threads, each bounded by its Ray waits"),
    ("cluster/distributed/gate_stage.py", "GateStage.run", "self.board.wait"): (
        "health_timeout_s + 600 s (its second argument)", "waits for the baseline's gate answers"),
    ("cluster/distributed/handles.py", "EngineHandle.start", "ray.get"): (
        "health_timeout_s inside the actor",
        "the server's start is bounded where it runs: the actor's health poll gives up at health_timeout_s"),
    ("cluster/distributed/handles.py", "LoadStream.__iter__", "ray.get"): (
        "request_timeout_s per request inside the load actor",
        "one streamed batch of a window: the window's requests each carry their deadline"),
    ("cluster/distributed/handles.py", "LoadHandle.run_gate", "ray.get"): (
        "timeout_s per gate request inside the load actor", "the gate's HTTP calls carry their timeout"),
    ("cluster/distributed/handles.py", "LoadHandle.run_eval_alone", "ray.get"): (
        "timeout_s per eval request inside the load actor", "the eval's HTTP calls carry their timeout"),
    ("cluster/distributed/handles.py", "LoadHandle.visible_gpus", "ray.get"): (
        "none needed: the actor reads its environment", "an actor method that only reads os.environ"),
    ("cluster/distributed/handles.py", "LoadHandle.node_id", "ray.get"): (
        "none needed: the actor reads its runtime context", "an actor method that only reads Ray's runtime context"),
    ("cluster/distributed/actors.py", "LoadActorImpl.run_point_stream", "q.get"): (
        "request_timeout_s per request of the window", "the window's thread puts None when it ends, even on error"),
    ("cluster/distributed/actors.py", "LoadActorImpl.run_point_stream", "t.join"): (
        "request_timeout_s per request of the window", "joins the window's thread after its last batch"),
    ("cluster/distributed/jobs.py", "JobClient.__init__", "_BoundedJobSubmissionClient"): (
        "SGLBENCH_JOB_API_TIMEOUT_S (30 s) per request",
        "Ray's job client passes `requests` no timeout: _BoundedJobSubmissionClient adds it to every request"),
    ("cluster/distributed/jobs.py", "JobClient.submit", "self._client.submit_job"): (
        "SGLBENCH_JOB_API_TIMEOUT_S (30 s) per request", "the client is a _BoundedJobSubmissionClient"),
    ("cluster/distributed/jobs.py", "JobClient.status", "self._client.get_job_status"): (
        "SGLBENCH_JOB_API_TIMEOUT_S (30 s) per request", "the client is a _BoundedJobSubmissionClient"),
    ("cluster/distributed/jobs.py", "JobClient.logs", "self._client.get_job_logs"): (
        "SGLBENCH_JOB_API_TIMEOUT_S (30 s) per request", "the client is a _BoundedJobSubmissionClient"),
    ("cluster/distributed/jobs.py", "JobClient.stop", "self._client.stop_job"): (
        "SGLBENCH_JOB_API_TIMEOUT_S (30 s) per request", "the client is a _BoundedJobSubmissionClient"),
    ("cluster/distributed/jobs.py", "JobClient.follow._tail", "self._client.tail_job_logs"): (
        "until the job ends (or Ctrl-C); its status is then polled for 60 s",
        "following a job's log is meant to last as long as the job"),
    ("cluster/distributed/tuning_stage.py", "facts_for", "ray.get"): (
        "the task's nvidia-smi and interpreter runs (30 s, 60 s)", "the task's subprocesses carry their timeouts"),
    ("cluster/distributed/tuning_stage.py", "_triton_moe", "ray.get"): (
        "the tuning job's declared budget (max_configs) inside each task",
        "a tuning search's length is what the experiment asks for; the placement itself waits PG_TIMEOUT_S"),
    ("cluster/distributed/tuning_stage.py", "_flashinfer_autotune", "ray.get"): (
        "health_timeout_s inside the actor", "the server's start is bounded where it runs"),
    ("cluster/engines/http_call.py", "resolve_within.lookup", "socket.getaddrinfo"): (
        "its deadline_s: an HTTP call's whole deadline, or the Ray join's TCP check (SGLBENCH_RAY_JOIN_TIMEOUT_S, "
        "at most 10 s); the lookup's thread is joined with it",
        "getaddrinfo takes no timeout: it runs on a daemon thread abandoned at the deadline"),
    ("cluster/loadgen/chat_template.py", "ChatTemplate.render", "template.generate"): (
        "SGLBENCH_TEMPLATE_RENDER_TIMEOUT_S (5 s) and 32 Mi characters",
        "jinja2 takes no timeout: every loop step, sandbox call and output chunk checks the deadline"),
    ("cluster/loadgen/pool.py", "StreamPool._connect", "loop.getaddrinfo"): (
        "the caller's asyncio.wait_for (request_timeout_s, the pre-open timeout)", "always awaited inside wait_for"),
    ("cluster/loadgen/pool.py", "StreamPool._connect", "loop.sock_connect"): (
        "the caller's asyncio.wait_for (request_timeout_s, the pre-open timeout)", "always awaited inside wait_for"),
    ("cluster/sim/lifecycle.py", "SimServer.run_scheduler", "self._wake.wait"): (
        "the simulator's own stop", "the simulated server's scheduler waiting for work, not a wait on a peer"),
    ("cluster/sim/lifecycle.py", "SimServer._stream", "ev.wait"): (
        "the simulator's own steps", "a simulated request waiting for its next step, not a wait on a peer"),
    ("cluster/sim/lifecycle.py", "SimServer.wait_finished", "ev.wait"): (
        "the simulator's own steps", "a simulated request waiting to finish, not a wait on a peer"),
    ("cluster/loadgen/pacing.py", "pace", "while clock() < target_ns"): (
        "the scheduled send time (target_ns) itself", "the arrival schedule's own wait: it ends at its target time"),
    ("cluster/server/watchdog.py", "main", "while True"): (
        "the server's exit, a stop signal or its owner's death", "the watchdog lives exactly as long as its server"),
    ("cluster/sim/lifecycle.py", "SimServer.run_scheduler", "while True"): (
        "the simulator's own stop", "the simulated server's scheduler loop, not a wait on a peer"),
    ("cluster/sim/server.py", "serve", "stop.wait"): (
        "until the server is stopped (SIGTERM), or start_delay_s", "the simulated server's main loop"),
}


def _qualname(stack: list[ast.AST]) -> str:
    return ".".join(n.name for n in stack if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))


def _timeout(call: ast.Call, positional: Optional[int] = None) -> Optional[str]:
    for kw in call.keywords:
        if kw.arg in ("timeout", "timeout_s"):
            return f"{kw.arg}={ast.unparse(kw.value)}"
    if positional is not None and len(call.args) > positional:
        return f"timeout={ast.unparse(call.args[positional])}"
    return None


def _in_wait_for(stack: list[ast.AST]) -> bool:
    return any(isinstance(n, ast.Call) and ast.unparse(n.func).endswith("wait_for") for n in stack)


def _sets_timeout(function: Optional[ast.AST]) -> bool:
    return function is not None and any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "settimeout"
        for n in ast.walk(function))


def _classify(call: ast.Call, callee: str, imports_jinja: bool, stack: list[ast.AST],
              function: Optional[ast.AST], http: dict[str, str]) -> Optional[tuple[str, Optional[str]]]:
    """(kind, timeout) of a blocking call; None for a call that does not block on a peer. `http`: the module's
    local names of the project's own HTTP calls, with their default deadline."""
    attr = callee.rsplit(".", 1)[-1]
    no_args = not call.args and not call.keywords
    if callee in http:
        return "http", _timeout(call) or f"timeout_s's default ({http[callee]})"
    if callee in SUBPROCESS_RUNS:
        return "subprocess", _timeout(call)
    if callee in ("ray.get", "ray.wait"):
        return "ray", _timeout(call)
    if attr in ("wait", "communicate") and isinstance(call.func, ast.Attribute):
        return ("subprocess" if attr == "communicate" else "process/event"), \
            _timeout(call, 0 if len(call.args) == 1 else None)
    if callee == "ray.init":
        return "ray join", None
    if attr in JOB_API_CALLS:
        return "ray job API", None
    if attr == "urlopen":
        return "http", _timeout(call, 2)
    if attr in HTTP_VERBS and callee.split(".")[-2:-1] and callee.split(".")[-2].endswith("session"):
        return "http", _timeout(call)
    if callee == "socket.create_connection":
        return "socket", _timeout(call, 1)
    if attr in SOCKET_BLOCKING and isinstance(call.func, ast.Attribute) and len(call.args) <= 1 \
            and not callee.startswith(("duckdb.", "sqlite3.")):
        return "socket", "settimeout in the same function" if _sets_timeout(function) else None
    if attr in ASYNC_SOCKET:
        return "socket", "inside asyncio.wait_for" if _in_wait_for(stack) else None
    if imports_jinja and attr in ("render", "generate"):
        return "template", None
    if no_args and attr in ("join", "result") and isinstance(call.func, ast.Attribute):
        return "thread", None
    if no_args and attr == "get" and isinstance(call.func, ast.Attribute) and callee.split(".")[-2] in ("q", "queue"):
        return "queue", None
    return None


def _sleeps(loop: ast.While) -> bool:
    """A loop that polls: it sleeps between its tries (time.sleep or asyncio.sleep)."""
    return any(isinstance(n, ast.Call) and ast.unparse(n.func) in ("time.sleep", "asyncio.sleep")
               for n in ast.walk(loop))


def _imports_jinja(tree: ast.AST) -> bool:
    return any(isinstance(n, ast.ImportFrom) and (n.module or "").startswith("jinja2")
               or isinstance(n, ast.Import) and any(a.name.startswith("jinja2") for a in n.names)
               for n in ast.walk(tree))


def scan_source(source: str, path: str) -> list[Wait]:
    """The blocking calls of one module's source."""
    tree = ast.parse(source, filename=path)
    jinja = _imports_jinja(tree)
    http = {a.asname or a.name: BOUNDED_HTTP[(n.module or "", a.name)] for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom) for a in n.names if (n.module or "", a.name) in BOUNDED_HTTP}
    found: list[Wait] = []

    def visit(node: ast.AST, stack: list[ast.AST]) -> None:
        if isinstance(node, ast.While) and _sleeps(node):
            src = ast.unparse(node)
            bound = next((w for w in ("deadline", "monotonic", "timeout") if w in src), None)
            found.append(Wait(path, _qualname(stack) or "<module>", node.lineno, "polling loop",
                              f"while {ast.unparse(node.test)}", None if bound is None else f"its {bound} check"))
        if isinstance(node, ast.Call):
            function = next((n for n in reversed(stack) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))),
                            None)
            callee = ast.unparse(node.func)
            got = _classify(node, callee, jinja, stack, function, http)
            if got is not None:
                found.append(Wait(path, _qualname(stack) or "<module>", node.lineno, got[0], callee, got[1]))
        for child in ast.iter_child_nodes(node):
            visit(child, stack + [node])

    visit(tree, [])
    return found


def scan(root: Path = PACKAGE) -> list[Wait]:
    """Every blocking call under `root`, in file then line order."""
    out: list[Wait] = []
    for p in sorted(root.rglob("*.py")):
        out += scan_source(p.read_text(encoding="utf-8"), p.relative_to(REPO).as_posix())
    return out


def deadline_of(w: Wait) -> Optional[tuple[str, str]]:
    """(deadline, why) of a wait: its timeout argument, or its DECLARED entry; None when it has neither."""
    if w.timeout is not None:
        why = {"settimeout": "the socket's timeout", "inside": "an enclosing wait_for", "its ": "the loop checks it",
               "timeout_s's default": "the call's default deadline"}
        return w.timeout, next((v for k, v in why.items() if w.timeout.startswith(k)), "its own argument")
    declared = DECLARED.get((w.path, w.function, w.call))
    return declared


def unbounded(waits: list[Wait]) -> list[Wait]:
    return [w for w in waits if deadline_of(w) is None]


HEADER = """# Deadlines: every wait is bounded

Generated by `python scripts/deadline_inventory.py` from the code; do not edit by hand
(`tests/unit/test_deadline_inventory.py` fails when it is stale, when a blocking call has no deadline, and drives each
kind against a peer that never answers).

## Declared deadlines

Set in `cluster/kernel/deadlines.py`; each environment variable overrides its default (seconds, a positive number).

| Environment variable | Default | Bounds |
|---|---|---|
"""

INVENTORY = """
## Blocking calls

Every call in `cluster/` that waits on Ray, a subprocess, a socket or HTTP server, a chat-template render or a
thread, and every loop that polls (sleeps between tries), with its deadline: its own timeout argument as written, or a declared bound (in
`scripts/deadline_inventory.py`, with the reason it takes no argument).

| Call site | Waits on | Call | Deadline | Why |
|---|---|---|---|---|
"""


def render(waits: list[Wait]) -> str:
    sys.path.insert(0, str(REPO))
    from cluster.kernel.deadlines import DEADLINES

    lines = [HEADER.rstrip("\n")]
    for d in DEADLINES:
        lines.append(f"| `{d.env}` | {d.default_s:g} s | {d.bounds} |")
    lines.append(INVENTORY.rstrip("\n"))
    rows = set()
    for w in waits:
        deadline, why = deadline_of(w) or ("**none**", "")
        rows.add(f"| `{w.path}` `{w.function}` | {w.kind} | `{w.call}` | {deadline.replace('|', '/')} | {why} |")
    lines += sorted(rows)
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when docs/deadlines.md is stale")
    args = ap.parse_args(argv)
    text = render(scan())
    if args.check:
        if OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT} is stale: run python scripts/deadline_inventory.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    missing = unbounded(scan())
    for w in missing:
        print(f"no deadline: {w.path}:{w.line} {w.function}: {w.call}", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
