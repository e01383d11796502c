"""Build, start and stop benchmarks/paced_stub.c, a paced SSE stub of an SGLang server for measuring HTTP clients."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Optional

SOURCE = Path(__file__).resolve().with_name("paced_stub.c")
CFLAGS = ("-O2", "-Wall", "-Wextra")
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0


class BuildError(RuntimeError):
    """gcc is missing, or it could not compile paced_stub.c."""


def build(out_dir: Path) -> Path:
    """Compile paced_stub.c into out_dir (gcc -O2), once per source hash; the binary's path."""
    src = SOURCE.read_bytes()
    digest = hashlib.sha256(src + " ".join(CFLAGS).encode()).hexdigest()[:16]
    out_dir = Path(out_dir)
    binary = out_dir / f"paced_stub-{digest}"
    if binary.exists():
        return binary
    gcc = shutil.which("gcc")
    if gcc is None:
        raise BuildError("paced_stub: gcc was not found on PATH; install gcc (e.g. apt-get install gcc) to build "
                         f"{SOURCE}")
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".{binary.name}.{os.getpid()}.tmp"
    proc = subprocess.run([gcc, *CFLAGS, "-o", str(tmp), str(SOURCE)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise BuildError(f"paced_stub: gcc failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    os.replace(tmp, binary)  # atomic: concurrent builders (xdist workers) never see half a binary
    return binary


class PacedStub:
    """One paced_stub server on 127.0.0.1 (ephemeral port unless `port` is given); stopped by its own Popen handle.

    cpu pins the server to that core (os.sched_setaffinity on its pid right after the spawn, before its port is read,
    so before it serves anything). realtime: SCHED_FIFO priority 10 where permitted (root), so the stub's timer
    wake-ups preempt whatever else shares its core (on a 2-core machine: the harness, other sessions); the kernel's
    RT throttling still leaves 5 % of the core to others. Where it is refused the stub runs as a normal process and
    `realtime_granted` says so."""

    def __init__(self, binary: Path, ttft_ms: float = 20.0, itl_ms: float = 10.0, chunks: int = 256,
                 burst: bool = False, cpu: Optional[int] = None, port: int = 0, realtime: bool = False) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="paced_stub-"))
        self._stats_path = self._dir / "stats.json"
        self._final: Optional[dict[str, float]] = None
        argv = [str(binary), "--port", str(port), "--ttft-ms", repr(float(ttft_ms)), "--itl-ms",
                repr(float(itl_ms)), "--chunks", str(int(chunks)), "--stats", str(self._stats_path)]
        self.burst = burst
        if burst:
            argv.append("--burst")
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
        try:
            if cpu is not None:
                os.sched_setaffinity(self.proc.pid, {cpu})
            self.realtime_granted = False
            if realtime:
                try:
                    os.sched_setscheduler(self.proc.pid, os.SCHED_FIFO, os.sched_param(10))
                    self.realtime_granted = True
                except OSError:
                    pass
            self.port = self._read_port()
        except BaseException:
            self._kill()
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            shutil.rmtree(self._dir, ignore_errors=True)
            raise
        self.base_url = f"http://127.0.0.1:{self.port}"

    def _read_port(self) -> int:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.proc.stdout], [], [], max(left, 0.0))
            if not ready:
                raise RuntimeError(f"paced_stub: no PORT line within {START_TIMEOUT_S:.0f} s")
            byte = os.read(self.proc.stdout.fileno(), 1)
            if not byte:
                raise RuntimeError(f"paced_stub exited before listening (exit status {self.proc.wait()})")
            line += byte
        word, _, num = line.decode().strip().partition(" ")
        if word != "PORT" or not num.isdigit():
            raise RuntimeError(f"paced_stub: unexpected first line {line!r}")
        return int(num)

    def stats(self) -> dict[str, float]:
        """The server's counters and lateness percentiles (GET /stats)."""
        with urllib.request.urlopen(self.base_url + "/stats", timeout=5) as r:
            return {k: float(v) for k, v in json.loads(r.read()).items()}

    def reset_stats(self) -> None:
        """Zero the counters, the lateness histogram and the CPU/uptime baselines (POST /stats/reset)."""
        req = urllib.request.Request(self.base_url + "/stats/reset", data=b"", method="POST")
        with urllib.request.urlopen(req, timeout=5) as r:
            r.read()

    def stop(self) -> dict[str, float]:
        """SIGTERM, wait, and return the stats the server wrote on its way out (the same ones on a second call)."""
        if self._final is not None:
            return self._final
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    self._kill()
                    raise RuntimeError(f"paced_stub did not exit within {STOP_TIMEOUT_S:.0f} s of SIGTERM; killed")
            if not self._stats_path.exists():
                raise RuntimeError(f"paced_stub exited ({self.proc.returncode}) without writing its stats")
            self._final = {k: float(v) for k, v in json.loads(self._stats_path.read_text()).items()}
            return self._final
        finally:
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            shutil.rmtree(self._dir, ignore_errors=True)

    def _kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def __enter__(self) -> PacedStub:
        return self

    def __exit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        if exc_type is None:
            self.stop()
            return
        try:  # the body's exception is the one to see
            self.stop()
        except Exception:
            self._kill()


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--ttft-ms", type=float, default=20.0)
    ap.add_argument("--itl-ms", type=float, default=10.0)
    ap.add_argument("--chunks", type=int, default=256, help="output tokens when a request names none")
    ap.add_argument("--burst", action="store_true", help="each whole response in one write at its TTFT")
    ap.add_argument("--port", type=int, default=0, help="0: an ephemeral port")
    ap.add_argument("--cpu", type=int, default=None, help="pin the server to this core")
    ap.add_argument("--build-dir", type=Path, default=Path(tempfile.gettempdir()) / "sglbench-paced-stub")
    args = ap.parse_args(argv)
    stub = PacedStub(build(args.build_dir), ttft_ms=args.ttft_ms, itl_ms=args.itl_ms, chunks=args.chunks,
                     burst=args.burst, cpu=args.cpu, port=args.port)
    print(f"PORT {stub.port}\n{stub.base_url}  (Ctrl-C or SIGTERM stops it and prints its stats)", flush=True)

    def _terminate(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _terminate)
    try:
        while stub.proc.poll() is None:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass  # on Ctrl-C the server (same process group) got SIGINT too and wrote its stats; else stop() sends SIGTERM
    print(json.dumps(stub.stop(), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
