"""Submit, follow and stop sglbench experiments through Ray's job API (a thin JobSubmissionClient wrapper)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Mapping, Optional

from ray.exceptions import AuthenticationError
from ray.job_submission import JobStatus, JobSubmissionClient

from cluster.config.secrets import is_secret_name
from cluster.errors import AuthError, EnvironmentFault, UserError, first_line
from cluster.input_files import JsonValue
from cluster.kernel.deadlines import JOB_API

DEFAULT_ADDRESS = "http://127.0.0.1:8265"
DEFAULT_TOKEN_ENV = "RAY_AUTH_TOKEN"
DRIVER_MODULE = "cluster.distributed.driver"
WORKING_DIR_EXCLUDES = (
    "/results/", "/.ci/", "/.git/", "/venv/", ".venv*/", "__pycache__/", "*.pyc", "*.parquet",
    ".pytest_cache/", ".mypy_cache/", ".hypothesis/", "/build/", "/dist/", "*.egg-info/", "/.whl/", "/tmp/",
)
"""Never uploaded with the working dir: datasets, CI venvs and caches (the upload limit is small and they are big)."""
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class JobError(EnvironmentFault):
    """A job request that cannot be made, or a job API that cannot be reached: one line for the user."""


class JobRequestError(UserError, JobError):
    """A request the user must change (an --env pair, an experiment outside the working dir): exit code 2."""


class JobAuthError(AuthError, JobError):
    """The cluster needs a token the named environment variable does not hold: exit code 2."""


@dataclass(frozen=True)
class JobRequest:
    """What `sglbench submit` sends: an experiment YAML run by the sglbench driver on the cluster."""

    experiment: str
    """The YAML's path as the cluster sees it (relative to working_dir when one is uploaded)."""
    working_dir: Optional[Path] = None
    env: Mapping[str, str] = field(default_factory=dict)
    output: Optional[str] = None
    """Dataset root override passed to the driver (`--output`)."""
    submission_id: Optional[str] = None

    def entrypoint_argv(self) -> list[str]:
        argv = ["python", "-m", DRIVER_MODULE, self.experiment]
        return argv + ["--output", self.output] if self.output else argv

    def entrypoint(self) -> str:
        # The job API takes a shell string; quote every word so paths with spaces stay one argument.
        return shlex.join(self.entrypoint_argv())

    def runtime_env(self) -> dict[str, JsonValue]:
        """Working dir and env vars only: no pip/conda/uv, dependencies are baked into the image or node."""
        env: dict[str, JsonValue] = {}
        if self.working_dir is not None:
            env["working_dir"] = str(self.working_dir)
            env["excludes"] = list(WORKING_DIR_EXCLUDES)
        if self.env:
            env["env_vars"] = dict(self.env)
        return env


def parse_env(pairs: list[str]) -> dict[str, str]:
    """`K=V` words → dict; refuses bad names and secrets (runtime-env vars are visible in the job's metadata)."""
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not _ENV_NAME.match(name):
            raise JobRequestError(f"--env {pair.split('=')[0]!r}: expected NAME=VALUE with NAME matching [A-Za-z_][A-Za-z0-9_]*")
        if is_secret_name(name):
            raise JobRequestError(f"--env {name}: secrets must not travel in the job's runtime env (it is stored and shown "
                           "by the dashboard); set them on the cluster (e.g. a Kubernetes Secret)")
        out[name] = value
    return out


def auth_headers(token_env: Optional[str], environ: Mapping[str, str], required: bool = False) -> dict[str, str]:
    """The bearer header for a token-authenticated cluster, read from the named env var (the value is never printed)."""
    if not token_env:
        return {}
    token = environ.get(token_env, "").strip()
    if not token:
        if required:
            raise JobAuthError(f"--token-env {token_env}: that environment variable is empty or not set")
        return {}
    return {"Authorization": f"Bearer {token}"}


def cluster_path(experiment: Path, working_dir: Optional[Path]) -> str:
    """The experiment's path as the job sees it: relative to the uploaded working dir, which must contain it."""
    if working_dir is None:
        return str(experiment)
    exp, wd = experiment.resolve(), working_dir.resolve()
    try:
        return exp.relative_to(wd).as_posix()
    except ValueError:
        raise JobRequestError(f"{experiment}: the experiment must be inside the working dir {working_dir} "
                       "(only the working dir is uploaded)") from None


AUTH_MODE_ENV = "RAY_AUTH_MODE"
TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"


def token_auth_env(environ: Mapping[str, str]) -> tuple[dict[str, str], Optional[str]]:
    """What joining a Ray cluster needs added to the environment, and the one line that says so.

    Ray sends the token in RAY_AUTH_TOKEN (or the file RAY_AUTH_TOKEN_PATH) only when RAY_AUTH_MODE=token is set
    too; with the token alone, `ray.init(address=...)` to a token-auth cluster fails with a long traceback. A token
    given and no mode chosen means token mode; a mode the user set (e.g. `disabled`) is left as it is."""
    has_token = bool(environ.get(DEFAULT_TOKEN_ENV, "").strip() or environ.get(TOKEN_PATH_ENV, "").strip())
    if not has_token or environ.get(AUTH_MODE_ENV):
        return {}, None
    which = DEFAULT_TOKEN_ENV if environ.get(DEFAULT_TOKEN_ENV, "").strip() else TOKEN_PATH_ENV
    return {AUTH_MODE_ENV: "token"}, f"note: {which} is set and {AUTH_MODE_ENV} is not: using {AUTH_MODE_ENV}=token"


def auth_instruction(address: str, token_env: str = DEFAULT_TOKEN_ENV, refused: bool = False) -> str:
    """Exactly what to set for a cluster that refused us for want of (or for a wrong) token."""
    if refused:
        return (f"the Ray cluster at {address} refused the token in {token_env}: set {token_env} to that cluster's "
                f"token (`ray get-auth-token` on its head node) and {AUTH_MODE_ENV}=token")
    return (f"the Ray cluster at {address} requires token authentication: set {token_env} to its token "
            f"(`ray get-auth-token` on its head node) and {AUTH_MODE_ENV}=token")


@contextlib.contextmanager
def _auth_errors(address: str, token_env: str) -> Iterator[None]:
    """Ray's AuthenticationError (401/403 from the job API) as a one-line JobAuthError naming the variable."""
    try:
        yield
    except AuthenticationError as e:
        refused = "invalid or incorrect" in str(e.message) or "failed" in str(e.message).split(":", 1)[0]
        raise JobAuthError(auth_instruction(address, token_env, refused), field=token_env,
                           expected="the cluster's Ray auth token") from None


class _BoundedJobSubmissionClient(JobSubmissionClient):
    """Ray's job client with a deadline on each HTTP request: Ray 2.60 passes `requests` no timeout
    (dashboard_sdk.py `_do_request`), so a job API that accepts and never answers held `submit` forever."""

    def __init__(self, address: str, timeout_s: float, **kwargs: object) -> None:
        self.timeout_s = timeout_s  # before Ray's __init__, whose version check is the first request
        super().__init__(address, **kwargs)  # type: ignore[arg-type]

    def _do_request(self, method: str, endpoint: str, **kwargs: object) -> object:
        import requests

        kwargs.setdefault("timeout", self.timeout_s)
        try:
            return super()._do_request(method, endpoint, **kwargs)  # type: ignore[arg-type]
        except requests.exceptions.Timeout:
            raise JobError(f"the Ray job API at {getattr(self, '_address', '?')} did not answer {method} {endpoint} "
                           f"within {self.timeout_s:g} s ({JOB_API.env})") from None


class JobClient:
    """JobSubmissionClient with sglbench's entrypoint, auth header, log following and one-line errors."""

    def __init__(self, address: str = DEFAULT_ADDRESS, headers: Optional[dict[str, str]] = None,
                 token_env: str = DEFAULT_TOKEN_ENV) -> None:
        self.address = address
        self._auth = lambda: _auth_errors(address, token_env)
        with self._auth():  # outside the try: a JobAuthError is a RuntimeError too
            try:
                self._client = _BoundedJobSubmissionClient(address, JOB_API.seconds(), headers=headers or None)
            except JobError:
                raise
            except ConnectionError as e:
                raise JobError(f"cannot reach the Ray job API at {address}: {first_line(e)}") from None
            except RuntimeError as e:
                raise JobError(f"Ray job API at {address} refused the connection: {first_line(e)}") from None

    def __repr__(self) -> str:
        return f"JobClient({self.address!r})"

    def submit(self, request: JobRequest, agent_wait_s: float = 60.0) -> str:
        """Submit; a head that has just started may have no job agent yet, so that one answer is retried."""
        deadline = time.monotonic() + agent_wait_s
        with self._auth():
            while True:
                try:
                    return str(self._client.submit_job(entrypoint=request.entrypoint(),
                                                       runtime_env=request.runtime_env(),
                                                       submission_id=request.submission_id,
                                                       metadata={"tool": "sglbench", "experiment": request.experiment}))
                except (RuntimeError, ValueError, ConnectionError) as e:
                    if "No available agent" in str(e) and time.monotonic() < deadline:
                        time.sleep(1.0)
                        continue
                    raise JobError(f"submitting {request.experiment} to {self.address} failed: "
                                   f"{first_line(e)}") from None

    def status(self, job_id: str) -> str:
        with self._auth():
            return str(JobStatus(self._client.get_job_status(job_id)).value)

    def logs(self, job_id: str) -> str:
        with self._auth():
            return str(self._client.get_job_logs(job_id))

    def stop(self, job_id: str) -> bool:
        with self._auth():
            try:
                return bool(self._client.stop_job(job_id))
            except RuntimeError as e:
                raise JobError(f"stopping {job_id} failed: {first_line(e)}") from None

    def wait(self, job_id: str, timeout_s: float, poll_s: float = 1.0) -> str:
        """Poll until the job is terminal; returns its status, raises JobError on timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            status = self.status(job_id)
            if status in TERMINAL:
                return status
            if time.monotonic() > deadline:
                raise JobError(f"job {job_id} still {status} after {timeout_s:.0f} s")
            time.sleep(poll_s)

    def follow(self, job_id: str, write: Callable[[str], object] = sys.stdout.write) -> str:
        """Stream the job's logs until it ends; returns its terminal status."""

        async def _tail() -> None:
            async for chunk in self._client.tail_job_logs(job_id):
                write(chunk)

        with self._auth():
            asyncio.run(_tail())
        return self.wait(job_id, timeout_s=60.0, poll_s=0.5)




def client_from_env(address: str, token_env: Optional[str] = DEFAULT_TOKEN_ENV, token_required: bool = False) -> JobClient:
    return JobClient(address, auth_headers(token_env, os.environ, required=token_required),
                     token_env or DEFAULT_TOKEN_ENV)
