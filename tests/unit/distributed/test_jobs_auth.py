"""Token auth for `run --address` and `submit`: the decision what to set, and a 401/403 from the job API as one line."""

from __future__ import annotations

import threading
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import pytest

from cluster.distributed.jobs import JobAuthError, JobClient, token_auth_env
from cluster.errors import EXIT_USER_ERROR, exit_code_of


def test_only_the_token_set_means_token_mode_said_in_one_line() -> None:
    updates, note = token_auth_env({"RAY_AUTH_TOKEN": "t0k"})
    assert updates == {"RAY_AUTH_MODE": "token"}
    assert note == "note: RAY_AUTH_TOKEN is set and RAY_AUTH_MODE is not: using RAY_AUTH_MODE=token"
    assert "t0k" not in note
    assert token_auth_env({"RAY_AUTH_TOKEN_PATH": "/run/secrets/ray"})[0] == {"RAY_AUTH_MODE": "token"}


def test_a_mode_the_user_chose_or_no_token_changes_nothing() -> None:
    assert token_auth_env({"RAY_AUTH_TOKEN": "t", "RAY_AUTH_MODE": "disabled"}) == ({}, None)
    assert token_auth_env({"RAY_AUTH_TOKEN": "t", "RAY_AUTH_MODE": "token"}) == ({}, None)
    assert token_auth_env({}) == ({}, None)
    assert token_auth_env({"RAY_AUTH_TOKEN": "  "}) == ({}, None)


def _server(status: int, body: bytes) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


@pytest.fixture
def needs_token() -> Iterator[str]:
    """A job API that answers as a token-auth Ray dashboard does without a token (401)."""
    yield from _server(401, b"Unauthorized: Missing authentication token")


@pytest.fixture
def wrong_token() -> Iterator[str]:
    yield from _server(403, b"Forbidden: Invalid authentication token")


def test_a_job_api_that_needs_a_token_is_a_user_error_naming_the_variable(needs_token: str) -> None:
    with pytest.raises(JobAuthError) as info:
        JobClient(needs_token)
    msg = str(info.value)
    assert msg == (f"the Ray cluster at {needs_token} requires token authentication: set RAY_AUTH_TOKEN to its token "
                   "(`ray get-auth-token` on its head node) and RAY_AUTH_MODE=token")
    assert exit_code_of(info.value) == EXIT_USER_ERROR and "\n" not in msg
    with pytest.raises(JobAuthError, match="set MY_TOKEN to its token"):
        JobClient(needs_token, token_env="MY_TOKEN")


def test_a_refused_token_says_so_without_echoing_it(wrong_token: str) -> None:
    with pytest.raises(JobAuthError) as info:
        JobClient(wrong_token, headers={"Authorization": "Bearer s3cr3t-value"})
    assert str(info.value).startswith(f"the Ray cluster at {wrong_token} refused the token in RAY_AUTH_TOKEN")
    assert "s3cr3t" not in str(info.value)


def _join_raising(monkeypatch: pytest.MonkeyPatch, error: BaseException, env: dict[str, str]) -> BaseException:
    import ray

    from cluster.distributed import cluster_state

    for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.setenv(k, "")  # recorded, so join_cluster's own setting is undone after the test
        monkeypatch.delenv(k)
    for k, v in env.items():
        monkeypatch.setenv(k, v)

    def fake_init(**kwargs: object) -> None:
        raise error

    monkeypatch.setattr(ray, "init", fake_init)
    monkeypatch.setattr(cluster_state, "reload_ray_auth_config", lambda: None)
    monkeypatch.setattr(cluster_state, "_check_answers", lambda address, deadline_s: None)  # no TCP to 10.0.0.1
    notes: list[str] = []
    with pytest.raises(Exception) as info:
        cluster_state.join_cluster("10.0.0.1:6379", note=notes.append)
    return info.value


def _chained_auth_error() -> ConnectionError:
    from ray.exceptions import AuthenticationError

    # as Ray 2.60 raises it: worker.py's ConnectionError from node.py's RuntimeError, which holds the GCS client's
    # AuthenticationError only as the text of its last traceback
    try:
        raise AuthenticationError("RPC error: InvalidAuthToken: Authentication token is missing or incorrect")
    except AuthenticationError:
        last = traceback.format_exc()
    try:
        try:
            raise RuntimeError(f"Failed to connect to GCS.  Last 0 lines of error files: Last connection error: {last}")
        except RuntimeError as inner:
            raise ConnectionError("Failed to connect to Ray cluster at 10.0.0.1:6379") from inner
    except ConnectionError as outer:
        return outer


def test_join_without_a_token_is_an_auth_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from cluster.errors import AuthError

    err = _join_raising(monkeypatch, _chained_auth_error(), {})
    assert isinstance(err, AuthError) and exit_code_of(err) == EXIT_USER_ERROR
    assert str(err) == ("the Ray cluster at 10.0.0.1:6379 requires token authentication: set RAY_AUTH_TOKEN to its "
                        "token (`ray get-auth-token` on its head node) and RAY_AUTH_MODE=token")


def test_join_with_a_wrong_token_says_it_was_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from ray.exceptions import AuthenticationError

    err = _join_raising(monkeypatch, AuthenticationError("Authentication token is missing or incorrect"),
                        {"RAY_AUTH_TOKEN": "wrong-token", "RAY_AUTH_MODE": "token"})
    assert "refused the token in RAY_AUTH_TOKEN" in str(err) and "wrong-token" not in str(err)


def test_join_an_unreachable_cluster_is_an_environment_fault(monkeypatch: pytest.MonkeyPatch) -> None:
    from cluster.errors import EXIT_ENVIRONMENT

    err = _join_raising(monkeypatch, ConnectionError("Failed to connect to Ray cluster at 10.0.0.1:6379\nmore"), {})
    assert exit_code_of(err) == EXIT_ENVIRONMENT
    assert str(err) == ("cannot join the Ray cluster at 10.0.0.1:6379 within its 30 s deadline "
                        "(SGLBENCH_RAY_JOIN_TIMEOUT_S): Failed to connect to Ray cluster at 10.0.0.1:6379")


def test_join_with_only_the_token_sets_the_mode_first(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    import ray

    from cluster.distributed import cluster_state

    for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.setenv(k, "")  # recorded, so join_cluster's own setting is undone after the test
        monkeypatch.delenv(k)
    monkeypatch.setenv("RAY_AUTH_TOKEN", "t0ken-value")
    seen: list[str] = []
    reloaded: list[bool] = []
    monkeypatch.setattr(ray, "init", lambda **kw: seen.append(os.environ.get("RAY_AUTH_MODE", "")))
    monkeypatch.setattr(cluster_state, "reload_ray_auth_config", lambda: reloaded.append(True))
    monkeypatch.setattr(cluster_state, "_check_answers", lambda address, deadline_s: None)  # no TCP to 10.0.0.1
    notes: list[str] = []
    cluster_state.join_cluster("10.0.0.1:6379", note=notes.append)
    monkeypatch.setenv("RAY_AUTH_MODE", "")  # undone after the test like the rest
    assert seen == ["token"] and reloaded == [True]
    assert notes == ["note: RAY_AUTH_TOKEN is set and RAY_AUTH_MODE is not: using RAY_AUTH_MODE=token"]


def test_a_local_cluster_chooses_token_auth_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray 2.60 enables token auth on a new local cluster when RAY_AUTH_MODE is unset and warns on every run; the
    driver sets the same mode explicitly first, so auth stays on and the warning goes. An explicit mode is kept."""
    import os

    import ray

    from cluster.distributed import cluster_state, driver

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_AUTH_MODE", "")
    monkeypatch.delenv("RAY_AUTH_MODE")
    seen: list[str] = []
    reloaded: list[bool] = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: seen.append(os.environ.get("RAY_AUTH_MODE", "")))
    monkeypatch.setattr(cluster_state, "reload_ray_auth_config", lambda: reloaded.append(True))
    driver.init_ray(None)
    assert seen == ["token"] and reloaded == [True]
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    driver.init_ray(None)
    assert seen == ["token", "disabled"] and reloaded == [True]
