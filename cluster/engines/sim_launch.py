"""The simulated server's command line: the SGLang 0.5.23 flags the simulator models, parsed strictly, and SGLang's
launch rules applied to them (NEXTN -> EAGLE, the automatic speculative triple, the cap of 48).

Engine flags live in engines/ only: the simulator (cluster/sim/server.py) parses its argv with this, and flagcheck
checks a sim variant's argv with the same parser and rules in the planning process."""

from __future__ import annotations

import argparse
import logging
import textwrap
from dataclasses import dataclass
from typing import Any, Optional

from cluster.config.bounds import PORT_MAX, PORT_MIN
from cluster.config.sim_knobs import Knobs
from cluster.engines.sim_roles import add_role_flags, role_error
from cluster.engines.sglang_adaptive import AdaptiveBucket, bucket_for, candidate_union, parse_config, start_steps
from cluster.input_files import parse_json, read_input_text
from cluster.errors import UserError

log = logging.getLogger("sglbench.sim")

SIM_KNOBS_KEY = "sim_knobs"
"""The /server_info key under which the simulator reports the knobs it runs with (a sim-only addition to SGLang's
answer)."""


@dataclass(frozen=True)
class SpecParams:
    """Resolved speculative configuration (NEXTN is already rewritten to EAGLE)."""

    algorithm: str
    num_steps: int
    eagle_topk: int
    num_draft_tokens: int
    adaptive: tuple[AdaptiveBucket, ...] = ()
    """--speculative-adaptive's buckets (empty: a fixed depth); each step drafts its running batch's bucket depth."""

    def at_batch(self, batch_size: int) -> "SpecParams":
        """The depth one step drafts at with `batch_size` running requests (adaptive: its bucket's start depth)."""
        if not self.adaptive:
            return self
        steps = start_steps(bucket_for(self.adaptive, batch_size), self.num_steps)
        return SpecParams(self.algorithm, steps, self.eagle_topk, steps + 1)

    @property
    def max_steps(self) -> int:
        return max([self.num_steps, *candidate_union(self.adaptive)])


SPEC_MAX_RUNNING_DEFAULT = 48
"""SGLang 0.5.23 sets an unset max_running_requests to 48 for every speculative algorithm
(sglang/srt/arg_groups/speculative_hook.py, _handle_eagle_family and the other _handle_* hooks; not server_args.py)."""


def build_parser(prog: str = "python -m cluster.sim.server") -> argparse.ArgumentParser:
    """The flags the simulator models (every other flag SGLang knows is accepted and not modelled)."""
    knobs = "\n".join(textwrap.fill(f"{name}: {f.description or ''} (default {f.default!r})", 78,
                                     initial_indent="  ", subsequent_indent="      ")
                       for name, f in Knobs.model_fields.items())
    p = argparse.ArgumentParser(
        prog=prog, allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter,
        description=textwrap.fill(
            "The simulated SGLang 0.5.23 server: SGLang's HTTP API and argv, step times from a model calibrated to "
            "Qwen3.5-397B-A17B-NVFP4 on 8 GPUs (simulator numbers, never GPU numbers). The flags below are "
            "modelled; every other flag SGLang 0.5.23 knows is accepted and not modelled, and a flag it does not "
            "know is refused as SGLang refuses it.", 78),
        epilog="Simulator knobs: JSON in the environment variable SGLBENCH_SIM. Example:\n"
               "  SGLBENCH_SIM='{\"accept_probs\": [0.9], \"time_scale\": 0}' sglbench sim-server --model-path "
               "sim://m\n" + knobs)
    p.add_argument("--model-path", "--model", dest="model_path", required=True,
                   help="any name (sim://NAME); nothing is loaded")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=30000, help="port (default 30000)")
    p.add_argument("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1,
                   help="tensor-parallel size, reported in /server_info")
    p.add_argument("--max-running-requests", type=int, default=None,
                   help="batch cap, as SGLang's")
    p.add_argument("--speculative-algorithm", default=None, help="NEXTN/EAGLE/MTP: simulated draft and verify")
    p.add_argument("--speculative-num-steps", type=int, default=None, help="draft steps per verify")
    p.add_argument("--speculative-eagle-topk", type=int, default=None, help="draft branches (1 is modelled)")
    p.add_argument("--speculative-num-draft-tokens", type=int, default=None, help="tokens verified per step")
    p.add_argument("--speculative-adaptive", action="store_true",
                   help="switch the draft depth by running batch size (per --speculative-adaptive-config)")
    p.add_argument("--speculative-adaptive-config", default=None,
                   help="SGLang's adaptive config JSON: batch-size buckets -> candidate_steps")
    p.add_argument("--served-model-name", default=None, help="name the OpenAI endpoints answer to")
    p.add_argument("--enable-metrics", action="store_true", help="serve Prometheus /metrics")
    p.add_argument("--incremental-streaming-output", action="store_true",
                   help="native /generate streams deltas instead of the cumulative text")
    p.add_argument("--stream-interval", type=int, default=1, help="decode steps per streamed chunk")
    p.add_argument("--disable-flashinfer-autotune", action="store_true",
                   help="skip the simulated startup autotune")
    p.add_argument("--moe-runner-backend", default="auto", help="MoE back end (knob backend_speed_factors)")
    p.add_argument("--fp4-gemm-backend", dest="fp4_gemm_runner_backend", default="auto", help="FP4 GEMM back end")
    p.add_argument("--kv-cache-dtype", default="auto", help="KV-cache dtype, reported in /server_info")
    p.add_argument("--attention-backend", default=None, help="attention back end, reported in /server_info")
    p.add_argument("--random-seed", type=int, default=None, help="accepted as SGLang's --random-seed")
    p.add_argument("--api-key", default=None, help="require this bearer key, as SGLang does")
    add_role_flags(p)
    return p


class LaunchError(UserError):
    """A launch argument SGLang itself would refuse; printed as one line, exit 1."""


def adaptive_unsupported(algo: str, topk: int) -> Optional[str]:
    """The two of SGLang's `adaptive_unsupported_reason` rules the simulator models (it has no attention DP, two-batch
    overlap or PD-mux), in SGLang's words."""
    if algo not in ("EAGLE", "EAGLE3"):
        return f"speculative_algorithm={algo} (only EAGLE/EAGLE3 are supported)"
    return f"speculative_eagle_topk={topk} (only topk=1 is supported)" if topk != 1 else None


def _adaptive_buckets(args: dict[str, Any], algo: str, steps: int, topk: int) -> tuple[AdaptiveBucket, ...]:
    """SGLang 0.5.23's adaptive rules as the simulator models them: off with SGLang's warning for another algorithm or
    topk != 1 (`adaptive_unsupported_reason`), the config read as SGLang reads it, the start depth a candidate."""
    if not args.get("speculative_adaptive"):
        return ()
    reason = adaptive_unsupported(algo, topk)
    if reason is not None:
        log.warning("speculative_adaptive disabled: %s. Falling back to static speculative params.", reason)
        args["speculative_adaptive"] = False
        return ()
    path = args.get("speculative_adaptive_config")
    if path is None:
        raise LaunchError("--speculative-adaptive-config is required by the simulator (it models no default config)")
    try:
        buckets = parse_config(parse_json(read_input_text(path, LaunchError, "adaptive config"), path, LaunchError,
                                          "adaptive config"))
    except ValueError as e:
        raise LaunchError(f"{path}: {e}") from None
    if steps not in candidate_union(buckets):
        raise LaunchError(f"--speculative-num-steps={steps} is not in the adaptive config candidate_steps "
                          f"{candidate_union(buckets)}. Pass one of those values.")
    return tuple(buckets)


# free-form JSON stored as given: the simulator's resolved server args, served as /server_info
def resolve_args(ns: argparse.Namespace, knobs: Knobs) -> tuple[dict[str, Any], Optional[SpecParams]]:
    """Apply SGLang 0.5.23's launch rules (NEXTN→EAGLE, auto spec triple, topk=1 ⇒ draft=steps+1, cap 48)."""
    args = dict(vars(ns))
    if not PORT_MIN <= args["port"] <= PORT_MAX:  # before, bind()'s OverflowError: a traceback, reported as a bug
        raise LaunchError(f"--port {args['port']}: expected a TCP port from {PORT_MIN} to {PORT_MAX}")
    refused = role_error(args["disaggregation_mode"], args["disaggregation_transfer_backend"],
                         args["disaggregation_bootstrap_port"], args["nnodes"], args["node_rank"],
                         args["dist_init_addr"], args["tp_size"])
    if refused:
        raise LaunchError(refused)
    spec: Optional[SpecParams] = None
    algo = args.get("speculative_algorithm")
    if algo:
        algo = str(algo).upper()
        if algo == "NEXTN":
            algo = "EAGLE"
        steps, topk, draft = (args["speculative_num_steps"], args["speculative_eagle_topk"],
                              args["speculative_num_draft_tokens"])
        if steps is None:
            if topk is not None or draft is not None:
                raise LaunchError("--speculative-num-steps is unset but --speculative-eagle-topk or "
                                  "--speculative-num-draft-tokens is set: set all three or none")
            steps, topk, draft = 3, 1, 4
        topk = 1 if topk is None else topk
        if topk == 1 and draft != steps + 1:
            if draft is not None:
                log.warning("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when topk == 1")
            draft = steps + 1
        if steps < 1 or draft is None or draft < 2:
            raise LaunchError("--speculative-num-steps must be >= 1 and --speculative-num-draft-tokens >= 2")
        args.update(speculative_algorithm=algo, speculative_num_steps=steps, speculative_eagle_topk=topk,
                     speculative_num_draft_tokens=draft)
        buckets = _adaptive_buckets(args, algo, steps, topk)
        spec = SpecParams(algo, steps, topk, draft, buckets)
        if args["max_running_requests"] is None:
            log.warning("Max running requests is reset to %d for speculative decoding.", SPEC_MAX_RUNNING_DEFAULT)
            args["max_running_requests"] = SPEC_MAX_RUNNING_DEFAULT
    if args["served_model_name"] is None:
        args["served_model_name"] = args["model_path"]
    if args["random_seed"] is None:
        args["random_seed"] = knobs.seed
    if args["stream_interval"] < 1:
        raise LaunchError("--stream-interval must be >= 1")
    args["tokenizer_path"] = args["model_path"]
    args["context_length"] = knobs.context_length
    return args, spec
