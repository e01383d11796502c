"""What the Ray cluster looks like (GPU nodes), the dataset root, and the preflight probe run on a GPU node."""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from cluster.config.experiment import ExperimentSpec
from cluster.errors import EnvironmentFault
from cluster.kernel.deadlines import RAY_JOIN

if TYPE_CHECKING:
    from cluster.node.preflight import NodePreflight
    from cluster.probe.checkpoint import ProbeReport


class RuntimeEnvFault(EnvironmentFault):
    """Ray could not set up a task's runtime environment (the job's working_dir package, its env vars) on a node."""


PREFLIGHT_RUNTIME_ENV_TRIES = 2
"""A runtime-env setup failure of the probe task is tried once more: Ray 2.60 has a known, rare race in which a
job's working_dir package is gone from the GCS and the node a few seconds after upload (ray-project/ray#36703,
seen once in this project's CI under `sglbench submit`); a second failure is the cluster's, said as such."""


@dataclass(frozen=True)
class GpuNode:
    """An alive Ray node with at least one GPU, as ray.nodes() lists it."""

    node_id: str
    address: Optional[str]
    """NodeManagerAddress."""
    gpus: int
    cpus: float


def gpu_nodes() -> list[GpuNode]:
    """Alive nodes with at least one GPU: node id, address, GPU and CPU counts."""
    out = []
    for n in ray.nodes():
        if not n.get("Alive"):
            continue
        res = n.get("Resources", {})
        gpus = int(res.get("GPU", 0))
        if gpus <= 0:
            continue
        out.append(GpuNode(node_id=n["NodeID"], address=n.get("NodeManagerAddress"), gpus=gpus,
                           cpus=res.get("CPU", 0)))
    return out


def _probe_on_node(spec_json: dict[str, Any], base_dir: str, output_root: Optional[str] = None) -> NodePreflight:
    """The Ray task: preflight on the GPU node (cluster/node/preflight.py), its record carried back as is."""
    from cluster.config.experiment import ExperimentSpec as _Spec
    from cluster.node.preflight import node_preflight

    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    return node_preflight(_Spec.model_validate(spec_json), Path(base_dir), output_root, _ray_ports())


def _ray_ports() -> dict[int, str]:
    """Ray's default ports and the running cluster's own GCS port."""
    from cluster.plan.inputs import RAY_PORTS

    ports = dict(RAY_PORTS)
    gcs = getattr(ray.get_runtime_context(), "gcs_address", None) or ""
    if gcs.rpartition(":")[2].isdigit():
        ports[int(gcs.rpartition(":")[2])] = "this Ray cluster's GCS server"
    return ports


def remote_preflight(spec: ExperimentSpec, base_dir: Path,
                     warn: Callable[[str], object] = lambda line: print(line, file=sys.stderr, flush=True),
                     output_root: Optional[str] = None) -> Optional[dict[str, ProbeReport]]:
    """Probe every checkpoint on a GPU node (weights often live only there) before any GPU is reserved; `warn` gets
    what could not be checked there (flags behind a launcher). Returns the probe report of each checkpoint path.
    Raises the probe's PreflightError (a ValueError) unchanged."""
    try:
        import cluster.node.preflight  # noqa: F401
    except ModuleNotFoundError:
        return None
    nodes = gpu_nodes()
    task = ray.remote(num_cpus=0, max_retries=0)(_probe_on_node)
    opts: dict[str, Any] = {"runtime_env": {"env_vars": {"CUDA_VISIBLE_DEVICES": ""}}}
    if nodes:
        opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(nodes[0].node_id, soft=False)
    for attempt in range(1, PREFLIGHT_RUNTIME_ENV_TRIES + 1):
        try:
            answer: NodePreflight = ray.get(task.options(**opts).remote(spec.model_dump(mode="json"),
                                                                        str(base_dir), output_root))
            break
        except ray.exceptions.RayTaskError as e:
            cause = getattr(e, "cause", None)
            if isinstance(cause, (ValueError, EnvironmentFault)):  # an endpoint unreachable from the node: exit 3
                raise cause from None
            raise
        except ray.exceptions.RuntimeEnvSetupError as e:
            if attempt == PREFLIGHT_RUNTIME_ENV_TRIES:
                raise RuntimeEnvFault(
                    f"Ray could not set up the runtime environment of the checkpoint probe ({attempt} tries), before "
                    "any GPU was reserved; nothing was measured or written. Ray said: "
                    + (e.error_message or "nothing more").strip().splitlines()[-1]
                    + ". Resubmit; if it repeats, check the job's working_dir and the Ray cluster's health") from None
            warn(f"the checkpoint probe's runtime environment could not be set up (try {attempt}); trying again")
    for line in answer.warnings:
        warn(line)
    return answer.reports


AUTH_FAILURE_TEXT = "InvalidAuthToken"
"""What Ray 2.60's GCS client says when the cluster refuses a missing or wrong token (RPC status text)."""


def reload_ray_auth_config() -> None:
    """Make this process see a RAY_AUTH_MODE set after Ray was imported: Ray caches its config and token at import
    (its own `_enable_token_auth` refreshes them the same way: Config.initialize, then the token cache)."""
    raylet = importlib.import_module("ray._raylet")
    config, loader = getattr(raylet, "Config", None), getattr(raylet, "AuthenticationTokenLoader", None)
    if config is None or loader is None:  # a Ray without token auth: nothing cached
        return
    config.initialize("")
    loader.instance().reset_cache()


_JOIN_KNOBS = ("RAY_gcs_rpc_server_connect_timeout_s", "RAY_py_gcs_connect_timeout_s", "RAY_gcs_server_port_wait_time_s")
"""Ray 2.60's knobs of its GCS connect loop (ray/_private/node.py `_init_gcs_client`): each try waits
gcs_rpc_server_connect_timeout_s for the GCS channel and as long again for its pubsub channel, then
py_gcs_connect_timeout_s for the cluster id, then sleeps 1 s; gcs_server_port_wait_time_s is the number of tries.
Left alone, that is 20 tries of 5 + 5 + 30 + 1 s: about 14 minutes on a port nothing answers."""


def ray_join_knobs(deadline_s: float) -> dict[str, str]:
    """The knob values that fit Ray's connect tries into `deadline_s` (they are whole seconds, so one try is at
    least 4 s: a shorter deadline still gets that one try)."""
    step_s = max(1, int(deadline_s // 8))
    tries = max(1, int(deadline_s // (3 * step_s + 1)))
    return dict(zip(_JOIN_KNOBS, (str(step_s), str(step_s), str(tries))))


def _check_answers(address: str, deadline_s: float) -> None:
    """A fast first check that something accepts TCP connections at `host:port` (`auto` is resolved by Ray): a
    closed port is refused at once instead of after Ray's tries. The name lookup and the connection share one
    limit (getaddrinfo takes no timeout of its own)."""
    import socket
    import time

    from cluster.engines.http_call import resolve_within
    from cluster.errors import EnvironmentFault

    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    limit_s = min(deadline_s, 10.0)
    ends_s = time.monotonic() + limit_s
    try:
        infos = resolve_within(host.strip("[]"), int(port), ends_s)
        if infos is None:
            why = f"resolving {host!r} did not finish within {limit_s:g} s"
        else:
            last: OSError = OSError(f"no address for {host}")
            for family, kind, proto, _, addr in infos:
                with socket.socket(family, kind, proto) as sock:
                    sock.settimeout(max(0.001, ends_s - time.monotonic()))
                    try:
                        sock.connect(addr)
                        return
                    except OSError as e:
                        last = e
            raise last
    except socket.timeout:
        why = f"no answer to a TCP connection within {limit_s:g} s"
    except OSError as e:
        why = f"{e.strerror or type(e).__name__} (a TCP connection to {host}:{port})"
    raise EnvironmentFault(f"cannot join the Ray cluster at {address}: {why}; is its head node up, and is this "
                           "its GCS port (6379 by default) or, with ray://, its client server port (10001)?")


def join_cluster(address: str, note: Callable[[str], object] = lambda line: print(line, file=sys.stderr, flush=True),
                 ) -> None:
    """`ray.init(address=...)` to a running cluster: token mode when only the token is given (said in one line), and
    a cluster that refuses us for want of a token is an AuthError saying exactly what to set, not a traceback."""
    from cluster.distributed.jobs import auth_instruction, token_auth_env
    from cluster.errors import AuthError, EnvironmentFault

    deadline_s = RAY_JOIN.seconds()
    _check_answers(address, deadline_s)
    updates, line = token_auth_env(os.environ)
    if line:
        os.environ.update(updates)
        note(line)
    saved = {k: os.environ.get(k) for k in _JOIN_KNOBS}
    os.environ.update(ray_join_knobs(deadline_s))
    reload_ray_auth_config()  # Ray reads its auth mode and these knobs from the environment when it initialises
    try:
        ray.init(address=address, log_to_driver=True)
    except (ray.exceptions.AuthenticationError, ConnectionError) as e:
        # without RAY_AUTH_MODE Ray retries, then raises ConnectionError from node.py's RuntimeError, which carries
        # the GCS client's AuthenticationError only as text ("Last connection error: ..."): look down the chain
        chain: list[BaseException] = []
        link: Optional[BaseException] = e
        while link is not None and len(chain) < 8:
            chain.append(link)
            link = link.__cause__ or link.__context__
        if not any(isinstance(x, ray.exceptions.AuthenticationError) or AUTH_FAILURE_TEXT in str(x) for x in chain):
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise EnvironmentFault(f"cannot join the Ray cluster at {address} within its {deadline_s:g} s deadline "
                                   f"({RAY_JOIN.env}): {first}") from None
        refused = bool(os.environ.get("RAY_AUTH_TOKEN", "").strip() or os.environ.get("RAY_AUTH_TOKEN_PATH"))
        raise AuthError(auth_instruction(address, refused=refused), field="RAY_AUTH_TOKEN",
                        expected="the cluster's Ray auth token") from None
    finally:  # the knobs were for the join: children of this driver get the environment it was given
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
