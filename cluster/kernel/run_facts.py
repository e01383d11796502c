"""Typed facts a `runs` row is built from: a server start, its segment, the gate's verdict (the measured window is
kernel/window.py).

Why the kernel: the Ray actors and the driver (distributed/) produce them and the runs row's builder
(analysis/run_row.py) reads them; a Ray-free, HTTP-free record both sides import keeps the boundary typed without a
cycle (`server/` stays the process mechanics, `loadgen/` the HTTP client), and the dataset, which stores the row,
needs none of them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Optional, TypedDict


@dataclass(frozen=True)
class ServerFacts:
    """What one healthy server start proved (EngineActor.start's answer): process, placement, launch, evidence."""

    pid: int
    """The process-group leader (the watchdog, or the server without one)."""
    pgid: int
    port: int
    port_attempts: int
    base_url: str
    argv: list[str]
    """The launch argv with secrets redacted."""
    env: dict[str, str]
    """The variant's launch env (redacted), not the whole inherited environment."""
    cuda_visible_devices: str
    gpu_ids: list[str]
    node_id: str
    hostname: str
    startup_s: float
    started_unix_s: float
    infos: dict[str, Any]
    """The server's own info endpoints' JSON (name → answer, or {"error": ...}): evidence, not parsed facts."""
    resolved_args: dict[str, Any]
    log_path: str
    server_pid: Optional[int]
    server_saw_cuda_visible_devices: Optional[str]
    environment: dict[str, Any]
    """Package/driver versions captured on the node (or {"error": ...})."""
    cap_log_lines: tuple[str, ...] = ()
    """Server log lines (scrubbed) that state a lowered concurrency cap (engine.cap_log_marker), read at startup."""
    launched: bool = True
    """Whether sglbench launched this server (False: an endpoint already running; pid and pgid are then 0 and
    nothing of it is ever killed)."""
    start_mark: Optional[str] = None
    """The engine's restart mark when the server was first checked (Engine.start_mark), None when it gave none."""
    processes: tuple["ProcessFacts", ...] = ()
    """A deployment of several processes: each one's own facts (servers in start order, then the gateway); the
    fields above are then the front door's (the gateway's URL, or rank 0's), () for one server."""

    def workers(self) -> tuple[tuple[str, str], ...]:
        """(name, base URL) of a deployment's servers that answer HTTP requests (every one but a rank ≥ 1 and the
        gateway); () for one server."""
        return tuple((p.name, p.facts.base_url) for p in self.processes
                     if p.role not in ("gateway", "rank") or p.name == "rank-0")

    def process_facts(self) -> tuple["ProcessFacts", ...]:
        """Every process this start launched, named (one server: itself as `server`)."""
        return self.processes or (ProcessFacts("server", "server", self),)


@dataclass(frozen=True)
class ProcessFacts:
    """One process of a deployment: its name (`replica-1`, `prefill-0`, `rank-1`, `gateway`), role, and facts."""

    name: str
    role: str
    facts: ServerFacts


class GateVerdictJson(TypedDict, total=False):
    """GateVerdict as provenance_json["correctness"] holds it (a skipped gate has no accept_length)."""

    passed: bool
    skipped: bool
    reasons: list[str]
    accept_length: Optional[float]


@dataclass(frozen=True)
class GateVerdict:
    """The correctness gate's answer for one variant (a variant that fails it spends no time on load, except on the
    acceptance floor alone: measured for its acceptance health, its runs invalid)."""

    passed: bool
    reasons: tuple[str, ...]
    accept_length: Optional[float] = None
    skipped: bool = False
    """The spec disabled the gate."""

    def as_json(self) -> GateVerdictJson:
        """The form stored in provenance_json["correctness"]."""
        if self.skipped:
            return {"passed": self.passed, "skipped": True, "reasons": list(self.reasons)}
        return {"passed": self.passed, "reasons": list(self.reasons), "accept_length": self.accept_length}


@dataclass(frozen=True)
class SegmentFacts:
    """What the driver learns about a server segment after the start: tuning, load actors, gate, end."""

    tuning_artifact: Optional[str] = None
    checkpoint_fingerprint: Optional[str] = None
    """The GPU node's probe of the variant's checkpoint: SHA-256 over its config, index and shard headers."""
    hub_revision: Optional[str] = None
    """The hub commit the checkpoint was downloaded at, where its files say so (never guessed)."""
    load_actor_cuda_visible_devices: Optional[str] = None
    load_actor_node_id: Optional[str] = None
    load_actors: Optional[int] = None
    correctness: Optional[GateVerdict] = None
    stopped_unix_s: Optional[float] = None


@dataclass(frozen=True)
class ServerRecord:
    """A variant's server facts and its segment's, as ExperimentResult.servers hands them to callers.

    Attribute access is the typed way (`rec.facts.pgid`); `rec["pgid"]` / `rec.get(...)` look a field up by name
    in facts then segment and raise KeyError for a name neither has (never a silent None)."""

    facts: ServerFacts
    segment: SegmentFacts

    def __getitem__(self, key: str) -> Any:
        for part in (self.facts, self.segment):
            if key in {f.name for f in fields(part)}:
                return getattr(part, key)
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default
