"""The records an engine adapter speaks in (launch command, streaming request, HTTP request, prompt, per-request meta,
concurrency cap, stream parser, flag parser recipe) and `Engine`, the adapters' shared base: defaults that sglang,
sim and vllm override. An adapter class is the whole of an engine: its behaviour and its facts (class attributes:
label, cap flags, tuning surface, scraped metric names, packages, argv dialect, how its checkpoint and its flags are
checked); cluster/config/engines.py registers it by name, cluster/engines/registry.py hands out its facts one by one.

`Engine` is an implementation base, not the interface its users depend on: each consumer declares the narrow
protocol it needs, where it is (guidellm's BackendInterface pattern), and every adapter satisfies them structurally
(tests/unit/engines/test_protocols.py):
- the load generator: `LoadTarget` (cluster/loadgen/load_target.py: build_request, new_parser, spec_counters, the
  metrics and flush paths, headers);
- the gate: `GateTarget` (cluster/loadgen/gate.py: gate_request, parse_gate_response, headers);
- the server side: `ServerLauncher`, `ServerInfoSource`, `ServerInstruments` (cluster/server/engine_server.py: argv
  and env, version, health and info paths, resolved args, device sampler, profiler);
- the runs row: `EngineFacts` (cluster/analysis/engine_facts.py: concurrency cap, gauges, window acceptance).
Contract of the parts that cross processes:
- `launch()` returns an argv list (never a shell string) and the env additions for the server process. The
  server must listen on the given host/port and serve until SIGTERM/SIGKILL of its process group.
- `health_path` answers 200 once the server can serve; `info_paths()` are GETs whose JSON is stored in provenance;
  `flush_path` (POST) resets caches and speculative counters before each measured window (None if the engine
  has none); `metrics_path` is Prometheus text.
- `new_parser()` returns a `StreamParser` fed with each SSE `data:` payload (bytes, without the `data: ` prefix
  and never the `[DONE]` sentinel). `feed()` returns how many new output tokens that chunk carried (0 for a
  chunk that carries no tokens, e.g. a usage-only chunk). After the stream, the parser's `meta()` gives the
  server-reported per-request fields in `RequestMeta`.
- `spec_counters()` parses engine counters from Prometheus text into run-scoped speculative counters
  (`drafts`, `draft_tokens`, `accepted_tokens`, per-position `accepted_pos_<i>`), which the runner diffs
  around each measured window. Engines without such counters return {}.
"""

from __future__ import annotations

import copy
import json
import shlex
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence, Union

from cluster.kernel.gate import GateOutput
from cluster.kernel.runs import ResolvedVariant
from cluster.config.server import ArgValue
from cluster.config.engines import EngineLauncher
from cluster.config.secrets import redact_argv, redact_env
from cluster.engines.tuning_surfaces import AnyTuningSurface, GpuTuningSurface
from cluster.input_files import JsonValue

if TYPE_CHECKING:
    from cluster.telemetry.recorder import DeviceSampler


@dataclass(frozen=True)
class LaunchCommand:
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    """Additions to the inherited environment (CUDA_VISIBLE_DEVICES is set by the actor, not here)."""

    def display(self) -> str:
        """One shell-quoted line for humans (secrets redacted); never executed."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(redact_env(self.env).items()))
        cmd = shlex.join(redact_argv(self.argv))
        return f"{env} {cmd}".strip()


@dataclass(frozen=True)
class FlagParser:
    """How an engine's own interpreter builds its server's argparse parser (cluster/engines/flag_probe.py runs this
    recipe there, standard library only). Each callable is named `module:attr[.attr]`; of several candidates (the
    places different releases keep it) the first importable one is used."""

    prog: str
    """The parser's program name (its usage line)."""
    fill: tuple[str, ...]
    """Called with the new parser: adds the server's flags, returning the parser to use (or None: the same one)."""
    parser_class: tuple[str, ...] = ()
    """The parser's class (empty: argparse.ArgumentParser)."""


@dataclass(frozen=True)
class HttpRequest:
    path: str
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)
    """Per-request headers on top of the session's (the category header)."""


@dataclass
class RequestMeta:
    """Server-reported per-request fields; None where the engine does not report them."""

    prompt_tokens: Optional[int] = None
    completion_tokens: Optional[int] = None
    cached_tokens: Optional[int] = None
    spec_verify_ct: Optional[int] = None
    spec_accept_length_server: Optional[float] = None
    spec_correct_drafts_histogram: Optional[list[int]] = None
    """Verify steps by the drafts each accepted (index k: steps that accepted exactly k), SGLang's final meta_info
    field; None where the server sends none (cluster/analysis/acceptance_positions.py reads it)."""
    finish_reason: Optional[str] = None
    error: Optional[str] = None
    server_e2e_s: Optional[float] = None
    request_id: Optional[str] = None
    output_ids_tail: Optional[list[int]] = None
    malformed: Optional[str] = None
    """Why the stream broke its protocol (an undecodable chunk, a meta_info field of the wrong type): the
    request's recorded error, so a malformed answer is never counted as a good request."""
    error_event: Optional[str] = None
    """The message of an {"error": ...} event inside the stream (also the request's `error`)."""
    retractions: Optional[int] = None
    """meta_info.num_retractions on the finishing event (SGLang native); None where not stated."""
    count_went_down: Optional[tuple[int, int]] = None
    """(before, after) the first time a stated cumulative completion_tokens decreased between events."""
    counts_stated: bool = True
    """Every token-carrying event stated its count (cumulative completion_tokens, continuous usage); False once one
    was counted as one token for its text."""
    final_output_ids: Optional[int] = None
    """How many output_ids the finishing event held (None when it held none)."""
    final_event_tokens: Optional[int] = None
    """New tokens the finishing event brought."""
    events_after_finish: int = 0
    """Events after the finishing one that carried output or another finish reason (answer_invariants)."""


@dataclass(frozen=True)
class PartHistogram:
    """A Prometheus histogram whose mean per request (its _sum over its _count) is one part of a prefill/decode
    deployment's TTFT: server_metrics keeps its _sum and _count series (cluster/analysis/ttft_parts.py)."""

    metric: str
    part: str
    """the part's name; "" where `split_label` names the parts (one per value of that label)"""
    unit: str
    """"s" or "ms": the histogram's own unit, the suffix of the part's key"""
    split_label: Optional[str] = None

    @property
    def series(self) -> tuple[str, str]:
        return f"{self.metric}_sum", f"{self.metric}_count"


@dataclass(frozen=True)
class ConcurrencyCap:
    """The most requests the server runs at once as it resolved it, and where that figure was read."""

    value: int
    source: str
    """e.g. `server_info.internal_states[0].effective_max_running_requests_per_dp`."""
    declared: Optional[int] = None
    """The resolved top-level max_running_requests (None when the server reports it unset)."""
    cause: Optional[str] = None
    """Why the cap is below the declared figure where the server said so (e.g. SGLang's Mamba state-slot log line)."""


class StreamParser(ABC):
    @abstractmethod
    def feed(self, payload: bytes) -> int:
        """Take one SSE data payload; return the number of new output tokens it carried."""

    @abstractmethod
    def meta(self) -> RequestMeta:
        """Per-request server meta after the stream ended."""

    def text(self) -> str:
        """Output text (only parsers built with keep_text=True keep it; used by the correctness gate)."""
        return ""

    def output_ids(self) -> Optional[list[int]]:
        """Output token ids, where the stream carries them and the parser was built with keep_text=True."""
        return None


@dataclass(frozen=True)
class ChatTurn:
    """One message of a conversation prompt, in OpenAI's roles."""

    role: str
    """system, user or assistant."""
    content: str


@dataclass(frozen=True)
class Prompt:
    """One prompt: token ids (exact input length) and/or text, and what travels with it."""

    input_ids: Optional[tuple[int, ...]] = None
    text: Optional[str] = None
    messages: Optional[tuple[ChatTurn, ...]] = None
    """A conversation prompt's turns: what the chat API sends (text / input_ids are the same turns flattened)."""
    category: Optional[str] = None
    """The prompt's category (code, math, ...): recorded per request and sent as CATEGORY_HEADER."""
    max_tokens: Optional[int] = None
    """This request's own output budget (a length distribution, or the dataset's reference answer); None: the
    workload's fixed output_tokens."""
    chat_template_kwargs: Optional[tuple[tuple[str, Union[bool, int, float, str]], ...]] = None
    """Chat template variables the chat API sends (`chat_template_kwargs`), as sorted (name, value) pairs."""
    arrival_s: Optional[float] = None
    """A trace row's time after the trace's first row: `arrival: trace` rate points send at these, rescaled."""
    source_row: Optional[int] = None
    """Which row of its source this prompt is: the 0-based ordinal of the row in a prompt, trace or conversation
    file (never its line number: a compact JSON array holds every row on line 1), or of the seeded draw for a
    generated source. Recorded per request, so a run can prove which rows it sent (the workload audit)."""

    def __post_init__(self) -> None:
        if self.input_ids is None and self.text is None:
            raise ValueError("a prompt needs input_ids or text")


@dataclass(frozen=True)
class StreamRequest:
    """One streaming request as its caller asks for it; the adapter's build_request makes its engine's HTTP request."""

    api: str
    """The workload's API: native, completions or chat."""
    prompt: Prompt
    max_tokens: int
    """The output budget of this request."""
    ignore_eos: bool
    temperature: float
    model_name: str
    """The name the OpenAI endpoints expect."""
    rid: Optional[str] = None
    """A request id the server echoes (native API only; None: the server draws one)."""


CATEGORY_HEADER = "X-Sglbench-Category"
"""Request header carrying the prompt's category. Engines ignore unknown headers; the simulator reads it to apply
a per-category acceptance (its `category_accept_probs` knob), since it has no language model to make acceptance
depend on the content itself. Only ever sglbench's own category name, never prompt text."""


TEMPLATE_SETTING_HEADER = "X-Sglbench-Template-Setting"
"""Request header carrying the prompt's chat template variables as `name=value` pairs (value as JSON) joined by
'; ' (cluster/config/template_settings.py's setting_key). Engines ignore it; the simulator reads it to apply its
`template_accept_probs` knob. Only the workload's declared variables, never prompt text."""


def category_headers(prompt: Prompt) -> dict[str, str]:
    """The per-request headers of a prompt: its category and its chat template setting, when it has them."""
    from cluster.config.template_settings import setting_key

    out = {CATEGORY_HEADER: prompt.category} if prompt.category else {}
    # a header is ASCII: a variable named otherwise (no template could use it as a name) is left out of it
    pairs = [setting_key(k, v) for k, v in prompt.chat_template_kwargs or () if k.isascii() and k.isidentifier()]
    if pairs:
        out[TEMPLATE_SETTING_HEADER] = "; ".join(pairs)
    return out


API_KEY_ARGS = ("api-key", "api_key")
"""The server arg holding the key every request but health and metrics must carry (SGLang's and vLLM's --api-key)."""


def api_key_of(args: Mapping[str, ArgValue]) -> Optional[str]:
    """The variant's --api-key value, or None."""
    for name in API_KEY_ARGS:
        val = args.get(name)
        if isinstance(val, str) and val:
            return val
    return None


class Engine:
    """The adapters' shared base: every default here is what an engine without the feature answers. An adapter
    overrides server_args, build_request and new_parser (no engine has a default for them)."""

    name: str = ""
    """Its registered name (cluster/config/engines.py)."""
    label: str = ""
    """How messages name it (default: its name)."""
    cap_flags: frozenset[str] = frozenset()
    """Server flags (full names, dashes) that cap the requests the server runs at once (the rest wait in its queue)."""
    tuning_surface: type[AnyTuningSurface] = GpuTuningSurface
    """Its answers to the tuning stage (cluster/engines/tuning_surfaces.py)."""
    scraped_metrics: tuple[str, ...] = ()
    """Prometheus gauges and counters worth a time series in server_metrics (histograms are left to the engine's
    own dashboards, but for ttft_part_histograms' _sum and _count)."""
    ttft_part_histograms: tuple[PartHistogram, ...] = ()
    """The histograms whose means per request split a prefill/decode deployment's TTFT by role and stage."""
    packages: tuple[str, ...] = ()
    """Python distributions whose versions a run's environment records (read with the engine's interpreter)."""
    sglang_argv: bool = False
    """Its server takes SGLang's flags, so SGLang's fairness rules apply to its argv (cluster/plan/fairness.py)."""
    checkpoint_probed: bool = True
    """Preflight probes its model path even where it is not a directory here (it reads a real checkpoint)."""
    flag_parser: Optional[FlagParser] = None
    """How its own parser is built in its interpreter on the node (None: its flags are not checked there)."""
    flags_parsed_here: bool = False
    """Its flags are checked in this process by the simulator's parser (cluster/engines/flagcheck.py sim_answer)."""
    adaptive_resolved: bool = False
    """Its interpreter resolves --speculative-adaptive with SGLang's launch pipeline (engines/adaptive_check.py)."""
    module: str = ""
    """`python -m <module>` starts the server when no launcher is given."""
    health_path: str = "/health"
    flush_path: Optional[str] = "/flush_cache"
    metrics_path: str = "/metrics"
    running_gauge: Optional[str] = None
    """Prometheus gauge of requests running now (scraped into server_metrics), None when the engine has none."""
    queue_gauge: Optional[str] = None
    """Prometheus gauge of requests waiting to be scheduled."""
    cap_log_marker: Optional[str] = None
    """A substring of the server log line that states a lowered concurrency cap (kept as evidence at startup)."""
    simulated: bool = False
    """True for sglbench's simulated server: it reads no checkpoint (the variant's knobs declare the model), needs no
    GPU, and its figures are a step-time model's, not measurements (a fairness error on it is a warning only)."""
    headers: Mapping[str, str] = {}
    """Headers every call to the server sends (requests, info, flush; health and metrics too, where they are
    exempt): `Authorization: Bearer <api-key>` on an engine bound with `with_api_key`, else none. Never printed."""

    def with_api_key(self, api_key: Optional[str]) -> "Engine":
        """This adapter sending `Authorization: Bearer <api_key>` (itself when there is no key)."""
        if not api_key:
            return self
        bound = copy.copy(self)
        bound.headers = {"Authorization": f"Bearer {api_key}"}
        return bound

    def __repr__(self) -> str:  # the headers hold a secret
        return f"<{type(self).__name__} {self.name}>"

    def program(self, launcher: Optional[EngineLauncher], default_python: str) -> list[str]:
        if launcher is not None and launcher.launcher:
            return list(launcher.launcher)
        py = launcher.python if launcher is not None and launcher.python else default_python
        return [py, "-m", self.module]

    def server_args(self, variant: ResolvedVariant, host: str, port: int, version: Optional[str]) -> list[str]:
        """The server's own argv after the program (full flag names only)."""
        raise NotImplementedError(f"{type(self).__name__} builds no server argv")

    def server_env(self, variant: ResolvedVariant, version: Optional[str]) -> dict[str, str]:
        return dict(variant.env)

    def launch(
        self,
        variant: ResolvedVariant,
        host: str,
        port: int,
        launcher: Optional[EngineLauncher],
        default_python: str,
        version: Optional[str] = None,
    ) -> LaunchCommand:
        v = version or (launcher.version if launcher else None)
        argv = self.program(launcher, default_python) + self.server_args(variant, host, port, v)
        return LaunchCommand(argv=tuple(argv), env=self.server_env(variant, v))

    def version_for(self, launcher: Optional[EngineLauncher], default_python: str) -> Optional[str]:
        """The engine version launch commands are built for (the declared one unless an adapter detects it)."""
        return launcher.version if launcher else None

    def runs_on_cpu(self, variant: ResolvedVariant) -> bool:
        """True when the variant's server computes on the CPU (a test or demo server): it needs no GPU."""
        return False

    def info_paths(self, version: Optional[str]) -> dict[str, str]:
        """name → GET path of JSON documents recorded in provenance (e.g. server_info)."""
        return {}

    def endpoint_info_paths(self, version: Optional[str]) -> dict[str, str]:
        """What a run against an endpoint already running records of it: the engine's info documents (SGLang's
        /server_info where it has one) and the OpenAI-compatible /v1/models."""
        return {**self.info_paths(version), "models": "/v1/models"}

    restart_mark: Optional[tuple[str, str]] = None
    """(info document, key) whose value a server measures anew at each start, so a changed value means the server
    restarted (None: the engine has none, and a restart under a run cannot be seen)."""

    def start_mark(self, infos: Mapping[str, JsonValue]) -> Optional[str]:
        """This start's restart mark (canonical JSON of `restart_mark`'s value), or None when the server gave none."""
        if self.restart_mark is None:
            return None
        doc, key = self.restart_mark
        d = infos.get(doc)
        value = d.get(key) if isinstance(d, dict) else None
        return None if value is None else json.dumps(value, sort_keys=True)

    def profile_request(self, output_dir: str, steps: int, profile_id: str, cpu: bool) -> Optional[HttpRequest]:
        """The POST that starts a kernel profile of the next `steps` forward steps (None: the engine has none)."""
        return None

    profile_stop_path: Optional[str] = None
    """POST that stops a profile (and writes its traces)."""

    def device_sampler(self, variant: ResolvedVariant, base_url: str, gpu_ids: Sequence[str]) -> "DeviceSampler":
        """What reads this server's GPUs during its measured windows: NVML on the GPUs Ray gave it.
        TelemetryUnavailable when there is nothing to read (a CPU server, no nvidia-ml-py, no driver)."""
        from cluster.telemetry.nvml import NvmlSampler, TelemetryUnavailable

        if self.runs_on_cpu(variant):
            raise TelemetryUnavailable("the server computes on the CPU (device: cpu): no GPU to sample")
        return NvmlSampler(gpu_ids)

    def build_request(self, request: StreamRequest) -> HttpRequest:
        """The path, body and headers of one streaming request for a prompt."""
        raise NotImplementedError(f"{type(self).__name__} builds no request")

    def new_parser(self, api: str, keep_text: bool = False) -> StreamParser:
        """A parser for one request's SSE stream."""
        raise NotImplementedError(f"{type(self).__name__} parses no stream")

    def gate_request(self, text: str, max_tokens: int, model_name: str) -> HttpRequest:
        """A non-streaming greedy request for one correctness-gate prompt (OpenAI completions by default)."""
        body = {"model": model_name, "prompt": text, "max_tokens": max_tokens, "temperature": 0.0, "stream": False}
        return HttpRequest("/v1/completions", json.dumps(body).encode())

    def parse_gate_response(self, doc: Any) -> GateOutput:
        """A gate response's text, completion_tokens and finish_reason (no ids, no verify steps: OpenAI completions
        carry neither); a field of the wrong type is a MalformedAnswerError (engines/answer_fields.py)."""
        from cluster.engines.answer_fields import as_object, count_field, list_field, object_field, str_field

        w = "the /v1/completions answer"
        d = as_object(doc, w, null_ok=False)
        choice = as_object((list_field(d, "choices", w) or [{}])[0], f"{w}.choices[0]", null_ok=False)
        usage = object_field(d, "usage", w)
        out = GateOutput(text=str_field(choice, "text", f"{w}.choices[0]") or "",
                         completion_tokens=count_field(usage, "completion_tokens", f"{w}.usage"),
                         finish_reason=str_field(choice, "finish_reason", f"{w}.choices[0]"))
        from cluster.engines.answer_invariants import checked_gate_output, counts_answer

        return checked_gate_output(out, counts_answer(usage, f"{w}.usage"))

    def parse_info(self, name: str, doc: Any) -> Any:
        """An info document as polled (`info_paths()[name]`), the fields sglbench reads from it type-checked: a
        MalformedAnswerError where one has the wrong type, so no str reaches an int column later."""
        return doc

    def resolved_args(self, infos: Mapping[str, JsonValue]) -> dict[str, JsonValue]:
        """Resolved server args from the recorded info documents (engine-specific)."""
        return {}

    def concurrency_cap(self, infos: Mapping[str, JsonValue],
                        log_lines: Sequence[str] = ()) -> Optional[ConcurrencyCap]:
        """The resolved cap on running requests from the recorded info documents and the server log lines that
        matched cap_log_marker (None when not reported)."""
        return None

    def spec_counters(self, metrics_text: str) -> dict[str, float]:
        return {}

    def window_acceptance(self, before: Mapping[str, float], after: Mapping[str, float],
                          n_requests: int) -> dict[str, float]:
        """Run-scoped speculative metrics from counters diffed around a window ({} when the engine has none).
        `accept_length` here follows the per-request definition: tokens per verify step after the prefill token."""
        return {}
