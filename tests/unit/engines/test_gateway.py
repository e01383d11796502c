"""SGLang's gateway dialect: the exact `smg launch` argv (regular and PD mode), refusal of the flags sglbench owns,
where smg is found, and its per-worker counters read from a /metrics text written here."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from cluster.config.engines import EngineLauncher
from cluster.engines.gateway import (
    READINESS_PATH, ROUTED_WORKER_HEADER, PrefillWorker, gateway_counters, gateway_program, pd_gateway,
    regular_gateway, require_gateway,
)
from cluster.errors import EnvironmentFault, UserError

A, B = "http://127.0.0.1:30001", "http://127.0.0.1:30002"


def test_regular_argv_is_exact() -> None:
    cmd = regular_gateway("/venv/bin/smg", [A, B], "cache_aware", port=40000, metrics_port=40001)
    assert cmd.argv == ("/venv/bin/smg", "launch", "--worker-urls", A, B, "--policy", "cache_aware",
                        "--host", "127.0.0.1", "--port", "40000",
                        "--prometheus-host", "127.0.0.1", "--prometheus-port", "40001", "--disable-retries")
    assert cmd.env == {}


def test_retries_allowed_drop_disable_retries_and_user_flags_follow_rendered_as_server_args() -> None:
    cmd = regular_gateway("smg", [A], "round_robin", port=1, metrics_port=2, retries=True,
                          gateway_args={"log_level": "info", "retry_max_retries": 2, "disable_circuit_breaker": True,
                                        "upstream_http2": False})
    assert cmd.argv == ("smg", "launch", "--worker-urls", A, "--policy", "round_robin", "--host", "127.0.0.1",
                        "--port", "1", "--prometheus-host", "127.0.0.1", "--prometheus-port", "2",
                        "--disable-circuit-breaker", "--log-level", "info", "--retry-max-retries", "2")


def test_pd_argv_is_exact() -> None:
    cmd = pd_gateway("smg", [PrefillWorker(A, 8998), PrefillWorker("http://127.0.0.1:30003", None)], [B],
                     "round_robin", port=40000, metrics_port=40001, decode_policy="power_of_two")
    assert cmd.argv == ("smg", "launch", "--pd-disaggregation",
                        "--prefill", A, "8998", "--prefill", "http://127.0.0.1:30003", "none",
                        "--decode", B, "--policy", "round_robin", "--decode-policy", "power_of_two",
                        "--host", "127.0.0.1", "--port", "40000",
                        "--prometheus-host", "127.0.0.1", "--prometheus-port", "40001", "--disable-retries")


@pytest.mark.parametrize("key", ["port", "worker_urls", "worker-urls", "pd_disaggregation", "prometheus_port",
                                 "disable_retries", "policy", "decode", "--host"])
def test_flags_sglbench_owns_are_refused_by_name(key: str) -> None:
    with pytest.raises(UserError) as e:
        regular_gateway("smg", [A], "random", port=1, metrics_port=2, gateway_args={key: "x"})
    flag = "--" + key.lstrip("-").replace("_", "-")
    assert flag in str(e.value) and e.value.field == "deployment.gateway_args"
    with pytest.raises(UserError):
        pd_gateway("smg", [PrefillWorker(A, None)], [B], "random", port=1, metrics_port=2, gateway_args={key: 1})


def test_no_worker_and_one_port_for_both_listeners_are_bugs() -> None:
    with pytest.raises(ValueError):
        regular_gateway("smg", [], "random", port=1, metrics_port=2)
    with pytest.raises(ValueError):
        pd_gateway("smg", [], [B], "random", port=1, metrics_port=2)
    with pytest.raises(ValueError):
        regular_gateway("smg", [A], "random", port=5, metrics_port=5)


def test_smg_is_found_beside_the_engines_python_unresolved(tmp_path: Path) -> None:
    venv_py = tmp_path / "venv" / "bin" / "python"
    venv_py.parent.mkdir(parents=True)
    venv_py.symlink_to(sys.executable)  # a venv's python: a link whose target's directory holds no smg
    launcher = EngineLauncher(python=str(venv_py))
    assert gateway_program(launcher) == str(tmp_path / "venv" / "bin" / "smg")
    assert gateway_program(None) == os.path.join(os.path.dirname(sys.executable), "smg")
    assert gateway_program(launcher, declared="/opt/smg") == "/opt/smg"


def test_a_missing_smg_is_an_environment_fault_naming_its_path(tmp_path: Path) -> None:
    path = tmp_path / "smg"
    with pytest.raises(EnvironmentFault, match=str(path)):
        require_gateway(str(path))
    path.write_text("#!/bin/sh\n")
    with pytest.raises(EnvironmentFault):  # not executable
        require_gateway(str(path))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    assert require_gateway(str(path)) == str(path)


METRICS = f"""# HELP smg_worker_requests_total Requests dispatched to a worker by worker (URL) and model
# TYPE smg_worker_requests_total counter
smg_worker_requests_total{{worker="{A}",model="tiny"}} 7
smg_worker_requests_total{{worker="{B}",model="tiny"}} 5
smg_worker_requests_total{{worker="{B}",model="other"}} 1
smg_worker_requests_active{{worker="{A}",model="tiny"}} 3
# TYPE smg_worker_retries_total counter
smg_worker_retries_total{{worker_type="regular",endpoint="generate"}} 2
smg_worker_retries_total{{worker_type="regular",endpoint="chat"}} 1
smg_worker_retries_total{{worker_type="decode",endpoint="generate"}} 0
smg_worker_retries_exhausted_total{{worker_type="regular",endpoint="generate"}} 4
smg_worker_requests_total{{model="tiny"}} 9
"""


def test_counters_per_worker_and_retries() -> None:
    c = gateway_counters(METRICS)
    # A: 7; B: 5 (tiny) + 1 (other) = 6; active requests and a sample without a worker label are not counted
    assert c.worker_requests == {A: 7.0, B: 6.0}
    # 2 + 1 + 0; retries_exhausted is another series
    assert c.retries == 3.0
    empty = gateway_counters("")
    assert empty.worker_requests == {} and empty.retries == 0.0


def test_wire_facts() -> None:
    assert ROUTED_WORKER_HEADER == "x-smg-routed-worker-id"
    assert READINESS_PATH == "/readiness"
