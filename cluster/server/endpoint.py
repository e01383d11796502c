"""An endpoint already running, as the server of a segment: reached, recorded and watched for a restart, never
launched, flushed without leave or killed."""

from __future__ import annotations

import time
from typing import Optional

from cluster.engines.base import Engine
from cluster.engines.http_call import call
from cluster.errors import EngineFault, EnvironmentFault
from cluster.input_files import JsonValue
from cluster.server.engine_server import read_infos

REACH_TIMEOUT_S = 10.0
"""How long one health call to an endpoint may take (it is already running: no start to wait for)."""


def endpoint_status(engine: Engine, url: str, timeout_s: float = REACH_TIMEOUT_S) -> tuple[int, Optional[str]]:
    """(status, why not healthy) of the endpoint's health check: (200, None) when it answers 200; status 0 when no
    answer came (refused, timed out, not HTTP)."""
    try:
        reply = call(url, engine.health_path, headers=engine.headers, timeout_s=timeout_s)
    except (EngineFault, EnvironmentFault) as e:
        return 0, str(e)
    return reply.status, None if reply.status == 200 else f"GET {url}{engine.health_path} answered {reply.status}"


def endpoint_health(engine: Engine, url: str, timeout_s: float = REACH_TIMEOUT_S) -> Optional[str]:
    """Why the endpoint does not answer its health check with 200 (refused, timed out, another status), or None."""
    return endpoint_status(engine, url, timeout_s)[1]


class EndpointServer:
    """The EngineActor's view of an endpoint: its health, what it says about itself, whether it restarted."""

    def __init__(self, engine: Engine, url: str) -> None:
        self.engine = engine
        self.url = url
        self.first_mark: Optional[str] = None
        """The restart mark when it was first checked (the gate and every run are measured against that start)."""

    def attach(self, timeout_s: float) -> tuple[dict[str, JsonValue], float]:
        """Wait up to `timeout_s` for a 200 health answer (EnvironmentFault naming the URL otherwise), then read its
        info documents and /v1/models; (infos, seconds waited)."""
        t0 = time.monotonic()
        while True:
            why = endpoint_health(self.engine, self.url, min(REACH_TIMEOUT_S, max(1.0, timeout_s)))
            if why is None:
                break
            if time.monotonic() - t0 >= timeout_s:
                raise EnvironmentFault(f"endpoint {self.url} is unreachable: {why}")
            time.sleep(0.5)
        infos = self.infos()
        self.first_mark = self.engine.start_mark(infos)
        return infos, time.monotonic() - t0

    def infos(self) -> dict[str, JsonValue]:
        return read_infos(self.engine, self.url, None, paths=self.engine.endpoint_info_paths(None))

    def alive(self) -> bool:
        return endpoint_health(self.engine, self.url) is None

    def restart_reason(self) -> Optional[str]:
        """Why the runs measured now are not on the server first checked (its restart mark changed), or None; a
        server that gives no mark cannot be judged (None)."""
        if self.first_mark is None:
            return None
        key = self.engine.restart_mark
        now = self.engine.start_mark(read_infos(self.engine, self.url, None))
        if now is None or now == self.first_mark:
            return None
        where = f"{key[0]}.{key[1]}" if key else "its restart mark"
        return (f"endpoint {self.url} restarted under the run: its {where} changed from {self.first_mark} to {now} "
                "(the server measured is not the one checked at the start and gated)")
