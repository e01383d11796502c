"""The GatewayActor: runs SGLang's model gateway (`smg launch`) in front of a deployment's servers, as a CPU process
beside the load actors; started once every server is healthy, ready when its /readiness says every worker is."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import ray

from cluster.config.engines import EngineLauncher
from cluster.engines.gateway import METRICS_PATH, READINESS_PATH, PrefillWorker, require_gateway
from cluster.kernel.run_facts import ServerFacts
from cluster.kernel.runs import ResolvedVariant
from cluster.plan.deployment import gateway_command
from cluster.server.process import ServerProcess, ServerStartError, free_port, http_get_json

GATEWAY_NAME = "gateway"
"""How the gateway is named among a deployment's processes (logs, facts, errors)."""


@dataclass(frozen=True)
class GatewayWorkers:
    """The servers the gateway routes to: replicas, or prefill servers (with bootstrap ports) and decode servers."""

    urls: tuple[str, ...] = ()
    prefill: tuple[PrefillWorker, ...] = ()
    decode: tuple[str, ...] = ()


class GatewayActorImpl:
    """Launches the gateway over the workers it is given; stops it (its process group) on stop."""

    def __init__(self, variant: ResolvedVariant, launcher: Optional[EngineLauncher], log_dir: str) -> None:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        self.variant = variant
        self.launcher = launcher
        self.log_dir = Path(log_dir)
        self.server: Optional[ServerProcess] = None
        self.base_url = ""
        self.metrics_url = ""

    def _command(self, workers: GatewayWorkers, port: int, metrics_port: int) -> Sequence[str]:
        cmd = gateway_command(self.variant, self.launcher, workers.urls, workers.prefill, workers.decode, port,
                              metrics_port)
        if cmd is None:
            raise ValueError(f"variant {self.variant.name}: its deployment has no gateway")
        require_gateway(cmd.argv[0])
        return cmd.argv

    def start(self, workers: GatewayWorkers, timeout_s: float) -> ServerFacts:
        """Launch it and wait until /readiness answers 200 (every worker registered and healthy): ServerStartError
        with its log tail when it exits or is not ready in `timeout_s`."""
        host = "127.0.0.1"
        port, metrics_port = free_port(host), free_port(host)
        while metrics_port == port:
            metrics_port = free_port(host)
        argv = list(self._command(workers, port, metrics_port))
        log_path = self.log_dir / f"{self.variant.name}-{GATEWAY_NAME}-{int(time.time() * 1000)}.log"
        env = dict(os.environ)
        env.pop("RAY_ADDRESS", None)
        self.server = ServerProcess(argv, env, log_path)
        t0 = time.time()
        self.server.start()
        self.base_url = f"http://{host}:{port}"
        self.metrics_url = f"http://{host}:{metrics_port}"
        try:  # the server wait (and its proof that the port is this gateway's): /readiness, not /health, which
            # answers 200 before any worker is registered
            self.server.wait_healthy(self.base_url, READINESS_PATH, timeout_s, port=port)
        except ServerStartError as e:
            self.server.stop(grace_s=5)
            raise ServerStartError(f"the gateway: {e}", self.server.log_tail(), e.server_exit_code,
                                   log_line=e.log_line) from None
        try:
            listed = http_get_json(self.base_url + "/workers", timeout_s=10.0)
        except Exception as e:  # noqa: BLE001 - evidence, not a failed start
            listed = {"error": f"{type(e).__name__}: {e}"}
        version = subprocess.run([argv[0], "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
        assert self.server.pid is not None
        return ServerFacts(
            pid=self.server.pid, pgid=self.server.pid, port=port, port_attempts=1, base_url=self.base_url, argv=argv,
            env={}, cuda_visible_devices="", gpu_ids=[], node_id=str(ray.get_runtime_context().get_node_id()),
            hostname=socket.gethostname(), startup_s=time.time() - t0, started_unix_s=t0,
            infos={"workers": listed, "version": version, "metrics_url": self.metrics_url + METRICS_PATH},
            resolved_args={}, log_path=str(log_path), server_pid=self.server.server_pid(),
            server_saw_cuda_visible_devices=None, environment={"gateway_version": version})

    def alive(self) -> bool:
        return self.server is not None and self.server.alive()

    def log_tail(self, max_bytes: int = 8000) -> str:
        return "" if self.server is None else self.server.log_tail(max_bytes)

    def stop(self) -> Optional[int]:
        return None if self.server is None else self.server.stop(grace_s=10.0)


GatewayActor = ray.remote(num_cpus=0, max_restarts=0, max_concurrency=4)(GatewayActorImpl)  # type: ignore[call-overload]
