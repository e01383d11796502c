"""The simulator's control endpoints: health, model and server info, cache flush, metrics, profiling, sim-only stats."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import asdict
from typing import Optional
from aiohttp import web

from cluster.input_files import JsonValue
from cluster.config.sim_knobs import Knobs
from cluster.engines.sim_launch import SIM_KNOBS_KEY
from cluster.sim.lifecycle import SimServer, error_response
from cluster.sim.prometheus import metrics_text
from cluster.version import SGLANG_RELEASE

VERSION = SGLANG_RELEASE

log = logging.getLogger("sglbench.sim")


class ControlEndpoints:
    """Every route but generation, over one SimServer's state."""

    def __init__(self, server: SimServer) -> None:
        self.server = server

    async def sim_pacing(self, request: web.Request) -> web.Response:
        """The fixed-latency pacer's own write lateness since start or the last /flush_cache (sim only).

        With `?requests=1`, also each finished stream's rid, first prompt ids, receipt and write times (monotonic
        ns, the same clock as any client on this machine)."""
        if self.server.pacer is None:
            return web.json_response({"writes": 0, "fixed": False})
        out = self.server.pacer.stats()
        if request.query.get("requests") in ("1", "true"):
            out["requests"] = self.server.pacer.request_log()
        return web.json_response(out)

    async def sim_device(self, request: web.Request) -> web.Response:
        """The simulated device's readings (sim only: what NVML would report for each of the server's GPUs)."""
        return web.json_response({"source": "sim", "gpus": [asdict(r) for r in self.server.device.read()]})

    async def start_profile(self, request: web.Request) -> web.Response:
        """SGLang 0.5.23's /start_profile (body: io_struct.ProfileReq fields; an empty body starts with defaults)."""
        try:
            body = await request.json() if request.can_read_body else {}
        except ValueError:
            return error_response(400, "start_profile body must be JSON")
        err = self.server.profiler.start(body if isinstance(body, dict) else {})
        if err:  # SGLang raises RuntimeError(message) in the handler: a 500
            return web.Response(status=500, text=err)
        return web.Response(text="Start profiling.\n")

    async def stop_profile(self, request: web.Request) -> web.Response:
        err = self.server.profiler.stop()
        if err:  # SGLang 0.5.23 raises RuntimeError(message): its body is only "Internal Server Error" (measured)
            log.error("stop_profile: %s", err)
            return web.Response(status=500, text="Internal Server Error")
        return web.Response(text="Stop profiling. This will take some time.\n")

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self.server.healthy() else 503)

    async def model_info(self, request: web.Request) -> web.Response:
        a = self.server.args
        return web.json_response({
            "model_path": a["model_path"], "served_model_name": a["served_model_name"],
            "tokenizer_path": a["tokenizer_path"], "is_generation": True, "preferred_sampling_params": None,
            "weight_version": "default", "load_format": "auto", "reasoning_parser": None, "tool_call_parser": None,
            "disaggregation_mode": a["disaggregation_mode"], "has_image_understanding": False, "has_audio_understanding": False,
            "model_type": "sim", "architectures": ["SimulatedForCausalLM"],
        })

    def internal_state(self, dp_rank: Optional[int] = None) -> dict[str, JsonValue]:
        """One scheduler's internal state: the whole server's, or with attention DP (knob dp_accept_probs) one
        rank's, whose cap share and acceptance are that rank's own."""
        s = self.server
        st: dict[str, JsonValue] = dict(s.args)
        cap = s.sched.max_running if dp_rank is None else max(1, s.sched.max_running // s.sched.dp_size)
        st.update(world_size=s.args["tp_size"], effective_max_running_requests_per_dp=cap,
                  last_gen_throughput=s.last_gen_throughput,
                  memory_usage={"weight": 0.0, "kvcache": 0.0, "graph": 0.0,
                                "token_capacity": s.knobs.max_total_num_tokens})
        if dp_rank is not None:
            st.update(dp_size=s.sched.dp_size, dp_rank=dp_rank)
        acc = s.sched.avg_spec_accept_length(dp_rank)
        if acc is not None:
            st["avg_spec_accept_length"] = acc
        return st

    def internal_states(self) -> list[JsonValue]:
        """/server_info's internal_states: one entry, or one per attention-DP rank."""
        n = self.server.sched.dp_size
        return [self.internal_state()] if n == 1 else [self.internal_state(r) for r in range(n)]

    async def server_info(self, request: web.Request) -> web.Response:
        s = self.server
        info = dict(s.args)
        info.update(launch_command=s.launch_command, max_total_num_tokens=s.knobs.max_total_num_tokens,
                    max_req_input_len=s.knobs.context_length - 1, kv_events=None,
                    startup_time=s.startup_time_s, version=VERSION, frontend="python",
                    unmodelled_args=s.unmodelled, sim=True, **{SIM_KNOBS_KEY: knobs_json(s.knobs)},
                    internal_states=self.internal_states())
        if s.sched.dp_size > 1:
            info["dp_size"] = s.sched.dp_size
        return web.json_response(info)

    async def models(self, request: web.Request) -> web.Response:
        name = self.server.args["served_model_name"]
        return web.json_response({"object": "list", "data": [{
            "id": name, "object": "model", "created": self.server.created, "owned_by": "sglang", "root": name,
            "max_model_len": self.server.knobs.context_length}]})

    async def flush_cache(self, request: web.Request) -> web.Response:
        try:
            timeout_s = float(request.query.get("timeout", "0"))
        except ValueError:
            return web.Response(status=400, text="timeout must be a number of seconds")
        deadline = time.monotonic() + timeout_s
        while self.server.sched.busy and time.monotonic() < deadline:
            await asyncio.sleep(min(0.02, max(0.0, deadline - time.monotonic())))
        if self.server.sched.busy:
            log.warning("Cache not flushed because there are pending requests. #queue-req: %d, #running-req: %d",
                        len(self.server.sched.waiting), len(self.server.sched.running))
            return web.Response(status=400, text="Flush cache failed.\n")  # SGLang 0.5.23's body (recorded)
        self.server.sched.flush()
        if self.server.pacer is not None:
            self.server.pacer.reset()
        log.info("Cache flushed successfully.")
        return web.Response(status=200, text="Cache flushed.\nPlease check backend logs for more details. (When there "
                                             "are running or waiting requests, the operation will not be performed.)\n")

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(text=self.metrics_text(), content_type="text/plain")

    def metrics_text(self) -> str:
        s = self.server
        name = str(s.args["served_model_name"])
        text = metrics_text(s.sched, s.spec, name, s.last_gen_throughput, s.streaming, s.knobs.max_total_num_tokens,
                            "unified" if s.pd is None else s.pd.mode)
        return text if s.pd is None else text + s.pd.metrics.text(name)


def knobs_json(knobs: Knobs) -> dict[str, JsonValue]:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(knobs).items()}
