"""The simulator's knobs: one model for the experiment's `sim:` blocks and the simulated server's env SGLBENCH_SIM.

Declared here, with the rest of what a user writes, so the config does not depend on the simulator; the simulator
reads them (cluster/sim/model.py) as its configuration."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, Mapping, Optional, Union

from pydantic import (BaseModel, ConfigDict, Field, Strict, StrictBool, StrictStr, ValidationError,
                      ValidationInfo, field_validator)

from cluster.errors import UserError
from cluster.input_files import JsonObject, JsonValue


class KnobError(UserError):
    """A bad simulator knob (the spec's `sim:` block, or env SGLBENCH_SIM at the server)."""


def _knob_value(v: Any, info: ValidationInfo) -> Any:
    # YAML turns yes/no/on/off into booleans, which pydantic would silently read as 1/0 for a number knob
    values = v if isinstance(v, (list, tuple)) else [v]
    name = info.field_name or ""
    if name == "fail_start" and not isinstance(v, (bool, str)):
        raise ValueError("expected true/false or an error message")
    field_ann = str(Knobs.model_fields[name].annotation) if name in Knobs.model_fields else ""
    if "bool" not in field_ann and any(isinstance(x, bool) for x in values):
        raise ValueError("expected a number or string, got a boolean (YAML reads yes/no/on/off as booleans)")
    return v


# Every knob is strict (a quoted "12" is refused, not read as 12) and bounded by its domain:
_Ms = Annotated[float, Strict(), Field(ge=0.0, le=3_600_000.0)]  # model ms of one step: at most an hour
_Seconds = Annotated[float, Strict(), Field(ge=0.0, le=86_400.0)]  # a wait: at most a day (a longer one is a hang)
_Count = Annotated[int, Strict(), Field(ge=0, le=10_000_000)]  # tokens or requests of one simulated server's life
_Positive = Annotated[float, Strict(), Field(gt=0.0, le=100.0)]  # a step-time multiplier: past 100x no tuning effect
_Prob = Annotated[float, Strict(), Field(ge=0.0, le=1.0)]  # a probability
_Watts = Annotated[float, Strict(), Field(ge=0.0, le=10_000.0)]  # one GPU's power: the largest draw about 1.5 kW
_Mhz = Annotated[int, Strict(), Field(ge=1, le=100_000)]  # a GPU clock: a few GHz
_Int32 = Annotated[int, Strict(), Field(ge=1, le=2**31 - 1)]  # SGLang's token counts index int32 tensors
_Shape = Annotated[int, Strict(), Field(ge=1, le=1 << 20)]  # a MoE dimension: the largest released are below 2^16


QWEN35_MTP_CITED_ACCEPT_LENGTH = 3.368
"""Public acceptance length of Qwen3.5's built-in MTP head at 3 draft steps (topk 1) on SGLang: PR #18906 reports
3.368 (figure as quoted in sglbench issue 15, not re-read here); SGLang's own Qwen3.5 FP4 MTP CI test also asserts a
figure above 3.3. Tokens per verify step, the bonus token included — the quantity expected_accept_length returns."""

QWEN35_MTP_ACCEPT_PROBS = (0.93, 0.86, 0.8)
"""Per-position acceptance calibrated to QWEN35_MTP_CITED_ACCEPT_LENGTH: 1 + .93 + .93·.86 + .93·.86·.8 = 3.37 at
depth 3 (1.93 at depth 1, 2.73 at depth 2). The earlier 0.8/0.65/0.5 gave 2.58, well below every public figure.
The decay across positions is this tool's choice (the PR reports only the mean); tests/unit/sim/test_model.py holds
the default within 0.01 of the cited figure."""


class Knobs(BaseModel):
    """Simulator knobs, ONE model for the spec's `sim:` blocks (experiment and variant level, merged per knob) and
    the simulated server (JSON in env SGLBENCH_SIM, validated here again). Defaults are calibrated to the Qwen3.5
    NVFP4 story (≈13.9 ms/step → ≈72 tok/s at batch 1); the GPU/tuning knobs are read by cluster/sim/tuning.py."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, use_attribute_docstrings=True)

    seed: Annotated[int, Strict(), Field(ge=0, le=2**63 - 1)] = 0
    """Seed of the simulated acceptance draws."""
    time_scale: Annotated[float, Strict(), Field(ge=0.0, le=1000.0)] = 1.0
    """Wall seconds per model second (0: no sleeping at all)."""
    tuned_speed_factor: _Positive = 1.0
    """Step-time multiplier of a tuned variant (< 1 is faster)."""
    window_speed_spread: Annotated[float, Strict(), Field(ge=0.0, le=0.9)] = 0.0
    """Run-to-run noise: at every /flush_cache (once per measured window) step times take a new multiplier
    1 + spread·u, u uniform in [-1, 1] from `seed`, as throughput varies between repeats on a real node (0: windows
    alike)."""
    decode_base_ms: _Ms = 13.85
    """Model ms of one decode step at batch 1."""
    decode_per_req_ms: _Ms = 0.05
    """Model ms a decode step grows per running request."""
    prefill_per_token_ms: _Ms = 0.02
    """Model ms of prefill per prompt token."""
    draft_step_ms: _Ms = 0.9
    """Model ms of one MTP draft step."""
    verify_per_draft_token_ms: _Ms = 0.3
    """Model ms the verify step grows per draft token."""
    accept_probs: Annotated[tuple[_Prob, ...], Field(min_length=1)] = (
        QWEN35_MTP_ACCEPT_PROBS)
    """Per-draft-position acceptance probabilities (the last one repeats; default: SGLang PR #18906's Qwen3.5 MTP)."""
    category_accept_probs: Mapping[StrictStr, Annotated[tuple[_Prob, ...], Field(min_length=1)]] = Field(
        default_factory=dict)
    """Per prompt category, acceptance probabilities used instead of `accept_probs` for requests whose
    X-Sglbench-Category header names it (the load client sends each prompt's category there). The simulator has
    no language model, so the way speculative acceptance depends on what is asked (code accepts more drafts
    than chat) is declared here by construction, never inferred; other categories use `accept_probs`."""
    template_accept_probs: Mapping[StrictStr, Annotated[tuple[_Prob, ...], Field(min_length=1)]] = Field(
        default_factory=dict)
    """SIMULATED: per chat template setting, written `name=value` with the value as JSON (`enable_thinking=false`),
    acceptance probabilities used instead of `accept_probs` for requests rendered with it (the load client names
    each request's template variables in the X-Sglbench-Template-Setting header). Real engines accept drafts
    differently with thinking on and off (InferenceX records 2.49 and 2.97 tokens per step for one MTP model); the
    simulator has no language model, so that difference is declared here by construction, never inferred. A
    category's own entry still wins; the first setting of the request found here is used."""
    dp_accept_probs: tuple[Annotated[tuple[_Prob, ...], Field(min_length=1)], ...] = ()
    """Attention data parallelism with ranks that accept differently: one entry per DP rank, its per-draft-position
    acceptance probabilities in place of `accept_probs` (a category's own entry still wins). Requests are dealt to
    the ranks in arrival order; /server_info then holds one internal_states entry per rank, each with its own
    avg_spec_accept_length and a share of the running-request cap, and dp_size = the number of ranks (SGLang issue
    #34743: a client that reads internal_states[0] reports rank 0's acceptance). Empty: one rank."""
    answers: StrictBool = True
    """Answer the correctness gate's questions correctly."""
    late_divergence_after: Optional[_Count] = None
    """Greedy output diverges from the baseline's after this many tokens."""
    crash_after_requests: Optional[_Count] = None
    """The server exits after this many requests (fault tests)."""
    start_delay_s: _Seconds = 0.0
    """Seconds before the server becomes healthy."""
    fail_start: Union[StrictBool, StrictStr] = False
    """Fail at start (true, or the error message to print)."""
    garbage_output: StrictBool = False
    """Produce degenerate output (fails the correctness gate)."""
    wrong_answers_in_mixed_batch: StrictBool = False
    """Answer arithmetic questions wrongly (the last digit off by one) when the request arrives while others are
    running, so it joins a mixed batch; alone it answers right (FP4 kernels wrong only in mixed batches, sglang PR
    #20047). Only the accuracy task's answers are plausible numbers that change; the output stays sane text."""
    mtp_absent: StrictBool = False
    """Behave as if the MTP weights were missing (acceptance length about 1)."""
    radix_cache: StrictBool = True
    """Reuse cached prefixes as SGLang's radix cache does."""
    max_total_num_tokens: _Int32 = 1_000_000
    """KV-cache capacity in tokens."""
    context_length: _Int32 = 262144
    """Longest prompt plus output accepted."""
    decode_log_interval: Annotated[int, Strict(), Field(ge=1, le=1_000_000)] = 40
    """Decode batches between scheduler log lines."""
    fixed_ttft_ms: Optional[_Ms] = None
    """Fixed-latency mode (native streams; set either knob): exact TTFT from receipt, independent of batch."""
    fixed_itl_ms: Optional[_Ms] = None
    """Fixed-latency mode: one token per chunk, one chunk per write, this many ms apart."""
    # GPU and tuning knobs (cluster/sim/tuning.py): the simulated GPU, and what a valid tuning artifact is worth
    gpu_name: StrictStr = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    """GPU name the simulated server reports."""
    compute_capability: StrictStr = "12.0"
    """Compute capability the simulated server reports."""
    driver_version: StrictStr = "sim"
    """Driver version the simulated server reports."""
    flashinfer_version: StrictStr = "0.6.12"
    """FlashInfer version the simulated server reports."""
    triton_version: StrictStr = "3.4.0"
    """Triton version the simulated server reports."""
    autotune_speed_factor: _Positive = 0.92
    """Step-time multiplier with a valid FlashInfer autotune cache (< 1 is faster)."""
    moe_config_speed_factor: _Positive = 0.96
    """Step-time multiplier with a valid Triton MoE config for a Triton MoE runner."""
    autotune_time_s: _Seconds = 2.0
    """Model seconds the startup autotune takes when no cache is found (times the sim's time_scale)."""
    garbage_backends: tuple[StrictStr, ...] = ()
    """Back ends that produce garbage (NaN text), so the correctness gate can be exercised."""
    backend_speed_factors: Mapping[StrictStr, _Positive] = Field(default_factory=dict)
    """Back-end name -> step-time multiplier."""
    moe_num_experts: _Shape = 512
    """MoE shape the simulated checkpoint declares: experts."""
    moe_intermediate_size: _Shape = 1024
    """MoE shape: intermediate size."""
    moe_hidden_size: _Shape = 4096
    """MoE shape: hidden size."""
    moe_top_k: _Shape = 10
    """MoE shape: experts per token."""
    moe_dtype: StrictStr = "auto"
    """MoE dtype the Triton config is tuned for."""
    # the simulated GPU device (cluster/sim/device.py): power and clocks that follow the load, an injectable throttle
    gpu_idle_w: _Watts = 90.0
    """Power of one simulated GPU with nothing scheduled, W."""
    gpu_busy_w: _Watts = 420.0
    """Power of one simulated GPU while a step of one request runs, W."""
    gpu_busy_w_per_req: _Watts = 2.0
    """Extra power per further request in the step's batch, W."""
    gpu_power_limit_w: Annotated[float, Strict(), Field(gt=0.0, le=10_000.0)] = 600.0
    """Above it the device caps power and lowers its SM clock in proportion (reason sw_power_cap)."""
    gpu_sm_clock_mhz: _Mhz = 2430
    """SM clock while busy and unthrottled (boost)."""
    gpu_idle_sm_clock_mhz: _Mhz = 600
    """SM clock of an idle simulated GPU, MHz."""
    gpu_mem_clock_mhz: _Mhz = 14001
    """Memory clock the simulated GPU reports, MHz."""
    gpu_memory_bytes: Annotated[int, Strict(), Field(ge=1, le=2**50)] = 96 * 1024**3  # 1 PiB
    """Device memory of one simulated GPU (the RTX PRO 6000's 96 GiB); 88% reads as used, bytes."""
    gpu_throttle_after_s: Optional[_Seconds] = None
    """Injected throttle: this many wall seconds after the server started, the SM clock drops to
    gpu_throttle_clock_mhz for good and every step takes longer in proportion (None: never)."""
    gpu_throttle_clock_mhz: _Mhz = 1400
    """SM clock once the injected throttle starts, MHz."""
    gpu_throttle_reason: Literal["thermal", "power"] = "thermal"
    """The clock-event reason the injected throttle reports (sw_thermal, or sw_power_cap)."""
    # prefill/decode roles (cluster/sim/disagg.py): the simulated KV transfer from a prefill to a decode server
    kv_bytes_per_token: Annotated[int, Strict(), Field(ge=0, le=1 << 30)] = 30720
    """SIMULATED: KV bytes one prompt token moves from prefill to decode (default: 15 full-attention layers x K and
    V x 2 KV heads x 256 x 2 bytes, the simulator's stand-in for a Qwen3.5-style hybrid model, not measured)."""
    kv_transfer_gb_s: Annotated[float, Strict(), Field(gt=0.0, le=10_000.0)] = 5.0
    """SIMULATED: KV transfer speed between a prefill and a decode server, GB/s (a modest default, well below an
    RDMA NIC's line rate); the transfer takes kv_bytes_per_token x prompt tokens / this, times time_scale."""

    _no_bools = field_validator("*", mode="before")(classmethod(lambda cls, v, info: _knob_value(v, info)))

    @field_validator("template_accept_probs")
    @classmethod
    def _setting_keys(cls, v: Mapping[str, tuple[float, ...]]) -> Mapping[str, tuple[float, ...]]:
        for key in v:
            name, eq, value = key.partition("=")
            try:
                ok = bool(eq) and name.isidentifier() and json.dumps(json.loads(value)) == value
            except ValueError:
                ok = False
            if not ok:
                raise ValueError(f"template_accept_probs key {key!r}: expected name=value with the value as JSON, "
                                 "e.g. 'enable_thinking=false' or 'reasoning_effort=\"low\"'")
        return v

    @classmethod
    def from_mapping(cls, raw: Optional[JsonObject]) -> "Knobs":
        """Validate knobs from JSON (env SGLBENCH_SIM); KnobError names the first bad knob and what it expects."""
        try:
            return cls.model_validate(dict(raw or {}))
        except ValidationError as e:
            err = e.errors()[0]
            name = ".".join(str(p) for p in err["loc"]) or "?"
            if err["type"] == "extra_forbidden":
                raise KnobError(f"SGLBENCH_SIM: unknown knob(s) {sorted(set(raw or {}) - set(cls.model_fields))}; "
                                f"expected some of {sorted(cls.model_fields)}", field=name) from None
            msg = str(err["msg"]).removeprefix("Value error, ")
            raise KnobError(f"SGLBENCH_SIM: knob {name!r}: {msg}", field=name, expected=msg) from None

    def merged(self, over: "Knobs") -> "Knobs":
        """These knobs with every knob `over` sets explicitly taken from `over` (a variant's `sim:` over the
        experiment's)."""
        return Knobs.model_validate({**self.model_dump(exclude_unset=True), **over.model_dump(exclude_unset=True)})

    def wire(self) -> dict[str, JsonValue]:
        """The knobs as given (unset ones left to their defaults), JSON-ready: env SGLBENCH_SIM and run keys."""
        out: dict[str, JsonValue] = self.model_dump(mode="json", exclude_unset=True)
        return out
