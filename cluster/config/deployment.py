"""A variant's `deployment: {kind, ...}`: what serves it when it is not one server sglbench launches: replicas
behind SGLang's gateway, prefill/decode pools behind it, one server across nodes, or an endpoint already running."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Optional, Union
from urllib.parse import urlsplit

from pydantic import Discriminator, Field, Tag, field_validator, model_validator

from cluster.config import bounds as B
from cluster.config.fields import FieldProblem, FrozenModel
from cluster.config.server import ArgValue, _arg_shapes, _check_args, _check_env

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class EndpointDeployment(FrozenModel):
    """A deployment already running (a production gateway, another team's server): sglbench launches nothing, kills
    nothing, reserves no GPU for it and flushes its cache only when `flush_cache` allows it; each run records what its
    /server_info (where the engine has one) and /v1/models answer, and is marked as not launched by sglbench."""

    kind: Literal["endpoint"] = "endpoint"
    """Deployment kind: an endpoint that is already running."""
    url: str
    """Its base URL, http:// or https:// with a host (and a port, a path prefix): requests go to <url>/generate,
    <url>/v1/completions, ...; no user:password, query or fragment (put a key in api_key_env)."""
    api_key_env: Optional[str] = None
    """The environment variable (on the machine that runs `sglbench run`) that holds its API key, sent as
    `Authorization: Bearer <key>`; the key itself is never printed or stored (default: no key)."""
    flush_cache: bool = False
    """Whether sglbench may flush its cache (/flush_cache) before each measured window; by default it does not,
    so a window may meet prefix-cache entries of the warmup or of other users."""

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"url {v!r} is not an http:// or https:// URL with a host (expected e.g. "
                             "http://10.0.0.5:30000)")
        if parts.username is not None or parts.password is not None:
            raise ValueError("url carries a user or password: give the key through api_key_env, so it is never "
                             "written with the experiment")
        if parts.query or parts.fragment:
            raise ValueError(f"url {v!r} has a query or fragment: expected the server's base URL")
        try:
            parts.port
        except ValueError:
            raise ValueError(f"url {v!r}: the port is not a TCP port (expected 1-65535)") from None
        return v.rstrip("/")

    @field_validator("api_key_env")
    @classmethod
    def _env(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not _ENV_NAME.match(v):
            raise ValueError(f"api_key_env {v!r} is not an environment variable name (expected [A-Za-z_][A-Za-z0-9_]*)")
        return v


GatewayPolicy = Literal["random", "round_robin", "cache_aware", "power_of_two", "least_load", "consistent_hashing",
                        "prefix_hash"]
"""How SGLang's gateway (smg 1.13.0 `--policy`) picks a worker for each request."""

GATEWAY_OWNED = ("host", "port", "worker-urls", "pd-disaggregation", "prefill", "decode", "policy", "prefill-policy",
                 "decode-policy", "prometheus-host", "prometheus-port", "disable-retries", "api-key")
"""Gateway flags sglbench sets itself (from the deployment's fields or the run): refused in gateway_args."""


def _gateway_args(v: dict[str, ArgValue]) -> dict[str, ArgValue]:
    _check_args(v)
    for k in v:
        if k.replace("_", "-") in GATEWAY_OWNED:
            raise ValueError(f"gateway_args.{k}: sglbench sets --{k.replace('_', '-')} itself (from the deployment's "
                             "fields or the run); leave it out")
    return v


class GatewayFields(FrozenModel):
    """What the deployments behind SGLang's gateway (`smg launch`, run beside the load actors) share."""

    policy: GatewayPolicy = "cache_aware"
    """The gateway's routing policy (smg --policy; its default is cache_aware)."""
    retries: bool = False
    """Whether the gateway may retry a failed request on another worker. Off by default (--disable-retries): a
    retried request's latency hides a failed attempt, and a worker that dies must fail the runs that met it, naming
    it, instead of being silently served around (the gateway notices a dead worker only after its health checks)."""
    gateway_args: dict[str, ArgValue] = Field(default_factory=dict)
    """More `smg launch` flags (without dashes), e.g. {cache_threshold: 0.5}; those sglbench sets are refused."""

    _gs = field_validator("gateway_args", mode="before")(classmethod(lambda cls, v: _arg_shapes(v)))
    _ga = field_validator("gateway_args")(classmethod(lambda cls, v: _gateway_args(v)))


class ReplicasDeployment(GatewayFields):
    """`replicas` servers of the variant (each with the variant's tp, args and env) behind SGLang's gateway."""

    kind: Literal["replicas"] = "replicas"
    """Deployment kind: replicas behind the gateway."""
    replicas: int = Field(ge=1, le=B.MAX_GPUS_PER_NODE * 16)
    """How many servers; each holds the variant's tp GPUs."""


class PoolSpec(FrozenModel):
    """One pool of a prefill/decode deployment: `servers` servers of `tp` GPUs each."""

    servers: int = Field(default=1, ge=1, le=B.MAX_GPUS_PER_NODE * 16)
    """How many servers in this pool."""
    tp: int = Field(ge=1, le=B.MAX_GPUS_PER_NODE)
    """Each server's tensor-parallel size."""
    args: dict[str, ArgValue] = Field(default_factory=dict)
    """Server flags for this pool's servers (without dashes), over the variant's args."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables for this pool's servers, over the variant's env."""

    _s = field_validator("args", mode="before")(classmethod(lambda cls, v: _arg_shapes(v)))
    _a = field_validator("args")(classmethod(lambda cls, v: _check_args(v)))
    _e = field_validator("env")(classmethod(lambda cls, v: _check_env(v)))


PD_OWNED = ("disaggregation-mode", "disaggregation-transfer-backend", "disaggregation-bootstrap-port", "tp-size",
            "tp", "port", "host")
"""Server flags a prefill/decode deployment sets from its own fields: refused in a pool's args."""


class PDDeployment(GatewayFields):
    """Prefill and decode pools (SGLang's --disaggregation-mode) behind SGLang's gateway in its PD mode."""

    kind: Literal["pd"] = "pd"
    """Deployment kind: prefill/decode disaggregation."""
    prefill: PoolSpec
    """The prefill pool."""
    decode: PoolSpec
    """The decode pool."""
    transfer_backend: Literal["mooncake", "nixl", "mori"] = "mooncake"
    """How KV moves from prefill to decode (--disaggregation-transfer-backend). `fake` is refused: SGLang 0.5.23's
    prefill server rejects it (it serves synthetic decode-only requests)."""
    bootstrap_port: Optional[int] = Field(default=None, ge=1, le=65535)
    """The prefill servers' bootstrap port (--disaggregation-bootstrap-port); default: a free port per prefill
    server, assigned at start (servers sharing a node need distinct ports)."""
    prefill_policy: Optional[GatewayPolicy] = None
    """The gateway's policy for prefill servers (default: policy)."""
    decode_policy: Optional[GatewayPolicy] = None
    """The gateway's policy for decode servers (default: policy)."""

    @field_validator("transfer_backend", mode="before")
    @classmethod
    def _not_fake(cls, v: Any) -> Any:
        if v == "fake":
            raise ValueError("transfer_backend fake cannot pair a prefill with a decode: SGLang 0.5.23's prefill server "
                             "refuses it (it serves synthetic decode-only requests); expected mooncake, nixl or mori")
        return v

    @model_validator(mode="after")
    def _pool_args(self) -> "PDDeployment":
        for pool in ("prefill", "decode"):
            for k in getattr(self, pool).args:
                if k.replace("_", "-") in PD_OWNED:
                    raise FieldProblem((pool, "args", k), f"{pool}.args.{k}: the deployment sets --"
                                       f"{k.replace('_', '-')} itself (from {pool}.tp, transfer_backend, "
                                       "bootstrap_port or the run); leave it out")
        return self


class NodesDeployment(FrozenModel):
    """One server across `nodes` nodes (SGLang's --nnodes, --node-rank, --dist-init-addr): one process per node,
    each holding tp / nodes GPUs."""

    kind: Literal["nodes"] = "nodes"
    """Deployment kind: one server across nodes."""
    nodes: int = Field(ge=2, le=1024)
    """How many nodes (processes); the variant's tp must be a multiple of it."""
    dist_init_port: Optional[int] = Field(default=None, ge=1, le=65535)
    """The port rank 0 listens on for the others (--dist-init-addr); default: a free port on rank 0's node."""


DEPLOYMENT_MODELS: dict[str, type[FrozenModel]] = {
    "endpoint": EndpointDeployment, "replicas": ReplicasDeployment, "pd": PDDeployment, "nodes": NodesDeployment}
"""Deployment kind → its model."""


def _deployment_kind(v: Any) -> Optional[str]:
    kind = v.get("kind") if isinstance(v, dict) else getattr(v, "kind", None)
    return kind if isinstance(kind, str) and kind in DEPLOYMENT_MODELS else None


Deployment = Annotated[
    Union[Annotated[EndpointDeployment, Tag("endpoint")], Annotated[ReplicasDeployment, Tag("replicas")],
          Annotated[PDDeployment, Tag("pd")], Annotated[NodesDeployment, Tag("nodes")]],
    Discriminator(_deployment_kind, custom_error_type="deployment_kind",
                  custom_error_message="unknown deployment kind; expected one of: " + ", ".join(DEPLOYMENT_MODELS))]
"""A variant's `deployment: {kind, ...}`: one model per kind, so a misspelled field is refused with its name."""

LaunchedDeployment = Union[ReplicasDeployment, PDDeployment, NodesDeployment]
"""A deployment of several processes that sglbench launches (every kind but the endpoint)."""
