"""`sglbench doctor`: each check changes with the one fact it reads (facts fed as records), the exit codes, and the
real environment: a 1 MiB /dev/shm in a mount namespace, a low RLIMIT_NOFILE, a missing engine interpreter."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from cluster.node.checks import (
    GIB,
    CheckResult,
    NodeNeeds,
    check_checkpoint,
    check_clocksource,
    check_cpu,
    check_disks,
    check_engine,
    check_gpus,
    check_link_width,
    check_nofile,
    check_nvml,
    check_shm,
    check_topology,
    exit_code,
    run_checks,
)
from cluster.node.collect import collect, interpreter_fact
from cluster.node.facts import CheckpointFact, DiskFact, FactQuery, GatewayFact, GpuFact, InterpreterFact, NodeFacts
from tests.checkpoints import qwen35_nvfp4

REPO = Path(__file__).resolve().parents[3]

GPUS = tuple(GpuFact(index=i, bus_id=f"0000:0{i}:00.0", compute_cap="12.0", width_current=16, width_max=16)
             for i in range(8))
HEALTHY = NodeFacts(
    hostname="gpu-node", gpus=GPUS,
    nvml_ok=True, topology_text="\tGPU0\tGPU1\nGPU0\t X \tSYS\nGPU1\tSYS\t X \n",
    interpreter=InterpreterFact(path="/opt/sglang/bin/python", runs=True, sglang_importable=True,
                                sglang_version="0.5.23",
                                flashinfer_version="0.6.1", torch_version="2.9.1"),
    gateway=GatewayFact(path="/opt/sglang/bin/smg", runs=True, version="1.13.0"),
    checkpoint=CheckpointFact(path="/models/q", readable=True, mtp_verdict="present", mtp_weights_present=True,
                              tensors=1553),
    disks=(DiskFact(path="/data/results", measured_at="/data/results", free_bytes=500 * GIB, writable=True),),
    shm_bytes=64 * GIB, nofile_soft=65536, nofile_hard=65536, cpus=64, ray_node_cpus=64.0, ray_available_cpus=60.0,
    clocksource="tsc", clocksource_available=("tsc", "hpet", "acpi_pm"))
NEEDS = NodeNeeds(from_spec=True, gpus=8, sglang=True, sglang_version="0.5.23", target_version="0.5.23",
                  speculative=True, concurrency_per_actor=64, gateway=True, gateway_variants=("2xtp4",))


def _with(**update: Any) -> NodeFacts:
    return HEALTHY.model_copy(update=update)


def test_the_healthy_node_passes_every_check() -> None:
    results = run_checks(HEALTHY, NEEDS)
    assert [r.level for r in results] == ["ok"] * len(results), [r.line() for r in results]
    assert exit_code(results) == 0
    assert {r.name for r in results} == {"gpus", "nvml", "topology", "link-width", "engine", "gateway", "checkpoint",
                                         "disk", "shm", "open-files", "cpu", "clock"}


SMALL_GPU = GpuFact(index=3, bus_id="0000:03:00.0", compute_cap="12.0", width_current=4, width_max=16)
CASES: list[tuple[Callable[[NodeFacts, NodeNeeds], CheckResult], dict[str, Any], str, str]] = [
    (check_gpus, {"gpus": None, "gpus_reason": "nvidia-smi is absent"}, "fail", "unavailable: nvidia-smi is absent"),
    (check_gpus, {"cuda_visible_devices": "0,1"}, "fail", "2 of 8 GPU(s) visible"),
    (check_gpus, {"cuda_visible_devices": ""}, "fail", "0 of 8"),
    (check_gpus, {"gpus": GPUS[:7] + (GpuFact(index=7, compute_cap="9.0"),)}, "warning", "mixed GPUs"),
    (check_nvml, {"nvml_ok": False, "nvml_reason": "nvmlInit failed: Driver Not Loaded"}, "warning",
     "unavailable: nvmlInit failed"),
    (check_topology, {"topology_text": None, "topology_reason": "nvidia-smi topo -m failed"}, "warning",
     "unavailable: nvidia-smi topo -m failed"),
    (check_link_width, {"gpus": GPUS[:3] + (SMALL_GPU,) + GPUS[4:]}, "warning", "GPU 3 x4 of x16"),
    (check_engine, {"interpreter": InterpreterFact(path="/nope/python", runs=False, reason="no such interpreter")},
     "fail", "/nope/python: no such interpreter"),
    (check_engine, {"interpreter": HEALTHY.interpreter.model_copy(update={"sglang_version": None})}, "fail",  # type: ignore[union-attr]
     "sglang absent"),
    (check_engine, {"interpreter": HEALTHY.interpreter.model_copy(update={"sglang_importable": False})},  # type: ignore[union-attr]
     "fail", "does not find the package"),
    (check_engine, {"interpreter": HEALTHY.interpreter.model_copy(update={"sglang_version": "0.5.9"})}, "fail",  # type: ignore[union-attr]
     "declares 0.5.23"),
    (check_engine, {"interpreter": HEALTHY.interpreter.model_copy(update={"flashinfer_version": None})},  # type: ignore[union-attr]
     "warning", "flashinfer absent"),
    (check_checkpoint, {"checkpoint": CheckpointFact(path="/models/q", readable=False, reason="no config.json")},
     "fail", "no config.json"),
    (check_checkpoint, {"checkpoint": HEALTHY.checkpoint.model_copy(  # type: ignore[union-attr]
        update={"mtp_weights_present": False, "mtp_verdict": "declared_but_absent"})}, "fail", "needs MTP weights"),
    (check_shm, {"shm_bytes": 64 << 20}, "warning", "/dev/shm is 64 MiB"),
    (check_shm, {"shm_bytes": None, "shm_reason": "/dev/shm: No such file or directory"}, "warning", "unavailable"),
    (check_nofile, {"nofile_soft": 256}, "warning", "ulimit -n 320"),
    (check_nofile, {"nofile_soft": 256, "nofile_hard": 256}, "fail", "raise the hard limit"),
    (check_cpu, {"ray_node_cpus": 0.0}, "fail", "Ray node has 0 CPU"),
    (check_cpu, {"ray_available_cpus": 0.0}, "warning", "placement waits"),
    (check_cpu, {"ray_node_cpus": None, "ray_available_cpus": None, "cpus": 1}, "warning", "1 CPU(s)"),
    (check_clocksource, {"clocksource": "hpet"}, "warning", "echo tsc >"),
    (check_clocksource, {"clocksource": None, "clocksource_reason": "not readable"}, "warning", "unavailable"),
]


@pytest.mark.parametrize(("check", "update", "level", "text"), CASES,
                         ids=[f"{c.__name__}-{'-'.join(u)}-{i}" for i, (c, u, _, _) in enumerate(CASES)])
def test_each_check_follows_the_one_fact_it_reads(check: Callable[[NodeFacts, NodeNeeds], CheckResult],
                                                   update: dict[str, Any], level: str, text: str) -> None:
    assert check(HEALTHY, NEEDS).level == "ok"
    got = check(_with(**update), NEEDS)
    assert got.level == level and text in got.line(), got.line()


def test_an_engine_started_by_a_launcher_command_has_no_interpreter_to_ask() -> None:
    from cluster.node.needs import needs_for, query_for
    from cluster.config.loader import parse_spec_text

    spec = parse_spec_text("""version: 1
name: x
model: {path: /models/q, engine: sglang}
engines: {sglang: {launcher: [sglang, serve]}}
variants: [{name: baseline}]
workloads: [{name: w, input_tokens: 8, output_tokens: 8, num_requests: 2, prompts: {source: random_ids}}]
load: {concurrency: [1]}
""")
    needs = needs_for(spec)
    assert query_for(spec, None, Path("/tmp")).python is None and needs.sglang_launcher
    got = check_engine(_with(interpreter=None), needs)
    assert got.level == "info" and "engines.sglang.launcher" in got.message
    assert check_engine(_with(interpreter=None), NEEDS).level == "fail"


@pytest.mark.parametrize(("free", "writable", "level"), [(5 * GIB, True, "warning"), (500 * GIB, False, "fail"),
                                                         (None, False, "fail")])
def test_disk_checks_free_space_and_writability(free: Any, writable: bool, level: str) -> None:
    disk = DiskFact(path="/data/results", measured_at="/data", free_bytes=free, writable=writable,
                    reason=None if free else "Permission denied")
    (got,) = check_disks(_with(disks=(disk,)), NEEDS)
    assert got.level == level and "/data/results (on /data)" in got.line()


def test_without_an_experiment_a_missing_gpu_is_a_warning_and_sim_needs_none() -> None:
    cpu_box = _with(gpus=None, gpus_reason="nvidia-smi is absent or failed on this node", nvml_ok=False,
                    nvml_reason="nvidia-ml-py is not installed", topology_text=None, topology_reason="no nvidia-smi")
    assumed = run_checks(cpu_box, NodeNeeds())
    assert {r.name: r.level for r in assumed}["gpus"] == "warning" and exit_code(assumed) == 1
    sim = run_checks(cpu_box, NodeNeeds(from_spec=True, gpus=0, sglang=False))
    gpu_lines = [r for r in sim if r.name in ("gpus", "nvml", "topology", "link-width")]
    assert all(r.level == "info" and "unavailable: " in r.message for r in gpu_lines), [r.line() for r in sim]
    assert exit_code(sim) == 0
    assert exit_code(run_checks(cpu_box, NEEDS)) == 3


def _doctor(*args: str, preexec: Any = None, prefix: tuple[str, ...] = (), cwd: Path = REPO
            ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("SGLBENCH_SGLANG_VENV", None)
    return subprocess.run([*prefix, sys.executable, "-m", "cluster.cli", "doctor", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, preexec_fn=preexec, check=False)


def _line(out: str, name: str) -> str:
    return next(ln for ln in out.splitlines() if ln.split()[1:2] == [name])


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU machine: its GPU checks can pass")
def test_on_a_cpu_machine_every_gpu_check_says_unavailable_and_why() -> None:
    done = _doctor()
    assert done.returncode == 1, done.stdout + done.stderr
    for name in ("gpus", "nvml", "topology", "link-width"):
        assert "unavailable: " in _line(done.stdout, name), done.stdout
    assert len([ln for ln in done.stdout.splitlines()[1:] if ln.strip()]) >= 11


def test_a_small_dev_shm_in_a_mount_namespace_is_warned() -> None:
    if shutil.which("unshare") is None:
        pytest.skip("unshare is not installed")
    mount = "mount -t tmpfs -o size=1m tmpfs /dev/shm"
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", mount], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"a tmpfs in a mount namespace is not permitted here: {probe.stderr.strip()}")
    script = f"{mount} && exec {sys.executable} -m cluster.cli doctor"
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120, check=False)
    line = _line(done.stdout, "shm")
    assert line.startswith("warning") and "/dev/shm is 1 MiB" in line and "--shm-size" in line, done.stdout


def test_a_low_open_file_limit_is_reported() -> None:
    def low() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))

    done = _doctor(preexec=low)
    line = _line(done.stdout, "open-files")
    assert line.startswith("fail") and "open-file limit 128 (hard 128)" in line, done.stdout
    assert done.returncode == 3


def test_a_missing_interpreter_fails_the_engine_check(tmp_path: Path) -> None:
    model = qwen35_nvfp4(tmp_path / "model")
    spec = tmp_path / "x.yaml"
    spec.write_text(f"""version: 1
name: x
model: {{path: {model}, engine: sglang}}
engines: {{sglang: {{python: {tmp_path}/no-venv/bin/python}}}}
variants: [{{name: baseline}}]
workloads: [{{name: w, input_tokens: 8, output_tokens: 8, num_requests: 2, prompts: {{source: random_ids}}}}]
load: {{concurrency: [1]}}
""")
    done = _doctor(str(spec), cwd=tmp_path)
    assert _line(done.stdout, "engine").startswith(f"fail    engine      {tmp_path}/no-venv/bin/python: no such "
                                                    "interpreter"), done.stdout
    assert _line(done.stdout, "checkpoint").startswith("ok") and done.returncode == 3


def test_this_interpreter_answers_the_real_version_script() -> None:
    got = interpreter_fact(sys.executable)
    assert got.runs and got.sglang_importable is (got.sglang_version is not None)  # this venv has no sglang


def test_interpreter_versions_come_from_its_own_metadata(tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text('#!/bin/sh\necho \'{"sglang": "0.5.23", "flashinfer": null, "torch": "2.9.1"}\'\n')
    fake.chmod(0o755)
    got = interpreter_fact(str(fake))
    assert got.runs and got.sglang_version == "0.5.23" and got.flashinfer_version is None
    assert not got.sglang_importable  # the answer did not say `import sglang` finds it
    broken = tmp_path / "broken"
    broken.write_text("#!/bin/sh\necho 'Traceback: boom' >&2\nexit 1\n")
    broken.chmod(0o755)
    bad = interpreter_fact(str(broken))
    assert not bad.runs and bad.reason is not None and "boom" in bad.reason


def test_collect_reads_this_machine_and_survives_the_ray_boundary(tmp_path: Path) -> None:
    facts = collect(FactQuery(disk_paths=(str(tmp_path / "not" / "yet"),), clocksource_dir=str(tmp_path)))
    assert facts.disks[0].measured_at == str(tmp_path) and facts.disks[0].writable
    assert facts.clocksource is None and facts.clocksource_reason and "not readable" in facts.clocksource_reason
    assert NodeFacts.model_validate_json(facts.model_dump_json()) == facts  # what the pinned Ray task sends back
    query = FactQuery(python="/opt/python", disk_paths=("/a", "/b"))
    assert FactQuery.model_validate_json(query.model_dump_json()) == query



def test_a_fact_with_control_characters_stays_one_printable_line() -> None:
    """Fuzz finding (tests/fuzz/test_fuzz_doctor_facts.py): a reason or path with a newline or an escape sequence (an
    error text a node sent back) split a check over lines or recoloured the terminal."""
    bad = CheckpointFact(path="/models/q\nx", readable=False, reason="no config.json\x1b[2J\r")
    line = check_checkpoint(_with(checkpoint=bad), NEEDS).line()
    assert line.isprintable() and "\\n" in line and "\\x1b" in line and "\\r" in line


def test_a_deeply_nested_interpreter_answer_is_an_interpreter_that_failed(tmp_path: Path) -> None:
    """Fuzz finding: an interpreter printing 5,000 nested brackets made json.loads raise RecursionError, which
    escaped `doctor` as a bug (exit 70)."""
    deep = tmp_path / "python"
    deep.write_text("#!/bin/sh\n" + f"printf '%s' '{'[' * 5000}{']' * 5000}'\n")
    deep.chmod(0o755)
    got = interpreter_fact(str(deep))
    assert not got.runs and got.reason is not None and got.reason.startswith("it ran but did not print the version")


def test_an_interpreter_that_prints_something_else_is_not_said_to_have_failed_with_exit_status_0(
        tmp_path: Path) -> None:
    """Before: a python wrapper printing a banner (or 50 MB of text) and exiting 0 read 'it failed: exit status 0'."""
    chatty = tmp_path / "python"
    chatty.write_text("#!/bin/sh\necho 'Welcome to the cluster image'\n")
    chatty.chmod(0o755)
    got = interpreter_fact(str(chatty))
    assert not got.runs and got.reason is not None
    assert "exit status 0" not in got.reason and "'Welcome to the cluster image'" in got.reason


@pytest.mark.parametrize("address", ["bogus://x", "x:y", "", "ray://", "127.0.0.1:99999", "ray://h:1/x", "local"])
def test_an_address_ray_cannot_join_is_refused_before_ray_is_touched(address: str) -> None:
    """Ray's own parser raised a bare RuntimeError ('Module: bogus does not exist') or ValueError: exit 70."""
    from typer.testing import CliRunner

    from cluster.cli import app

    result = CliRunner().invoke(app, ["doctor", "--address", address])
    assert result.exit_code == 2, result.output
    assert "--address" in result.output and "host:port" in result.output and "bug in sglbench" not in result.output


@pytest.mark.parametrize("output, said", [("ftp://x/y", "URI scheme 'ftp'"), ("", "--output is empty"),
                                          ("/tmp/a\nb", "a newline"), ("/tmp/a\x01b", "U+0001")])
def test_an_output_a_run_could_not_use_is_refused_like_the_spec_refuses_it(output: str, said: str) -> None:
    """Before: a control character or an unknown scheme was checked for free space (or skipped) and passed."""
    from typer.testing import CliRunner

    from cluster.cli import app

    result = CliRunner().invoke(app, ["doctor", "--output", output])
    assert result.exit_code == 2, result.output
    assert said in result.output


def test_an_output_that_is_a_file_or_device_is_named_as_such_not_as_unwritable(tmp_path: Path) -> None:
    """Before: a file (or /dev/null) as the dataset root was reported 'not writable', the wrong cause."""
    f = tmp_path / "experiment.yaml"
    f.write_text("x")
    for path, kind in ((f, "a file"), (f / "sub", "a file"), (Path("/dev/null"), "a character device")):
        (line,) = check_disks(_with(disks=(collect(FactQuery(disk_paths=(str(path),))).disks[0],)), NEEDS)
        assert line.level == "fail" and f"is {kind}, not a directory" in line.message, line
        assert "not writable" not in line.message
