"""A variant's `deployment: {kind, ...}`: what serves it when it is not one server sglbench launches (today the
`endpoint` kind: a deployment that is already running, reached by its URL)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Optional, Union
from urllib.parse import urlsplit

from pydantic import Discriminator, Tag, field_validator

from cluster.config.fields import FrozenModel

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


DEPLOYMENT_MODELS: dict[str, type[FrozenModel]] = {"endpoint": EndpointDeployment}
"""Deployment kind → its model."""


def _deployment_kind(v: Any) -> Optional[str]:
    kind = v.get("kind") if isinstance(v, dict) else getattr(v, "kind", None)
    return kind if isinstance(kind, str) and kind in DEPLOYMENT_MODELS else None


Deployment = Annotated[
    Union[Annotated[EndpointDeployment, Tag("endpoint")]],
    Discriminator(_deployment_kind, custom_error_type="deployment_kind",
                  custom_error_message="unknown deployment kind; expected one of: " + ", ".join(DEPLOYMENT_MODELS))]
"""A variant's `deployment: {kind, ...}`: one model per kind, so a misspelled field is refused with its name."""
