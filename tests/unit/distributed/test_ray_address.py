"""A malformed Ray address (`run --address`, RAY_ADDRESS, the job driver's --address) is a user error naming where
it came from, before Ray parses it: Ray's parser raised bare RuntimeError/ValueError (exit 70) on `bogus://x`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cluster.errors import EXIT_USER_ERROR, UserError
from cluster.config.locations import check_ray_address

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("good", ["auto", "127.0.0.1:6379", "ray://head.example:10001", "[::1]:6379", "head:1"])
def test_a_joinable_address_is_kept(good: str) -> None:
    assert check_ray_address(good, "--address") == good


@pytest.mark.parametrize("bad", ["bogus://x", "x:y", "", "local", "head:0", "head:70000", "head", "ray://", "a b:1",
                                 "127.0.0.1:6379\n", "http://127.0.0.1:8265"])
def test_a_malformed_address_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="not a Ray cluster address"):
        check_ray_address(bad, "--address")


@pytest.mark.parametrize("address, env", [("bogus://x", None), (None, "x:y")], ids=["option", "RAY_ADDRESS"])
def test_init_ray_refuses_before_ray_parses_it(address: str | None, env: str | None,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    from cluster.distributed import driver

    if env is not None:
        monkeypatch.setenv("RAY_ADDRESS", env)
    joined: list[str] = []
    monkeypatch.setattr("cluster.distributed.cluster_state.join_cluster", lambda addr, *a, **k: joined.append(addr))
    if ray.is_initialized():
        pytest.skip("a Ray cluster is already up in this process")
    with pytest.raises(UserError) as e:
        driver.init_ray(address)
    assert e.value.field == ("--address" if address else "RAY_ADDRESS") and not joined


def test_run_with_a_malformed_address_exits_2_and_starts_no_ray(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "cluster.cli", "run", str(REPO / "experiments" / "demo-sim.yaml"),
                          "--address", "bogus://x", "--output", str(tmp_path), "--no-progress"],
                         capture_output=True, text=True, timeout=120, cwd=REPO,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0"})
    assert out.returncode == EXIT_USER_ERROR, out.stderr[-2000:]
    assert "--address 'bogus://x' is not a Ray cluster address" in out.stderr
    assert "bug in sglbench" not in out.stderr
