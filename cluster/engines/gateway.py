"""SGLang's model gateway (`smg` 1.13.0, formerly sglang-router) as a dialect: its `smg launch` argv in regular and
prefill/decode mode, where its executable is, its readiness path, the header naming the worker that served a
request, and its per-worker Prometheus counters (measured: docs/deployments-facts.md §1)."""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from cluster.config.engines import EngineLauncher
from cluster.config.server import ArgValue
from cluster.engines.base import LaunchCommand
from cluster.engines.prometheus import parse_prometheus
from cluster.engines.sglang_dialect import flag_name, render_args
from cluster.errors import EnvironmentFault, UserError

GATEWAY_EXECUTABLE = "smg"
"""The console script of the `smg` package, installed beside the engine's interpreter (never in sglbench's own)."""
GATEWAY_HOST = "127.0.0.1"
"""Where the gateway and its metrics listen: beside the load actor that sends through it."""
READINESS_PATH = "/readiness"
"""200 once its workers are registered. Not /health: that answers 200 before any worker is (then /generate is a 404
model_not_found)."""
METRICS_PATH = "/metrics"
"""Served on the --prometheus-port listener, not the gateway's own port."""
LIVENESS_PATH = "/liveness"
"""200 as soon as the gateway's process serves."""
WORKERS_PATH = "/workers"
"""The registered workers: {"workers": [{"url", "worker_type": regular|prefill|decode, ...}]}."""
ERROR_CODE_HEADER = "x-smg-error-code"
"""Carried by the gateway's own error answers (instead of the routed-worker header)."""
ROUTED_WORKER_HEADER = "x-smg-routed-worker-id"
"""Response header naming the worker that served a proxied request: its URL as given to --worker-urls, or in PD mode
the decode server's as given to --decode (the one that streams the answer; measured on two simulator servers).
Absent on the gateway's own errors (those carry x-smg-error-code)."""
WORKER_REQUESTS_METRIC = "smg_worker_requests_total"
"""Requests sent to a worker (label `worker`: its URL), counted at each send: attempts, retries included; in PD mode
a request counts once on its prefill server and once on its decode server."""
RETRIES_METRIC = "smg_worker_retries_total"
"""Retries of a request on another worker (labels worker_type, endpoint); 0 throughout with --disable-retries."""

OWNED_FLAGS: frozenset[str] = frozenset({
    "--host", "--port", "--worker-urls", "--policy", "--prometheus-host", "--prometheus-port", "--disable-retries",
    "--pd-disaggregation", "--prefill", "--decode", "--prefill-policy", "--decode-policy",
    "--epd-disaggregation", "--encode", "--encode-policy",
})
"""Gateway flags sglbench sets from the deployment (its workers, mode, policy, retries, ports): refused in
`gateway_args`, where a second value would silently route elsewhere or collide."""


@dataclass(frozen=True)
class PrefillWorker:
    """A prefill server as the gateway's PD mode names it: its URL and its disaggregation bootstrap port."""

    url: str
    bootstrap_port: Optional[int]
    """None: the server has none (the gateway is told `none`)."""


@dataclass(frozen=True)
class GatewayCounters:
    """The gateway's own counts from one /metrics scrape (counters since it started)."""

    worker_requests: dict[str, float]
    """worker URL → requests sent to it (smg_worker_requests_total summed over its models)"""
    retries: float
    """smg_worker_retries_total summed over its labels"""


def gateway_beside(python: Optional[str]) -> str:
    """The `smg` in the bin directory of `python` (else of this interpreter). The interpreter's path is not resolved:
    a venv's python is a link to the base interpreter, whose bin directory holds no smg."""
    return os.path.join(os.path.dirname(python or sys.executable), GATEWAY_EXECUTABLE)


def gateway_program(launcher: Optional[EngineLauncher], declared: Optional[str] = None) -> str:
    """The `smg` to run: the one declared for the engine, else the one beside the engine's interpreter."""
    if declared:
        return declared
    return gateway_beside(launcher.python if launcher is not None and launcher.python else None)


def require_gateway(program: str) -> str:
    """`program` when it is an executable file; EnvironmentFault naming it and how to install it otherwise."""
    if os.path.isfile(program) and os.access(program, os.X_OK):
        return program
    raise EnvironmentFault(f"SGLang's gateway is not installed at {program}: install it into the engine's environment "
                           "(`<venv>/bin/python -m pip install --no-deps smg==1.13.0`, as scripts/setup_sglang_venv.sh "
                           "does) or declare its path for the engine")


def owned_flags_in(gateway_args: Mapping[str, ArgValue]) -> list[str]:
    """The flags of `gateway_args` that sglbench sets itself, as the gateway would read them."""
    return sorted({flag_name(k.lstrip("-")) for k in gateway_args} & OWNED_FLAGS)


def _check_args(gateway_args: Mapping[str, ArgValue]) -> None:
    owned = owned_flags_in(gateway_args)
    if owned:
        raise UserError(f"gateway_args sets {', '.join(owned)}, which sglbench sets from the deployment (its workers, "
                        "mode, policy, retries and ports)", field="deployment.gateway_args",
                        expected=f"no flag among {', '.join(sorted(OWNED_FLAGS))}")


def _tail(port: int, metrics_port: int, retries: bool, gateway_args: Mapping[str, ArgValue]) -> list[str]:
    """The flags every gateway gets after its workers and policy: where it and its metrics listen, retries, the
    user's own flags."""
    if port == metrics_port:
        raise ValueError(f"the gateway and its metrics cannot share port {port}")
    out = ["--host", GATEWAY_HOST, "--port", str(port),
           "--prometheus-host", GATEWAY_HOST, "--prometheus-port", str(metrics_port)]
    if not retries:
        out.append("--disable-retries")
    return out + render_args(gateway_args)


def regular_gateway(program: str, worker_urls: Sequence[str], policy: str, port: int, metrics_port: int,
                    retries: bool = False, gateway_args: Mapping[str, ArgValue] = {}) -> LaunchCommand:
    """`smg launch` over replicas: each request goes to one of `worker_urls`, chosen by `policy`."""
    _check_args(gateway_args)
    if not worker_urls:
        raise ValueError("a gateway needs at least one worker")
    argv = [program, "launch", "--worker-urls", *worker_urls, "--policy", policy]
    return LaunchCommand(argv=tuple(argv + _tail(port, metrics_port, retries, gateway_args)))


def pd_gateway(program: str, prefill: Sequence[PrefillWorker], decode_urls: Sequence[str], policy: str,
               port: int, metrics_port: int, prefill_policy: Optional[str] = None,
               decode_policy: Optional[str] = None, retries: bool = False,
               gateway_args: Mapping[str, ArgValue] = {}) -> LaunchCommand:
    """`smg launch` in PD mode: each request goes to a prefill server and a decode server (`policy` picks both
    unless `prefill_policy` / `decode_policy` override it)."""
    _check_args(gateway_args)
    if not prefill or not decode_urls:
        raise ValueError("a PD gateway needs at least one prefill and one decode server")
    argv = [program, "launch", "--pd-disaggregation"]
    for p in prefill:
        argv += ["--prefill", p.url, "none" if p.bootstrap_port is None else str(p.bootstrap_port)]
    for url in decode_urls:
        argv += ["--decode", url]
    argv += ["--policy", policy]
    if prefill_policy is not None:
        argv += ["--prefill-policy", prefill_policy]
    if decode_policy is not None:
        argv += ["--decode-policy", decode_policy]
    return LaunchCommand(argv=tuple(argv + _tail(port, metrics_port, retries, gateway_args)))


def gateway_counters(metrics_text: str) -> GatewayCounters:
    """Per-worker requests and retries from the gateway's /metrics text."""
    per_worker: dict[str, float] = {}
    retries = 0.0
    for name, labels, value in parse_prometheus(metrics_text):
        if math.isnan(value):
            continue
        if name == WORKER_REQUESTS_METRIC and "worker" in labels:
            per_worker[labels["worker"]] = per_worker.get(labels["worker"], 0.0) + value
        elif name == RETRIES_METRIC:
            retries += value
    return GatewayCounters(worker_requests=per_worker, retries=retries)
