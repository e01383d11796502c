"""Ray actors: EngineActor owns one server subprocess on its GPUs; LoadActor drives load at it from the same node."""

from __future__ import annotations

import os
import socket
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit
from typing import Any, Iterator, Optional, Union

import pyarrow as pa
import ray

from cluster.version import __version__
from cluster.engines.base import api_key_of
from cluster.engines.registry import get_engine
from cluster.engines.sglang_adaptive import config_missing
from cluster.kernel.run_facts import ServerFacts
from cluster.config.secrets import redact_argv, redact_env, scrub, scrub_file, scrub_text, secret_values
from cluster.loadgen.eval import during_window
from cluster.kernel.eval_task import EvalAnswer, EvalItem
from cluster.loadgen.gate import GateAnswers
from cluster.kernel.runs import ResolvedVariant
from cluster.loadgen.server_metrics import MetricsScraper
from cluster.server.endpoint import EndpointServer
from cluster.server.engine_server import cap_log_lines, read_infos
from cluster.server.process import (PortNotOwnedError, ServerProcess, ServerStartError, free_port, http_status,
                                    kill_group, pid_alive)
from cluster.config.workload import WorkloadSpec
from cluster.config.engines import EngineLauncher
from cluster.telemetry.profile import ProfileCapture
from cluster.telemetry.recorder import TelemetryRecorder
from cluster.kernel.telemetry_capture import TelemetryCapture
from cluster.kernel.window import MeasuredWindow
from cluster.kernel.window_job import WindowJob
from cluster.distributed.built_prompts import BuiltPrompts, WindowInputs

MAX_PORT_TRIES = 3
WATCHDOG_NOTE_S = 2.0
"""How long a dead server's log tail waits for the watchdog's note (it polls its server every 0.25 s)."""


@dataclass(frozen=True)
class Prepared:
    """What LoadActor.prepare did before a window: warmup requests that succeeded, whether the flush worked."""

    warmup_ok: int
    flushed: bool


@dataclass(frozen=True)
class LoadBatch:
    """Record batches of finished requests and their chunks, streamed out of a load actor during a window."""

    requests: pa.RecordBatch
    chunks: pa.RecordBatch


LoadMessage = Union[LoadBatch, MeasuredWindow]
"""What a load actor's window stream yields: record batches as they accumulate, then its shard's MeasuredWindow."""


@dataclass(frozen=True)
class StopResult:
    stopped: bool
    exit_code: Optional[int] = None
    pid: Optional[int] = None
    log_tail: str = ""


class EngineActorImpl:
    """Launches the variant's server on the GPUs Ray gave this actor; kills its process group on stop or error."""

    def __init__(self, variant: ResolvedVariant, launcher: Optional[EngineLauncher], log_dir: str,
                 host: str = "127.0.0.1", python: Optional[str] = None, api_key: Optional[str] = None) -> None:
        self.variant = variant
        self.launcher = launcher
        self.log_dir = Path(log_dir)
        self.host = host
        self.python = python or sys.executable
        self.engine = get_engine(variant.engine).with_api_key(api_key or api_key_of(variant.args))
        self.endpoint = EndpointServer(self.engine, variant.endpoint.url) if variant.endpoint is not None else None
        """An endpoint already running (nothing launched, nothing killed), or None."""
        self.server: Optional[ServerProcess] = None
        self.base_url = ""
        self.server_pid: Optional[int] = None
        """The server process under the watchdog, once healthy."""
        self._recorder: Optional[TelemetryRecorder] = None
        self._no_telemetry: Optional[TelemetryCapture] = None
        self._profile_dir = self.log_dir / "profiles" / variant.name
        self.secrets = secret_values(variant.env, variant.args, launcher.launcher if launcher and launcher.launcher else ())
        if api_key:
            self.secrets |= {api_key}
        """Declared secret values: what the server echoes back (infos, log tails) is scrubbed of them."""

    def gpu_ids(self) -> list[str]:
        return [str(g) for g in ray.get_gpu_ids()]

    def node(self) -> tuple[str, str]:
        """(Ray node id, node IP) of this actor: where a deployment's process runs."""
        return str(ray.get_runtime_context().get_node_id()), str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]

    def free_port_on(self, host: str) -> int:
        """A port free on this node now (a prefill's bootstrap port, rank 0's rendezvous)."""
        return free_port(host)

    def relaunch_as(self, variant: ResolvedVariant, host: str) -> None:
        """Launch `variant` (one process of a deployment, its ports assigned) on `host` at the next start."""
        self.variant, self.host = variant, host
        self._profile_dir = self.log_dir / "profiles" / variant.name

    def telemetry_start(self, rate_hz: float) -> Optional[str]:
        """Start sampling this server's GPUs (NVML, or the simulator's device) in a thread of this actor; returns
        why not when there is nothing to sample (recorded, never fatal)."""
        from cluster.telemetry.nvml import TelemetryUnavailable
        from cluster.telemetry.recorder import unavailable

        self.telemetry_stop()
        if self.endpoint is not None:
            why = "an endpoint already running: sglbench holds none of its GPUs to sample"
            self._no_telemetry = unavailable(why, rate_hz)
            return why
        try:
            sampler = self.engine.device_sampler(self.variant, self.base_url, self.gpu_ids())
        except TelemetryUnavailable as e:
            self._no_telemetry = unavailable(str(e), rate_hz)
            return str(e)
        self._recorder = TelemetryRecorder(sampler, rate_hz).start()
        return None

    def telemetry_stop(self) -> Optional[TelemetryCapture]:
        """Stop sampling; the samples since telemetry_start (absolute monotonic ns), or None if none was started."""
        rec, self._recorder = self._recorder, None
        if rec is None:
            capture, self._no_telemetry = self._no_telemetry, None
            return capture
        return rec.stop()

    def attach(self, health_timeout_s: float) -> ServerFacts:
        """An endpoint's facts: what it answers about itself, nothing launched (pid and pgid 0, never killed)."""
        assert self.endpoint is not None
        infos, waited = self.endpoint.attach(health_timeout_s)
        infos = scrub(infos, self.secrets)
        port = urlsplit(self.endpoint.url).port
        return ServerFacts(
            pid=0, pgid=0, port=port or 0, port_attempts=0, base_url=self.endpoint.url, argv=[], env={},
            cuda_visible_devices="", gpu_ids=[], node_id=str(ray.get_runtime_context().get_node_id()),
            hostname=urlsplit(self.endpoint.url).hostname or "", startup_s=waited, started_unix_s=time.time(),
            infos=infos, resolved_args=scrub(self.engine.resolved_args(infos), self.secrets), log_path="",
            server_pid=None, server_saw_cuda_visible_devices=None, environment={}, launched=False,
            start_mark=self.endpoint.first_mark)

    def restart_reason(self) -> Optional[str]:
        """An endpoint's restart since it was attached (its restart mark changed), or None."""
        return None if self.endpoint is None else scrub_text(self.endpoint.restart_reason() or "", self.secrets) or None

    def start(self, health_timeout_s: float, port: Optional[int] = None) -> ServerFacts:
        if self.endpoint is not None:
            return self.attach(health_timeout_s)
        sp = self.variant.speculative
        missing = config_missing(sp.adaptive_config if sp is not None else None, socket.gethostname())
        if missing is not None:  # before launching: the server would exit with a less clear error
            raise ServerStartError(f"variant {self.variant.name}: {missing}")
        gpu_ids = self.gpu_ids()
        last_err: Optional[ServerStartError] = None
        for attempt in range(MAX_PORT_TRIES):
            p = port if (port is not None and attempt == 0) else free_port(self.host)
            cmd = self.engine.launch(self.variant, self.host, p, self.launcher, self.python)
            env = dict(os.environ)
            env.update(cmd.env)
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpu_ids)
            env.pop("RAY_ADDRESS", None)
            log_path = self.log_dir / f"{self.variant.name}-{int(time.time() * 1000)}.log"
            self.server = ServerProcess(cmd.argv, env, log_path, redact=self.secrets)
            t0 = time.time()
            self.server.start()
            self.base_url = f"http://{self.host}:{p}"
            try:
                # health counts only once our process group is proven to hold the port's listening socket
                waited = self.server.wait_healthy(self.base_url, self.engine.health_path, health_timeout_s, port=p)
            except ServerStartError as e:
                self.server.stop(grace_s=5)
                tail = scrub_text(self.server.log_tail(), self.secrets)
                last_err = e
                stranger = isinstance(e, PortNotOwnedError)
                if not stranger and ("address already in use" in tail.lower() or "errno 98" in tail.lower()):
                    continue  # another process took the port between our probe and the bind: try another
                line = scrub_text(e.log_line, self.secrets) if e.log_line else None
                raise type(e)(scrub_text(str(e), self.secrets), tail, e.server_exit_code, log_line=line) from None
            infos = read_infos(self.engine, self.base_url, self.engine.version_for(self.launcher, self.python))
            try:
                from cluster.engines.environment import capture_environment

                environment = capture_environment(self.launcher.python if self.launcher else None, timeout_s=30)
            except Exception as e:  # noqa: BLE001 - environment capture is evidence, never a reason to fail
                environment = {"error": f"{type(e).__name__}: {e}"}
            leader = self.server.pid
            assert leader is not None
            server_pid = self.server_pid = self.server.server_pid()
            try:
                # the server inherits this actor's niceness: Ray starts workers at RAY_worker_niceness (15 unless
                # the cluster says otherwise), and a niced server loses its CPU to every normal process on the node
                environment["server_niceness"] = os.getpriority(os.PRIO_PROCESS, server_pid or leader)
            except OSError as e:
                environment["server_niceness_error"] = str(e)
            return ServerFacts(
                environment=environment,
                port=p,
                port_attempts=attempt + 1,
                base_url=self.base_url,
                pid=leader,
                pgid=leader,
                argv=redact_argv(cmd.argv),
                env=redact_env(cmd.env),
                cuda_visible_devices=env["CUDA_VISIBLE_DEVICES"],
                gpu_ids=gpu_ids,
                node_id=str(ray.get_runtime_context().get_node_id()),
                hostname=socket.gethostname(),
                startup_s=waited,
                started_unix_s=t0,
                infos=scrub(infos, self.secrets),
                resolved_args=scrub(self.engine.resolved_args(infos), self.secrets),
                log_path=str(log_path),
                server_pid=server_pid,
                server_saw_cuda_visible_devices=_env_of(server_pid or 0).get("CUDA_VISIBLE_DEVICES"),
                cap_log_lines=tuple(scrub_text(line, self.secrets) for line in cap_log_lines(self.engine, log_path)),
            )
        assert last_err is not None
        raise ServerStartError(f"could not bind a free port after {MAX_PORT_TRIES} tries: {last_err}",
                               last_err.log_tail)

    def profile_start(self, steps: int) -> Optional[str]:
        """Ask the server for a kernel profile of its next `steps` forward steps into a fresh directory on this node;
        returns why not (the engine has no profiler, the server refused), or None."""
        from cluster.server.process import http_post

        self._profile_dir = self.log_dir / "profiles" / f"{self.variant.name}-{int(time.time() * 1000)}"
        self._profile_dir.mkdir(parents=True, exist_ok=True)
        req = self.engine.profile_request(str(self._profile_dir), steps, f"sglbench-{self.variant.name}",
                                          self.engine.runs_on_cpu(self.variant))
        if req is None:
            return f"engine {self.engine.name} has no profiler endpoint"
        status, text = http_post(self.base_url + req.path, req.body, 60.0, self.engine.headers)
        return None if status == 200 else scrub_text(f"start_profile answered {status}: {text.strip()[:300]}",
                                                     self.secrets)

    def profile_collect(self, timeout_s: float, max_archive_bytes: int) -> ProfileCapture:
        """Stop the profile (refused harmlessly when it stopped by itself after its steps), wait for one trace per
        TP rank, and archive the directory (content-hashed, size-capped)."""
        from cluster.server.process import http_post
        from cluster.telemetry.profile import archive_dir, wait_for_traces

        d = self._profile_dir
        stop = ""
        if self.engine.profile_stop_path:
            # after num_steps the profiler has stopped by itself and SGLang 0.5.23 answers this 500 "Internal Server
            # Error" (its RuntimeError "Profiling is not in progress"; measured on the sglang_cpu tier): only worth
            # saying when no trace appears
            status, text = http_post(self.base_url + self.engine.profile_stop_path, b"", 120.0, self.engine.headers)
            stop = f" (stop_profile answered {status}: {scrub_text(text.strip()[:300], self.secrets)})"
        files = wait_for_traces(d, max(1, self.variant.tp), timeout_s)
        note = None
        if not files:
            return ProfileCapture(str(d), (), None, None, 0, f"no trace was written in {timeout_s:g} s{stop}")
        from cluster.analysis.kernel_profile import summarize_traces

        data, sha, size, over = archive_dir(d, max_archive_bytes)
        return ProfileCapture(str(d), tuple(p.name for p in files), data, sha, size, over or note,
                              summarize_traces(files))

    def alive(self) -> bool:
        """The process group leader runs and so does the server itself (a killed server whose watchdog has not yet
        noticed is dead); an endpoint: it answers its health check."""
        if self.endpoint is not None:
            return self.endpoint.alive()
        if self.server is None or not self.server.alive():
            return False
        return self.server_pid is None or pid_alive(self.server_pid)

    def log_tail(self, max_bytes: int = 8000) -> str:
        if self.server is None:
            return ""
        if self.server_pid is not None and not pid_alive(self.server_pid):
            # the watchdog writes how its server died (a SIGKILLed SGLang writes nothing), then exits
            self.server.wait_exit(WATCHDOG_NOTE_S)
        return scrub_text(self.server.log_tail(max_bytes), self.secrets)

    def stop(self) -> StopResult:
        self.telemetry_stop()
        if self.server is None:
            return StopResult(False)
        code = self.server.stop()
        tail = self.log_tail()
        scrub_file(self.server.log_path, self.secrets)  # the server may have logged its own --api-key
        return StopResult(True, code, self.server.pid, tail)


class LoadActorImpl:
    """Runs every load point of one server in one long-lived process (never a Ray call per request)."""

    def __init__(self, engine_name: str, base_dir: str, model_path: str = "", api_key: Optional[str] = None) -> None:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # zero-GPU actors must not see the node's GPUs
        self.engine = get_engine(engine_name).with_api_key(api_key)  # requests carry the variant's --api-key
        self.base_dir = Path(base_dir)
        self.model_path = model_path
        self._built = BuiltPrompts()

    def _prompts(self, workload: WorkloadSpec, n: int, seed: int) -> Any:
        from cluster.loadgen.prompt_sources import build_prompt_sequence

        return build_prompt_sequence(workload, n, seed, self.base_dir, self.model_path)

    def _window_inputs(self, workload: WorkloadSpec, seed: int, audited: bool) -> WindowInputs:
        """The window's prompts, session plan and (when `audited`) the source's selection, built once per
        (workload, seed) and reused by every load point of the workload this actor runs."""
        from cluster.loadgen.prompt_sources import build_session_plan, workload_selection

        n = workload.num_requests
        return self._built.get(
            workload, seed, audited,
            lambda: WindowInputs(self._prompts(workload, n, seed),
                                 build_session_plan(workload, n, seed, self.base_dir, self.model_path),
                                 # read from the source apart from `prompts`: the audit compares the two
                                 workload_selection(workload, n, seed, self.base_dir, self.model_path) if audited
                                 else None))

    def run_gate(self, base_url: str, model_name: str, timeout_s: float = 300.0,
                 filler: Optional[int] = None, cap: Optional[int] = None) -> GateAnswers:
        import asyncio

        from cluster.loadgen.gate import collect_gate_answers

        return asyncio.run(collect_gate_answers(self.engine, base_url, model_name, timeout_s, filler, cap))

    def run_eval_alone(self, base_url: str, model_name: str, items: tuple[EvalItem, ...], max_tokens: int,
                       timeout_s: float) -> tuple[EvalAnswer, ...]:
        import asyncio

        from cluster.loadgen.eval import ask_alone

        return asyncio.run(ask_alone(self.engine, base_url, model_name, items, max_tokens, timeout_s))

    def visible_gpus(self) -> str:
        return os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")

    def node_id(self) -> str:
        return str(ray.get_runtime_context().get_node_id())

    def prepare(self, job: WindowJob, warmup_requests: int, flush_timeout_s: float = 60.0,
                flush_cache: bool = True) -> Prepared:
        """Warmup at the point's concurrency, then flush caches and speculative counters before the window (unless
        `flush_cache` is False: an endpoint whose experiment does not allow it)."""
        import asyncio

        from cluster.loadgen.runner import flush, warmup

        load = job.load
        conc = load.shape.warmup_concurrency(load)
        warm_ok = 0
        if warmup_requests > 0 and job.workload is not None:
            warm_prompts = self._prompts(job.workload, warmup_requests, job.seed ^ 0x5EED)
            warm_ok = asyncio.run(warmup(self.engine, job.warmup(min(conc, warmup_requests)), warm_prompts))
        # a deployment's every server (a gateway forwards a flush to one worker at most)
        flushed = all(asyncio.run(flush(self.engine, url, flush_timeout_s)) for _, url in job.metrics_targets()) \
            if flush_cache else False
        return Prepared(warm_ok, flushed)

    def run_point_stream(self, job: WindowJob) -> Iterator[LoadMessage]:
        """A generator (call with num_returns="streaming"): a LoadBatch as records accumulate, so this process never
        holds a whole long window; then the shard's MeasuredWindow last (its records already streamed out).
        `job.eval_items` are sent beside the load (loadgen/eval.py during_window), their answers in the summary."""
        import queue
        import threading

        from cluster.loadgen.runner import run_load_point

        workload = job.workload
        if workload is None:
            raise ValueError("a load actor's window job names its workload (WindowJob.of_run)")
        shard_index, base_url = job.shard_index, job.base_url
        inputs = self._window_inputs(workload, job.seed, audited=shard_index == 0)
        q: "queue.Queue[Optional[LoadBatch]]" = queue.Queue()  # unbounded: blocking here would stall the event loop's timing
        scraper = None
        scrape_interval_s = job.scrape_interval_s if job.scrape_metrics else 0.0
        if shard_index == 0 and scrape_interval_s and self.engine.metrics_path:  # each server's, named
            targets = [(name, url + self.engine.metrics_path) for name, url in job.metrics_targets()
                       if http_status(url + self.engine.metrics_path) == 200]
            scraper = MetricsScraper(targets, scrape_interval_s).start() if targets else None
        box: dict[str, Any] = {}

        def work() -> None:
            try:
                box["res"] = run_load_point(
                    self.engine, replace(job, scrape_metrics=job.scrape_metrics and shard_index == 0),
                    inputs.prompts, on_batch=lambda r, c: q.put(LoadBatch(r, c)), sessions=inputs.sessions,
                    alongside=during_window(self.engine, base_url, job.model_name, job.eval_items, job.eval_max_tokens,
                                            job.request_timeout_s) if job.eval_items else None)
            except BaseException as e:  # noqa: BLE001 - re-raised in the generator below
                box["error"] = e
            finally:
                q.put(None)

        t = threading.Thread(target=work, name=f"load-shard-{shard_index}", daemon=True)
        t.start()
        try:
            while (item := q.get()) is not None:
                yield item
        finally:
            t.join()
            if scraper is not None:
                scraper.halt()
        if "error" in box:
            raise box["error"]
        res = box["res"]
        yield replace(res, server_metrics=scraper.batch(res.window_start_unix_s) if scraper is not None else None,
                      selection=inputs.selection)


def _env_of(pid: int) -> dict[str, str]:
    """The environment a process really started with (Linux /proc), as evidence of its GPU pinning."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            out[k.decode("utf-8", "replace")] = v.decode("utf-8", "replace")
    return out


def cleanup_group(pgid: int) -> bool:
    """Kill a server's process group on this node (after its actor died); True if nothing is left."""
    if pgid <= 1:  # 0 is an endpoint's (nothing launched) and would name this worker's own group
        return True
    kill_group(pgid, grace_s=5.0)
    return not pid_alive(pgid)


# max_concurrency lets alive()/log_tail() answer while start() waits for health (a threaded actor)
EngineActor = ray.remote(num_cpus=0, max_restarts=0, max_concurrency=4)(EngineActorImpl)  # type: ignore[call-overload]
LoadActor = ray.remote(max_restarts=0)(LoadActorImpl)
cleanup_task = ray.remote(num_cpus=0, max_retries=0)(cleanup_group)
__all__ = ["EngineActor", "LoadActor", "cleanup_task", "__version__"]
