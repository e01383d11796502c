"""What starting, probing and instrumenting an engine's server needs of its adapter, declared where the server is
run: three narrow protocols (every adapter in cluster/engines/ satisfies them structurally, none imports them) and
the two startup reads that go through them (the info documents, the log lines that state a lowered cap)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional, Protocol, Sequence, runtime_checkable

from cluster.config.engines import EngineLauncher
from cluster.engines.base import HttpRequest, LaunchCommand
from cluster.input_files import JsonValue
from cluster.kernel.runs import ResolvedVariant
from cluster.server.process import http_get_json
from cluster.telemetry.recorder import DeviceSampler


@runtime_checkable
class ServerLauncher(Protocol):
    """An engine as its server is launched: the command line, the version it is built for, where it computes."""

    @property
    def name(self) -> str:
        """The engine's name (sglang, sim, vllm)."""
        ...

    @property
    def module(self) -> str:
        """`python -m <module>` starts the server when no launcher is given (the node's import check asks it)."""
        ...

    def launch(self, variant: ResolvedVariant, host: str, port: int, launcher: Optional[EngineLauncher],
               default_python: str, version: Optional[str] = None) -> LaunchCommand:
        """The argv (never a shell string) and the env additions of the server process."""
        ...

    def version_for(self, launcher: Optional[EngineLauncher], default_python: str) -> Optional[str]:
        """The engine version launch commands are built for."""
        ...

    def runs_on_cpu(self, variant: ResolvedVariant) -> bool:
        """True when the variant's server computes on the CPU (it needs no GPU)."""
        ...


@runtime_checkable
class ServerInfoSource(Protocol):
    """An engine as a started server is waited for and asked what it resolved."""

    @property
    def headers(self) -> Mapping[str, str]:
        """Headers every call sends (the variant's API key, where it has one)."""
        ...

    @property
    def health_path(self) -> str:
        """GET path that answers 200 once the server can serve."""
        ...

    @property
    def cap_log_marker(self) -> Optional[str]:
        """A substring of the server log line that states a lowered concurrency cap (None: the engine logs none)."""
        ...

    def info_paths(self, version: Optional[str]) -> dict[str, str]:
        """name -> GET path of the JSON documents recorded in provenance."""
        ...

    def parse_info(self, name: str, doc: Any) -> Any:
        """An info document as polled, the fields sglbench reads from it type-checked (MalformedAnswerError)."""
        ...

    def resolved_args(self, infos: Mapping[str, JsonValue]) -> dict[str, JsonValue]:
        """The resolved server args read from the recorded info documents (stored as given: runs.resolved_args)."""
        ...


@runtime_checkable
class ServerInstruments(Protocol):
    """An engine as its running server is measured: its GPUs sampled, a kernel profile asked for."""

    @property
    def profile_stop_path(self) -> Optional[str]:
        """POST path that stops a profile and writes its traces (None: the engine has none)."""
        ...

    def device_sampler(self, variant: ResolvedVariant, base_url: str, gpu_ids: Sequence[str]) -> DeviceSampler:
        """What reads this server's GPUs during a window (TelemetryUnavailable when there is nothing to read)."""
        ...

    def profile_request(self, output_dir: str, steps: int, profile_id: str, cpu: bool) -> Optional[HttpRequest]:
        """The POST that starts a kernel profile of the next `steps` forward steps (None: the engine has none)."""
        ...


def read_infos(source: ServerInfoSource, base_url: str, version: Optional[str],
               timeout_s: float = 10.0, paths: Optional[Mapping[str, str]] = None) -> dict[str, JsonValue]:
    """Every info document the engine names (or `paths`: name → GET path), as parsed by it; one that cannot be read
    is recorded as {"error": why}, never fatal (an info endpoint missing is evidence, not a failed start)."""
    infos: dict[str, JsonValue] = {}
    for name, path in (source.info_paths(version) if paths is None else paths).items():
        try:
            infos[name] = source.parse_info(name, http_get_json(base_url + path, timeout_s=timeout_s,
                                                                headers=source.headers))
        except Exception as e:  # noqa: BLE001 - an info endpoint missing is recorded, not fatal
            infos[name] = {"error": f"{type(e).__name__}: {e}"}
    return infos


def cap_log_lines(source: ServerInfoSource, log_path: Path, max_bytes: int = 4 << 20) -> list[str]:
    """The last four startup log lines naming a lowered concurrency cap (the engine's cap_log_marker), read from the
    first `max_bytes` of the server log only."""
    marker = source.cap_log_marker
    if marker is None:
        return []
    try:
        with open(log_path, "rb") as f:
            head = f.read(max_bytes).decode("utf-8", "replace")
    except OSError:
        return []
    return [line.strip() for line in head.splitlines() if marker in line][-4:]
