"""What a metric is: one declaration (name, unit, definition, source columns, formula, direction, interval, column,
speedup) read by the run row, the definitions, the interval list and every table and export; and the registry of them.

A metric is declared once, with declare() (sglbench's own are at the end of this module): summarize_run evaluates
its formula into the run row (stored as m_<name>; a name outside the runs schema's fixed m_ columns,
kernel/run_row.METRIC_NAMES, becomes an extra m_ column), METRIC_DEFINITIONS and the report list its definition,
compare_with_ci estimates an interval for it, compare_view and `results compare --ci` show its column,
and the CSV/JSON exports carry `<name>`, `<name>_lo`, `<name>_hi`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Literal, Optional

import numpy as np

from cluster.analysis.gpu_metrics import BUSY_IN_FLIGHT_SHARE, BUSY_UTIL_PCT_FLOOR
from cluster.analysis.ttft_parts import CATALOG_PARTS
from cluster.analysis.request_metrics import ACCEPT, E2E, ITL_CHUNK, ITL_TOKEN, LAG, NS_PER_MS, TPOT, TTFT, Quantity
from cluster.kernel.window_figures import Acceptance, ClientLag

Better = Literal["higher", "lower"]
Producer = Literal["requests", "gpu", "steady", "per_gpu", "server"]
Shown = Literal["always", "when_any", "when_positive"]


@dataclass(frozen=True)
class RunInputs:
    """One run's request and chunk records as the formulas read them (built once per run by
    metrics.run_inputs; arrays over ok requests unless named otherwise)."""

    n_requests: int
    """every request of the window, ok or not"""
    n_ok: int
    duration_s: float
    ttft_ms: np.ndarray
    e2e_ms: np.ndarray
    tpot_ms: np.ndarray
    """ok requests with more than one output token"""
    itl_chunk_ms: np.ndarray
    """gaps between token-bearing chunks, pooled"""
    itl_token_ms: np.ndarray
    chunk_tokens: np.ndarray
    """tokens of every token-bearing chunk of an ok request"""
    output_tokens: np.ndarray
    input_tokens: np.ndarray
    acceptance: Acceptance
    accept_per_request: np.ndarray
    """(output_tokens - 1) / spec_verify_ct of the ok requests with spec_verify_ct > 0"""
    lag: Optional[ClientLag]
    slo_good: Optional[int]
    """ok requests meeting every SLO set; None when no SLO is set"""
    cached_tokens: np.ndarray
    prompt_tokens: np.ndarray
    """both over the ok requests that report both"""
    finish_reasons: Optional[np.ndarray]
    """None when the records carry no finish_reason"""
    worker_requests: dict[str, int] = field(default_factory=dict)
    """requests per worker that served them, as the gateway named it (requests.worker; every request that names
    one, ok or not); {} when no request does (no gateway in front, or a dataset written before the column)"""
    workers: int = 0
    """the workers whose URLs the gateway's header names, where the deployment says: its replicas, or its decode
    servers in PD mode (so a worker that served none counts); 0: unknown, only the workers named count"""
    _percentiles: dict[tuple[str, tuple[float, ...]], np.ndarray] = field(default_factory=dict, compare=False,
                                                                          repr=False)

    def percentile(self, array: str, q: float, together: tuple[float, ...]) -> Optional[float]:
        """The q-th percentile of one of the arrays (numpy's linear interpolation; None when empty), computed in
        one call with the other percentiles `together` of that array."""
        x: np.ndarray = getattr(self, array)
        if x.size == 0:
            return None
        key = (array, together)
        if key not in self._percentiles:
            self._percentiles[key] = np.percentile(x, list(together))
        return float(self._percentiles[key][together.index(q)])


Formula = Callable[[RunInputs], Optional[float]]


@dataclass(frozen=True)
class Interval:
    """The metric gets a 95% interval in compare --ci: a bootstrap of `stat` over the requests of the ok repeats
    (request_field: the per-request array of comparison.request_arrays) or of the per-run value over repeats."""

    stat: str = "mean"
    request_field: Optional[str] = None
    draw: int = 1_000
    """Its turn in a cell's seeded random stream: intervals draw in this order, so a metric declared later (the
    default) leaves every existing interval as it was."""


@dataclass(frozen=True)
class Column:
    """The metric's column in the compare table: label, digits, a display scale (100 for a share shown in %), its
    place among the metric columns, and when the terminal's `compare --ci` table shows it."""

    label: str
    digits: int = 1
    scale: float = 1.0
    at: float = 1_000
    shown: Optional[Shown] = None
    """always | when_any (some row has a value) | when_positive (some row above 0) | None (csv/markdown/json only)"""
    note: Optional[tuple[str, str]] = None
    """(ci column, suffix): the suffix follows a cell whose row has that column set"""


@dataclass(frozen=True)
class Speedup:
    """compare --ci estimates the variant / baseline ratio of this metric (> 1: the variant is better, by the
    metric's direction) as `<column>`, `_lo`, `_hi`, `_p`, `_verdict`, one Holm family each."""

    column: str
    draw: int
    """its turn among the speedups (seeded streams and families), as Interval.draw"""
    label: Optional[str] = None
    at: int = 1_000
    shown: bool = False


@dataclass(frozen=True)
class Mean:
    """The metric's column in the plain compare table (its mean over a point's ok repeats): its place among the
    exported columns, and its header, digits, place and mark in the terminal's table (short None: exports only)."""

    at: int = 1_000
    short: Optional[str] = None
    digits: int = 1
    short_at: int = 1_000
    mark: Optional[tuple[str, str]] = None
    """(compare column, suffix): the suffix follows a cell whose row has that column set"""


@dataclass(frozen=True)
class Metric:
    """One metric, declared once."""

    name: str
    unit: str
    definition: str
    sources: tuple[str, ...]
    """the stored columns it is computed from"""
    formula: Optional[Formula] = None
    """None: its producer computes it (gpu_metrics.summarize_gpu from telemetry; steady_state for the stretch;
    per_gpu from `per_gpu_of` when a table is read; server: the
    ttft_parts from the servers' histograms)"""
    producer: Producer = "requests"
    better: Optional[Better] = None
    interval: Optional[Interval] = None
    column: Optional[Column] = None
    speedup: Optional[Speedup] = None
    mean: Optional[Mean] = None
    report_at: Optional[int] = None
    """its place in the report's metric definitions (None: not listed)"""
    runs_column: str = ""
    """the runs table's column ("": m_<name>); a per-GPU metric's is its own name, in the compare tables only"""
    per_gpu_of: Optional[str] = None
    """producer per_gpu: the metric this one divides by the GPUs of the deployment (per_gpu()); not stored in the
    runs table, computed where a compare table is built (cluster/analysis/per_gpu.py)"""

    @property
    def stored(self) -> str:
        return self.runs_column or f"m_{self.name}"


_DECLARED: dict[str, Metric] = {}


def declare(metric: Metric) -> Metric:
    """Register a metric: every consumer reads it from here on. A name declared twice is a ValueError."""
    if metric.name in _DECLARED:
        raise ValueError(f"metric {metric.name!r} is declared twice")
    if metric.producer == "requests" and metric.formula is None:
        raise ValueError(f"metric {metric.name!r}: a request metric needs its formula")
    if (metric.producer == "per_gpu") != (metric.per_gpu_of is not None):
        raise ValueError(f"metric {metric.name!r}: a per-GPU metric, and only one, names the metric it divides")
    if metric.per_gpu_of is not None and metric.per_gpu_of not in _DECLARED:
        raise ValueError(f"metric {metric.name!r}: divides {metric.per_gpu_of!r}, which is not declared before it")
    _DECLARED[metric.name] = metric
    return metric


def withdraw(name: str) -> None:
    """Unregister a metric (a test's throwaway declaration)."""
    del _DECLARED[name]


def declared(producer: Optional[Producer] = None) -> tuple[Metric, ...]:
    """Every declared metric in declaration order (of one producer)."""
    return tuple(m for m in _DECLARED.values() if producer is None or m.producer == producer)


def metric(name: str) -> Metric:
    """The declaration of a metric by name (KeyError naming it when none is declared)."""
    return _DECLARED[name]


def stored(name: str) -> str:
    """The runs column a declared metric is read from (m_<name>, or its own column)."""
    return _DECLARED[name].stored


def speedup_column(name: str) -> str:
    """The compare column of a declared metric's speedup (ValueError naming it when it has none)."""
    sp = _DECLARED[name].speedup
    if sp is None:
        raise ValueError(f"metric {name!r} is declared without a speedup")
    return sp.column


def definitions(producer: Optional[Producer] = None) -> dict[str, str]:
    """name → its definition, in declaration order."""
    return {m.name: m.definition for m in declared(producer)}


def with_intervals() -> tuple[Metric, ...]:
    """The metrics compare --ci estimates an interval for, in their draw order."""
    got = [m for m in declared() if m.interval is not None]
    return tuple(sorted(got, key=lambda m: m.interval.draw if m.interval else 0))


def with_speedups() -> tuple[Metric, ...]:
    """The metrics compare --ci gives a speedup over the baseline, in their draw order."""
    got = [m for m in declared() if m.speedup is not None]
    return tuple(sorted(got, key=lambda m: m.speedup.draw if m.speedup else 0))


def with_means() -> tuple[Metric, ...]:
    """The metrics of the plain compare table, in their places."""
    return tuple(sorted((m for m in declared() if m.mean is not None), key=lambda m: m.mean.at if m.mean else 0))


def terminal_means() -> list[tuple[str, Mean]]:
    """(metric, its Mean) of the plain compare table's terminal columns, in their places."""
    got = [(m.name, m.mean) for m in declared() if m.mean is not None and m.mean.short is not None]
    return sorted(got, key=lambda t: t[1].short_at)


def ratio(num: float, den: float) -> Optional[float]:
    """num / den, None when den is not positive."""
    return float(num) / float(den) if den > 0 else None


def per_s(value: float, r: RunInputs) -> Optional[float]:
    """A count over the window's duration (None for a window without one)."""
    return value / r.duration_s if r.duration_s > 0 else None


def mean_of(x: np.ndarray) -> Optional[float]:
    return float(np.mean(x)) if x.size else None


def per_gpu(value: Optional[float], gpus: Optional[float]) -> Optional[float]:
    """A figure per GPU of the deployment: value / gpus; None when either is unknown (None or NaN) or gpus is not
    positive (an endpoint already running holds no GPU of sglbench's: 0 means not known, never a division)."""
    if value is None or gpus is None or not (np.isfinite(value) and np.isfinite(gpus)) or gpus <= 0:
        return None
    return float(value) / float(gpus)


def _per_gpu(of: str, unit: str, mean: Optional[Mean] = None, column: Optional[Column] = None) -> None:
    src = _DECLARED[of]
    declare(Metric(f"{of}_per_gpu", unit, f"{of} / gpus: {src.unit} per GPU the deployment's server processes "
                   "held (runs column gpus; empty for an endpoint already running, whose GPUs are not known)",
                   (src.stored, "gpus"), producer="per_gpu", better=src.better, column=column, mean=mean,
                   runs_column=f"{of}_per_gpu", per_gpu_of=of))



# sglbench's metrics. The run metrics' order is the runs table's m_ column order (kernel/run_row.METRIC_NAMES, then
# GPU_METRIC_NAMES: the schema's fixed columns, tests/unit/analysis/test_metric_catalog.py holds it).

_PERCENTILES = (50.0, 90.0, 99.0)
_CHUNK_SOURCES = ("arrival_ns", "chunk_index", "tokens")
_OUT_SOURCES = ("completion_tokens", "client_tokens")
_IN_SOURCES = ("prompt_tokens", "prompt_tokens_sent")


def _stat(array: str, stat: str) -> Formula:
    if stat == "mean":
        return lambda r: mean_of(getattr(r, array))
    q = float(stat[1:])
    return lambda r: r.percentile(array, q, _PERCENTILES)


def _latency(q: Quantity, stat: str, interval: Optional[Interval] = None, column: Optional[Column] = None,
             speedup: Optional[Speedup] = None, mean: Optional[Mean] = None, report_at: Optional[int] = None) -> Metric:
    return declare(Metric(f"{q.name}_{stat}", q.unit, f"{q.describe()}; {stat}", q.depends, _stat(q.name, stat),
                          better="lower", interval=interval, column=column, speedup=speedup, mean=mean,
                          report_at=report_at))


def _count(name: str, definition: str, formula: Formula,
           sources: tuple[str, ...] = ("error", "first_chunk_ns")) -> None:
    declare(Metric(name, "requests", definition, sources, formula))


def _output_tok_s(r: RunInputs) -> Optional[float]:
    return per_s(float(r.output_tokens.sum()), r)


def _input_tok_s(r: RunInputs) -> Optional[float]:
    return per_s(float(r.input_tokens.sum()), r)


def _total_tok_s(r: RunInputs) -> Optional[float]:
    out, inp = _output_tok_s(r), _input_tok_s(r)
    return None if out is None or inp is None else out + inp


def _per_user(r: RunInputs) -> Optional[float]:
    e2e_s = r.e2e_ms / 1e3
    pos = e2e_s > 0
    return float(np.mean(r.output_tokens[pos] / e2e_s[pos])) if pos.any() else None


def _lag(which: str) -> Formula:
    return lambda r: None if r.lag is None else float(getattr(r.lag, which)) / NS_PER_MS


def _finish(reason: str) -> Formula:
    return lambda r: None if r.finish_reasons is None else float((r.finish_reasons == reason).sum())


def _eos_mean(r: RunInputs) -> Optional[float]:
    if r.finish_reasons is None:
        return None
    stop = r.finish_reasons == "stop"
    return float(r.output_tokens[stop].mean()) if stop.any() else None


def _worker_imbalance(r: RunInputs) -> Optional[float]:
    counts = r.worker_requests
    total = sum(counts.values())
    if not total:
        return None
    # max share / mean share, the mean over every worker (max(count) / total) / (1 / workers)
    return max(counts.values()) * max(len(counts), r.workers) / total


def _gpu(name: str, unit: str, definition: str, better: Optional[Better] = None,
         interval: Optional[Interval] = None, column: Optional[Column] = None) -> None:
    declare(Metric(name, unit, definition, ("gpu_metrics",), producer="gpu", better=better, interval=interval,
                   column=column))


_count("n_requests", "requests sent in the measured window", lambda r: float(r.n_requests), ("request_index",))
_count("n_ok", "requests without error that received at least one chunk", lambda r: float(r.n_ok))
_count("n_errors", "n_requests - n_ok", lambda r: float(r.n_requests - r.n_ok))
declare(Metric("error_rate", "share", "n_errors / n_requests", ("error", "first_chunk_ns"),
               lambda r: ratio(r.n_requests - r.n_ok, r.n_requests), better="lower"))
_latency(TTFT, "mean")
_latency(TTFT, "p50", Interval("p50", "ttft_ms", draw=2), Column("TTFT p50 ms", 1, at=2), mean=Mean(at=2),
         report_at=1)
_latency(TTFT, "p90")
_latency(TTFT, "p99", Interval("p99", "ttft_ms", draw=3), Column("TTFT p99 ms", 1, at=3, shown="always"),
         mean=Mean(at=3, short="TTFT99", short_at=2), report_at=2)
_latency(E2E, "mean")
_latency(E2E, "p50")
_latency(E2E, "p90")
_latency(E2E, "p99", Interval("p99", "e2e_ms", draw=5), Column("E2E p99 ms", 0, at=5), report_at=4)
_latency(TPOT, "mean", Interval("mean", "tpot_ms", draw=4), Column("TPOT mean ms", 2, at=4, shown="always"),
         Speedup("speedup_tpot", draw=1, label="speedup TPOT", at=11, shown=True),
         Mean(at=4, short="TPOT", digits=2, short_at=3), report_at=3)
_latency(TPOT, "p50", mean=Mean(at=5))
_latency(TPOT, "p90")
_latency(TPOT, "p99")
_latency(ITL_CHUNK, "mean")
_latency(ITL_CHUNK, "p50", Interval(draw=7), Column("ITL/chunk p50 ms", 2, at=6), mean=Mean(at=6), report_at=5)
_latency(ITL_CHUNK, "p90")
_latency(ITL_CHUNK, "p99")
_latency(ITL_TOKEN, "mean")
_latency(ITL_TOKEN, "p50", Interval(draw=8), Column("ITL/token p50 ms", 2, at=7),
         mean=Mean(at=7, short="ITL/tok", digits=2, short_at=4), report_at=6)
_latency(ITL_TOKEN, "p90")
_latency(ITL_TOKEN, "p99")
declare(Metric("tokens_per_chunk_mean", "tokens/chunk",
               "mean tokens per token-bearing chunk (>1 means multi-token, e.g. speculative, chunks)", _CHUNK_SOURCES,
               lambda r: mean_of(r.chunk_tokens), better="higher", interval=Interval(draw=9),
               column=Column("tokens/chunk", 2, at=8), report_at=7))
declare(Metric("tokens_per_chunk_p50", "tokens/chunk", "median tokens per token-bearing chunk", _CHUNK_SOURCES,
               lambda r: r.percentile("chunk_tokens", 50.0, (50.0,)), better="higher"))
declare(Metric("request_throughput_rps", "req/s", "n_ok / duration_s (SGLang/vLLM request_throughput)",
               ("error", "first_chunk_ns"), lambda r: per_s(r.n_ok, r), better="higher", mean=Mean(at=0)))
declare(Metric("output_tok_s", "tok/s", "sum of output tokens (server count, client count if missing) / duration_s "
               "(SGLang/vLLM output_throughput)", _OUT_SOURCES, _output_tok_s, better="higher",
               interval=Interval(draw=0), column=Column("output tok/s", 1, at=1, shown="always"),
               speedup=Speedup("speedup_tok_s", draw=0, label="speedup tok/s", at=10, shown=True),
               mean=Mean(at=1, short="tok/s", short_at=1), report_at=0))
declare(Metric("input_tok_s", "tok/s", "sum of input tokens (server prompt_tokens, else sent) / duration_s "
               "(SGLang/vLLM input_throughput)", _IN_SOURCES, _input_tok_s, better="higher"))
declare(Metric("total_tok_s", "tok/s", "input_tok_s + output_tok_s (SGLang/vLLM total_throughput)",
               _OUT_SOURCES + _IN_SOURCES, _total_tok_s, better="higher"))
declare(Metric("per_user_tok_s_mean", "tok/s", "mean of output_tokens / E2E_s per request (GuideLLM "
               "output_tokens_per_second, llmperf style)", _OUT_SOURCES + E2E.depends, _per_user, better="higher",
               interval=Interval(draw=10), report_at=8))
declare(Metric("concurrency_mean", "requests", "sum of E2E_s / duration_s: mean requests in flight (SGLang "
               "concurrency)", E2E.depends, lambda r: per_s(float((r.e2e_ms / 1e3).sum()), r)))
declare(Metric("accept_length", "tokens/verify step", "sum(output_tokens - 1) / sum(spec_verify_ct): tokens per "
               "verify step after the prefill token (sglbench, all engines)", _OUT_SOURCES + ("spec_verify_ct",),
               lambda r: r.acceptance.accept_length, better="higher", interval=Interval(draw=6),
               column=Column("accept length", 2, at=9, shown="always"),
               mean=Mean(at=8, short="accept", digits=2, short_at=5), report_at=9))
declare(Metric("sglang_accept_length", "tokens/verify step", "sum(completion_tokens) / sum(spec_verify_ct) "
               "(SGLang's meta_info definition)", _OUT_SOURCES + ("spec_verify_ct",),
               lambda r: r.acceptance.sglang_accept_length, better="higher"))
for _k, _pct in ((10.0, "10th percentile"), (50.0, "median"), (90.0, "90th percentile")):
    declare(Metric(f"accept_length_p{_k:g}", ACCEPT.unit, f"{_pct} of {ACCEPT.describe()}",
                   ACCEPT.depends, (lambda k: lambda r: r.percentile("accept_per_request", k, (10.0, 50.0, 90.0)))(_k),
                   better="higher"))
declare(Metric("lag_ms_p50", "ms", f"median {LAG.describe()}", LAG.depends, _lag("p50_ns"), better="lower"))
declare(Metric("lag_ms_p99", "ms", "99th percentile client send lag (the run is invalid when it exceeds "
               "max_client_lag_ms)", LAG.depends, _lag("p99_ns"), better="lower"))
declare(Metric("lag_ms_max", "ms", "largest client send lag", LAG.depends, _lag("max_ns"), better="lower"))
declare(Metric("slo_attainment", "share", "fraction of all requests ok and meeting every set SLO (TTFT, TPOT, E2E) "
               "(SGLang/vLLM goodput criterion)", TTFT.depends + E2E.depends + TPOT.depends,
               lambda r: None if r.slo_good is None else ratio(r.slo_good, r.n_requests), better="higher",
               interval=Interval(draw=12), report_at=11))
declare(Metric("goodput_rps", "req/s", "requests meeting every SLO / duration_s (SGLang/vLLM goodput)",
               TTFT.depends + E2E.depends + TPOT.depends,
               lambda r: None if r.slo_good is None else per_s(r.slo_good, r), better="higher",
               interval=Interval(draw=11), column=Column("goodput req/s", 2, at=12, shown="when_any"), report_at=10))
declare(Metric("prefix_hit_rate", "share", "sum(cached_tokens) / sum(prompt_tokens) over ok requests reporting both: "
               "the share of prompt tokens served from the prefix cache (SGLang meta_info cached_tokens, vLLM usage "
               "prompt_tokens_details.cached_tokens)", ("cached_tokens", "prompt_tokens"),
               lambda r: ratio(float(r.cached_tokens.sum()), float(r.prompt_tokens.sum()))
               if r.cached_tokens.size else None,
               better="higher", interval=Interval(draw=13),
               column=Column("prefix hit %", 1, scale=100.0, at=13, shown="when_positive")))
_count("n_finish_stop", "ok requests that finished on a stop condition (EOS or a stop string: finish_reason 'stop')",
       _finish("stop"), ("finish_reason",))
_count("n_finish_length", "ok requests that finished at their max_tokens (finish_reason 'length')",
       _finish("length"), ("finish_reason",))
declare(Metric("eos_output_tokens_mean", "tokens", "mean output tokens of the ok requests that finished on 'stop' "
               "(with ignore_eos: false, the lengths the model chose)", ("finish_reason",) + _OUT_SOURCES, _eos_mean))
declare(Metric("worker_imbalance", "ratio", "the busiest worker's share of the requests a gateway routed / the mean "
               "share (1 / workers): 1.0 is an even split, 2.0 one worker taking twice its share; null without a "
               "gateway (no request names its worker). The split itself is the runs column worker_requests_json",
               ("worker",), _worker_imbalance, better="lower"))

_gpu("gpu_energy_j", "J", "energy of the server's GPUs over the window: Σ per GPU of the energy counter at the end "
     "minus at the start (linear interpolation; trapezoid of power where there is no counter), J", "lower")
_gpu("gpu_power_w_mean", "W", "gpu_energy_j / duration_s: mean total power of the server's GPUs, W",
     interval=Interval(draw=16))
_gpu("energy_j_per_output_token", "J/token", "gpu_energy_j / output tokens of ok requests, J/token", "lower",
     Interval(draw=14), Column("J/token", 2, at=14))
_gpu("output_tok_s_per_w", "tok/J", "output_tok_s / gpu_power_w_mean (output tokens per joule)", "higher",
     Interval(draw=15), Column("tok/s per W", 3, at=15))
_gpu("sm_clock_mhz_mean", "MHz", "mean SM clock over the busy GPU samples inside the window (requests in flight for "
     f"at least {BUSY_IN_FLIGHT_SHARE:.0%} of the sample's interval, or utilisation at least {BUSY_UTIL_PCT_FLOOR}% "
     "without request records; never a sample with the gpu_idle clock-event reason), MHz",
     interval=Interval(draw=17), column=Column("SM clock MHz", 0, at=16))
_gpu("sm_clock_mhz_min", "MHz", "lowest SM clock of the busy samples inside the window, MHz")
_gpu("sm_clock_mhz_p10", "MHz", "10th percentile of the SM clock of the busy samples inside the window, MHz",
     interval=Interval(draw=18))
_gpu("gpu_temperature_c_max", "°C", "hottest GPU temperature sampled inside the window, °C", "lower")
_gpu("gpu_throttled", "flag", "1 when any sample inside the window had a thermal or power clock-event (throttle) "
     "reason, else 0", "lower")
_gpu("gpu_throttled_share", "share", "share of the samples inside the window with a thermal or power throttle reason",
     "lower")
_gpu("gpu_samples", "samples", "GPU sample rows (GPUs × instants) inside the window")

declare(Metric("steady_output_tps", "tok/s", "output tokens produced inside the steady stretch / its length "
               "(cluster/analysis/steady_state.py, docs/steady-state.md)", ("first_chunk_ns", "last_chunk_ns")
               + _OUT_SOURCES, producer="steady", better="higher", interval=Interval(draw=1),
               column=Column("steady tok/s", 1, at=0, shown="always", note=("steady_short", " (too short)")),
               speedup=Speedup("speedup_steady_tps", draw=2),
               mean=Mean(at=9, short="steady", short_at=0, mark=("steady_short", "!")),
               runs_column="steady_output_tps"))
declare(Metric("steady_share", "share", "(steady_end_ns - steady_start_ns) / the window's duration: the share of the "
               "window the steady stretch covers", ("actual_send_ns", "first_chunk_ns", "last_chunk_ns"),
               producer="steady", mean=Mean(at=10), runs_column="steady_share"))
_per_gpu("request_throughput_rps", "req/s/GPU", mean=Mean(at=0))
_per_gpu("output_tok_s", "tok/s/GPU", Mean(at=1, short="tok/s/GPU", digits=2, short_at=1),
         Column("output tok/s per GPU", 2, at=1.5, shown="always"))
_per_gpu("steady_output_tps", "tok/s/GPU", mean=Mean(at=9))

_PD_PARTS = {
    "prefill_bootstrap_s": "the prefill server's bootstrap stage (SGLang stage prefill_bootstrap: bootstrap-queue "
                           "entry to wait-queue entry, the handshake with the decode server and its KV allocation)",
    "prefill_queue_s": "the prefill server's wait queue (sglang:queue_time_seconds: wait-queue entry to the first "
                       "forward; SGLang's stage prefill_waiting, not observed as a stage)",
    "prefill_transfer_kv_cache_s": "the KV cache transfer (SGLang stage prefill_transfer_kv_cache: transfer-queue "
                                   "entry to the transfer finished)",
}
for _name, _part in CATALOG_PARTS.items():
    declare(Metric(_name, "ms", f"mean time per request in {_PD_PARTS[_part]}, ms: Δ_sum / Δ_count of the prefill "
                   "servers' histogram between their scrapes at or before the window's start and end (one scrape "
                   "interval's resolution, not per request); a prefill/decode run only, else null. The whole split "
                   "is the runs column ttft_parts_json", ("server_metrics",), producer="server", better="lower"))
