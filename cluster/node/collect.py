"""Reads the node facts on this machine (never raises): nvidia-smi, NVML, the engine interpreter, the checkpoint probe,
statvfs of the output directories and /dev/shm, RLIMIT_NOFILE, CPU affinity and the kernel's clock source.

Every external read is bounded: subprocesses have timeouts, the interpreter is asked for package metadata only (no
`import sglang`/`import torch`, which take seconds), and the probe reads headers, not tensor data."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
from pathlib import Path
from typing import Callable, Optional

from cluster.input_files import symlink_loop_above
from cluster.node.facts import (CheckpointFact, DiskFact, FactQuery, GatewayFact, GpuFact, InterpreterFact,
                                ModuleFact, NodeFacts)

INTERPRETER_TIMEOUT_S = 30.0

_VERSIONS = r"""
import importlib.metadata as m, importlib.util as u, json
def v(*names):
    for n in names:
        try:
            return m.version(n)
        except Exception:
            pass
    return None
try:
    found = u.find_spec("sglang") is not None
except Exception:
    found = False
print(json.dumps({"sglang": v("sglang"), "flashinfer": v("flashinfer-python", "flashinfer"), "torch": v("torch"),
                  "sglang_found": found}))
"""
"""Package metadata, and whether `import sglang` would find the package (find_spec locates it without running it:
metadata alone outlives a half-removed install)."""


def _run(argv: list[str], timeout_s: float, missing: str) -> subprocess.CompletedProcess[str] | str:
    """The finished program, or why it could not run (`missing`: what to say when there is no such file)."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except FileNotFoundError:
        return missing
    except PermissionError:
        return "not executable"
    except subprocess.TimeoutExpired:
        return f"did not answer within {timeout_s:g} s"
    except OSError as e:
        return e.strerror or str(e)


def interpreter_fact(python: str, timeout_s: float = INTERPRETER_TIMEOUT_S) -> InterpreterFact:
    """SGLang / FlashInfer / torch versions as the interpreter's own package metadata has them."""
    done = _run([python, "-c", _VERSIONS], timeout_s, "no such interpreter")
    if isinstance(done, str):
        return InterpreterFact(path=python, runs=False, reason=done)
    return interpreter_answer(python, done.returncode, done.stdout, done.stderr)


def interpreter_answer(python: str, returncode: int, stdout: str, stderr: str) -> InterpreterFact:
    """The interpreter's answer to the version script, whatever it printed (its last stdout line is the report)."""
    from cluster.errors import UserError
    from cluster.input_files import parse_json

    lines = stdout.strip().splitlines()
    try:  # the bounded parser: a deeply nested answer would raise RecursionError from json.loads
        doc = parse_json(lines[-1], python, UserError, "the version report") if returncode == 0 and lines else None
    except UserError:
        doc = None
    if not isinstance(doc, dict) and returncode == 0:  # it ran, but printed something else than the report
        last = lines[-1] if lines else ""
        return InterpreterFact(path=python, runs=False, reason="it ran but did not print the version report (its "
                               f"last line: {last[:80]!r}{'...' if len(last) > 80 else ''})")
    if not isinstance(doc, dict):
        tail = (stderr.strip().splitlines() or [f"exit status {returncode}"])[-1]
        return InterpreterFact(path=python, runs=False, reason=f"it failed: {tail[:200]}")

    def ver(key: str) -> Optional[str]:
        got = doc.get(key)
        return got if isinstance(got, str) else None

    return InterpreterFact(path=python, runs=True, sglang_importable=doc.get("sglang_found") is True,
                           sglang_version=ver("sglang"),
                           flashinfer_version=ver("flashinfer"), torch_version=ver("torch"))


def gateway_fact(path: str, timeout_s: float = INTERPRETER_TIMEOUT_S) -> GatewayFact:
    """What `<path> --version` printed (SGLang's gateway: `smg 1.13.0`)."""
    from cluster.engines.deployment_needs import gateway_version

    done = _run([path, "--version"], timeout_s, "not installed (no such file)")
    if isinstance(done, str):
        return GatewayFact(path=path, runs=False, reason=done)
    version = gateway_version(done.stdout) if done.returncode == 0 else None
    if version is None:
        said = (done.stderr.strip() or done.stdout.strip()).splitlines() or [f"exit status {done.returncode}"]
        return GatewayFact(path=path, runs=False, reason=f"`--version` did not print its version: {said[-1][:200]}")
    return GatewayFact(path=path, runs=True, version=version)


_IMPORTS = r"""
import importlib, json, sys
out = {}
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
        out[name] = None
    except BaseException as e:
        out[name] = (type(e).__name__ + ": " + str(e)).strip().splitlines()[-1][:300] if str(e) else type(e).__name__
print(json.dumps(out))
"""
"""Each module imported for real (a compiled extension's missing system library shows only then), its error kept."""


def module_facts(python: str, modules: tuple[str, ...], timeout_s: float = INTERPRETER_TIMEOUT_S
                 ) -> tuple[ModuleFact, ...]:
    """Whether the interpreter imports each of `modules`."""
    def every(reason: str) -> tuple[ModuleFact, ...]:
        return tuple(ModuleFact(name=m, importable=False, reason=reason) for m in modules)

    done = _run([python, "-c", _IMPORTS, *modules], timeout_s, "no such interpreter")
    if isinstance(done, str):
        return every(f"{python}: {done}")
    lines = done.stdout.strip().splitlines()
    from cluster.errors import UserError
    from cluster.input_files import parse_json

    try:  # the bounded parser, as for the version report
        doc = parse_json(lines[-1], python, UserError, "the import report") if done.returncode == 0 and lines else None
    except UserError:
        doc = None
    if not isinstance(doc, dict):
        tail = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return every(f"{python} did not report its imports: {tail[:200]}")
    return tuple(ModuleFact(name=m, importable=m in doc and doc[m] is None,
                            reason=None if doc.get(m, "") is None else str(doc.get(m) or "not reported"))
                 for m in modules)


def checkpoint_fact(path: str) -> CheckpointFact:
    from cluster.errors import UserError
    from cluster.probe.checkpoint import probe_checkpoint

    try:
        report = probe_checkpoint(path)
    except UserError as e:
        return CheckpointFact(path=path, readable=False, reason=str(e))
    return CheckpointFact(path=path, readable=True, mtp_verdict=report.mtp.verdict,
                          mtp_weights_present=report.mtp.weights_present, tensors=report.tensor_count)


def disk_fact(path: str) -> DiskFact:
    """Free space where `path` will be created: its nearest existing ancestor is what statvfs can measure."""
    p = Path(path).expanduser().absolute()
    loop = symlink_loop_above(p)
    if loop is not None:
        return DiskFact(path=path, measured_at=str(loop), reason=f"{loop} is a symlink loop, so the directory can "
                        "never be reached")
    probe = p
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():  # a file or a device where the root (or a directory above it) should be
        kind = next((k for k, test in (("a file", probe.is_file), ("a character device", probe.is_char_device),
                                       ("a block device", probe.is_block_device), ("a FIFO", probe.is_fifo),
                                       ("a socket", probe.is_socket)) if test()), "not a directory")
        return DiskFact(path=path, measured_at=str(probe),
                        reason=f"{probe} is {kind}, not a directory, so the directory cannot be created there")
    try:
        st = os.statvfs(probe)
    except OSError as e:
        return DiskFact(path=path, measured_at=str(probe), reason=e.strerror or str(e))
    return DiskFact(path=path, measured_at=str(probe), free_bytes=st.f_bavail * st.f_frsize,
                    writable=os.access(probe, os.W_OK | os.X_OK))


def _read_text(path: str) -> Optional[str]:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read(4096)
    except OSError:
        return None


def _nvml() -> tuple[Optional[bool], Optional[str]]:
    from cluster.telemetry.nvml import TelemetryUnavailable, load_nvml

    try:
        nvml = load_nvml()
    except TelemetryUnavailable as e:
        return False, str(e)
    try:
        nvml.nvmlInit()
    except Exception as e:  # noqa: BLE001 - NVMLError_* (driver not loaded, library not found) are pynvml's own
        return False, f"nvmlInit failed: {e}"
    try:
        count = int(nvml.nvmlDeviceGetCount())
    except Exception as e:  # noqa: BLE001 - same
        return False, f"nvmlDeviceGetCount failed: {e}"
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001, S110 - shutting down a session that already failed
            pass
    return (True, None) if count > 0 else (False, "NVML sees no GPU")


def collect(query: FactQuery, environ: Optional[dict[str, str]] = None,
            nvml: Callable[[], tuple[Optional[bool], Optional[str]]] = _nvml) -> NodeFacts:
    """The node facts of this machine for `query`."""
    from cluster.engines.interconnect import collect_interconnect

    env = dict(os.environ if environ is None else environ)
    wiring = collect_interconnect(environ=env)
    gpus = tuple(GpuFact(index=g.index, bus_id=g.bus_id, compute_cap=g.compute_cap, width_current=g.width_current,
                         width_max=g.width_max) for g in wiring.links) if wiring.available else None
    nvml_ok, nvml_reason = nvml()
    try:
        st = os.statvfs(query.shm_path)
        shm_bytes: Optional[int] = st.f_blocks * st.f_frsize
        shm_reason = None
    except OSError as e:
        shm_bytes, shm_reason = None, f"{query.shm_path}: {e.strerror or e}"
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        cpus: Optional[int] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count()
    current = _read_text(os.path.join(query.clocksource_dir, "current_clocksource"))
    available = _read_text(os.path.join(query.clocksource_dir, "available_clocksource"))
    return NodeFacts(
        hostname=socket.gethostname(), gpus=gpus, gpus_reason=None if wiring.available else wiring.reason,
        cuda_visible_devices=env.get("CUDA_VISIBLE_DEVICES"), nvml_ok=nvml_ok, nvml_reason=nvml_reason,
        topology_text=wiring.topology_text,
        topology_reason=None if wiring.topology_text else (wiring.reason or "nvidia-smi topo -m printed nothing"),
        interpreter=interpreter_fact(query.python) if query.python else None,
        gateway=gateway_fact(query.gateway) if query.gateway else None,
        modules=module_facts(query.python, query.modules) if query.python and query.modules else (),
        checkpoint=checkpoint_fact(query.model_path) if query.model_path else None,
        disks=tuple(disk_fact(p) for p in query.disk_paths), shm_bytes=shm_bytes, shm_reason=shm_reason,
        nofile_soft=int(soft), nofile_hard=int(hard), cpus=cpus,
        clocksource=current.strip() if current else None,
        clocksource_available=tuple((available or "").split()),
        clocksource_reason=None if current else f"{query.clocksource_dir}/current_clocksource is not readable")
