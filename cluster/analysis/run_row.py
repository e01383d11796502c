"""Build the `runs` table row of one run (a kernel RunRow): metrics, validity checks and provenance (pure).

Assembled here, above the dataset: the row needs the metrics' definitions (analysis), the engine's caps and
acceptance (engines) and the output sample's verdict (loadgen); the dataset stores the typed row as it is handed
over and imports none of them."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from typing import Iterable, Mapping, Optional

import pyarrow as pa

from cluster.analysis.deployment_cap import deployment_cap
from cluster.config.deployment import PDDeployment, ReplicasDeployment
from cluster.analysis.engine_facts import EngineFacts
from cluster.analysis.ttft_parts import TtftParts, ttft_parts
from cluster.version import __version__
from cluster.kernel.run_facts import SegmentFacts, ServerFacts
from cluster.kernel.window import MeasuredWindow
from cluster.kernel.run_row import RunRow, RunStatus
from cluster.kernel.runs import ResolvedVariant, RunPlan
from cluster.config.experiment import ExperimentSpec

MAX_ERROR_RATE = 0.01
"""A run with more failed requests than this is flagged invalid: its throughput is not the server's."""


def counter_deltas(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before.get(k, 0.0) for k in after if isinstance(after.get(k), (int, float))}


def _engine_version(p: RunPlan, spec: ExperimentSpec, server: Optional[ServerFacts]) -> Optional[str]:
    """The server's own version answer, else the launcher's declared version."""
    infos = server.infos if server is not None else {}
    si = infos.get("server_info") if isinstance(infos.get("server_info"), dict) else {}
    launcher = spec.engines.get(p.variant.engine)
    engine_version = (si or {}).get("version") or (launcher.version if launcher else None)
    if engine_version is None and isinstance(infos.get("version"), dict):
        engine_version = infos["version"].get("version")
    return engine_version


def _provenance(p: RunPlan, spec: ExperimentSpec, server: Optional[ServerFacts], segment: Optional[SegmentFacts],
                git_sha: Optional[str], peak_buffered_rows: Optional[int] = None) -> dict[str, object]:
    """The run's provenance_json object: who ran it where, with what (the server's own answers among it)."""
    v = p.variant
    s, g = server, segment
    return {
        "engine": v.engine,
        "engine_version": _engine_version(p, spec, s),
        "host": s.hostname if s else None,
        "node_id": s.node_id if s else None,
        "gpu_ids": s.gpu_ids if s else None,
        "cuda_visible_devices": s.cuda_visible_devices if s else None,
        "server_saw_cuda_visible_devices": s.server_saw_cuda_visible_devices if s else None,
        "load_actor_cuda_visible_devices": g.load_actor_cuda_visible_devices if g else None,
        "server_pid": s.server_pid if s else None,
        "server_pgid": s.pgid if s else None,
        "port": s.port if s else None,
        "port_attempts": s.port_attempts if s else None,
        "server_startup_s": s.startup_s if s else None,
        "env": s.env if s else None,
        "environment": s.environment if s else None,
        "seed": p.seed,
        "spec_seed": spec.seed,
        "sglbench_version": __version__,
        "git_sha": git_sha,
        "tuning": v.tuning.model_dump(mode="json") if v.tuning else None,
        "tuning_artifact": g.tuning_artifact if g else None,
        "checkpoint_fingerprint": g.checkpoint_fingerprint if g else None,
        "hub_revision": g.hub_revision if g else None,
        "correctness": g.correctness.as_json() if g and g.correctness else None,
        "load_actors": g.load_actors if g else None,
        "load_actor_peak_buffered_rows": peak_buffered_rows,
        "isolation": spec.isolation,
        "launched_by_sglbench": v.launched,
        "endpoint": _endpoint_facts(v, s, None),
        "deployment": v.deployment.model_dump(mode="json") if v.deployment is not None else None,
        "gpus": v.gpus,
        "processes": _process_facts(s),
    }


def gateway_workers(v: ResolvedVariant) -> int:
    """How many workers a gateway in front routes requests to, as its routed-worker header names them: replicas, or
    decode servers in PD mode (the header names the decode side); 0 without a gateway."""
    d = v.deployment
    if isinstance(d, ReplicasDeployment):
        return d.replicas
    return d.decode.servers if isinstance(d, PDDeployment) else 0


def _process_facts(s: Optional[ServerFacts]) -> Optional[list[dict[str, object]]]:
    """A deployment's processes as they ran (servers in start order, then the gateway): name, role, where, how
    started, what each resolved (the per-server checks read these); None for one server."""
    if s is None or not s.processes:
        return None
    return [{"name": p.name, "role": p.role, "pid": p.facts.server_pid or p.facts.pid, "pgid": p.facts.pgid,
             "node_id": p.facts.node_id, "host": p.facts.hostname, "base_url": p.facts.base_url,
             "port": p.facts.port, "gpu_ids": p.facts.gpu_ids, "cuda_visible_devices": p.facts.cuda_visible_devices,
             "server_saw_cuda_visible_devices": p.facts.server_saw_cuda_visible_devices, "argv": p.facts.argv,
             "env": p.facts.env, "startup_s": p.facts.startup_s, "log_path": p.facts.log_path,
             "resolved_args": p.facts.resolved_args, "cap_log_lines": list(p.facts.cap_log_lines),
             "version": p.facts.environment.get("gateway_version")} for p in s.processes]


def _endpoint_facts(v: ResolvedVariant, s: Optional[ServerFacts],
                    flushed: Optional[bool]) -> Optional[dict[str, object]]:
    """An endpoint's provenance: what it said about itself (scrubbed of its key by the actor: the only record of its
    configuration), its restart mark, and whether its cache was flushed (only with the experiment's leave)."""
    if v.endpoint is None:
        return None
    return {"url": v.endpoint.url, "flush_cache": v.endpoint.flush_cache, "cache_flushed": flushed,
            "start_mark": s.start_mark if s else None, "server_info": s.infos.get("server_info") if s else None,
            "models": s.infos.get("models") if s else None}


def _common(p: RunPlan, spec: ExperimentSpec, server: Optional[ServerFacts], segment: Optional[SegmentFacts],
            git_sha: Optional[str], provenance: Mapping[str, object], status: RunStatus) -> RunRow:
    """The columns every run has, measured or not (the plan, the server's facts, provenance)."""
    v = p.variant
    s, g = server, segment
    sp = v.speculative
    return RunRow(
        status=status,
        seed=p.seed,
        order_index=p.order_index,
        input_tokens=p.workload.input_tokens_nominal(),
        output_tokens=p.workload.output_tokens_nominal(),
        max_tokens=p.workload.output_tokens_nominal(),
        tp=v.tp,
        variant_family=v.family,
        is_baseline=v.is_baseline,
        spec_algorithm=sp.algorithm if sp else None,
        spec_num_steps=sp.num_steps if sp else None,
        spec_num_draft_tokens=sp.num_draft_tokens if sp else None,
        provenance_json=json.dumps(provenance, sort_keys=True, default=str),
        launch_argv_json=json.dumps((s.argv if s else None) or []),
        resolved_args_json=json.dumps((s.resolved_args if s else None) or {}, sort_keys=True, default=str),
        gpu_ids=",".join(str(x) for x in (s.gpu_ids if s else None) or []),
        node=s.hostname if s else None,
        engine_version=_engine_version(p, spec, s),
        sglbench_version=__version__,
        git_sha=git_sha,
        tuning_artifact=g.tuning_artifact if g else None,
        launched_by_sglbench=v.launched,
        endpoint_url=v.endpoint.url if v.endpoint is not None else None,
        gpus=v.gpus,
    )


def offered_concurrency(p: RunPlan, n_requests: int) -> Optional[int]:
    """The most requests the load generator could have in flight at once: closed-loop concurrency, or open-loop
    max_concurrency (None when an open loop has no bound), never more than the window's requests."""
    bound = p.load.shape.in_flight_bound(p.load)
    return min(int(bound), n_requests) if bound else None


def _series(batch: Optional[pa.RecordBatch], metric: Optional[str], duration_s: float) -> dict[int, float]:
    """A gauge scraped inside the window: scrape time (ns) → value summed over its label sets."""
    if batch is None or metric is None or not batch.num_rows:
        return {}
    cols = batch.to_pydict()
    per_t: dict[int, float] = {}
    end_ns = int(duration_s * 1e9)
    for t, name, value in zip(cols["t_ns"], cols["metric"], cols["value"]):
        if name == metric and value is not None and 0 <= t <= end_ns:
            per_t[t] = per_t.get(t, 0.0) + float(value)
    return per_t


def _peak_per_scrape(batch: Optional[pa.RecordBatch], metric: Optional[str], duration_s: float) -> Optional[float]:
    """The highest value of a gauge (summed over its label sets at each scrape) scraped inside the window."""
    per_t = _series(batch, metric, duration_s)
    return max(per_t.values()) if per_t else None


QUEUED_SHARE_FLOOR = 0.5
"""The scraped-gauge rule needs requests queued on more than this share of the window's scrapes: SGLang refreshes
its gauges only when it logs prefill/decode stats (every decode_log_interval = 40 steps), so a short-lived queue
while requests are admitted is normal and must not flag a run."""


@dataclass(frozen=True)
class ConcurrencyEvidence:
    """What concurrency_check judged from, as provenance_json["concurrency"] holds it (reported_cap reads `cap`)."""

    offered: Optional[int]
    cap: Optional[int]
    cap_source: Optional[str]
    cap_declared: Optional[int]
    cap_cause: Optional[str]
    scraped_max_running: Optional[float]
    scraped_max_queued: Optional[float]
    scraped_queued_share: Optional[float]


def concurrency_check(p: RunPlan, out: MeasuredWindow, server: ServerFacts, n_requests: int
                      ) -> tuple[list[str], ConcurrencyEvidence]:
    """Did the server run the concurrency we offered? Invalid reasons and the evidence for provenance.

    Two independent rules: the resolved cap the server reported (engine.concurrency_cap, e.g. SGLang's 48 under
    speculative decoding) below the offered concurrency; and the scraped running-requests gauge never reaching the
    offered concurrency while the queue gauge was non-empty on most scrapes (requests waited for a slot)."""
    from cluster.engines.registry import get_engine

    engine: EngineFacts = get_engine(p.variant.engine)
    offered = offered_concurrency(p, n_requests)
    cap = deployment_cap(engine, server)  # a deployment's: its servers' between them
    running = _peak_per_scrape(out.server_metrics, engine.running_gauge, out.duration_s)
    queue = _series(out.server_metrics, engine.queue_gauge, out.duration_s)
    queued = max(queue.values()) if queue else None
    queued_share = sum(1 for x in queue.values() if x > 0) / len(queue) if queue else None
    evidence = ConcurrencyEvidence(offered=offered, cap=cap.value if cap else None,
                                   cap_source=cap.source if cap else None, cap_declared=cap.declared if cap else None,
                                   cap_cause=cap.cause if cap else None, scraped_max_running=running,
                                   scraped_max_queued=queued, scraped_queued_share=queued_share)
    reasons: list[str] = []
    if offered is None:
        return reasons, evidence
    if cap is not None and offered > cap.value:
        why = f"; {cap.cause}" if cap.cause else ""
        reasons.append(f"offered concurrency {offered} > server cap {cap.value} ({cap.source}{why}): the server "
                       "queued the rest, so this is not the offered load")
    if (running is not None and queued is not None and queued_share is not None and len(queue) >= 2
            and running < offered and queued > 0 and queued_share > QUEUED_SHARE_FLOOR):
        reasons.append(f"scraped {engine.running_gauge} peaked at {running:g} < offered concurrency {offered} while "
                       f"{engine.queue_gauge} reached {queued:g} (non-empty on {queued_share:.0%} of the scrapes): "
                       "requests waited for a slot")
    return reasons, evidence


def reported_cap(provenance: Iterable[Optional[str]]) -> Optional[float]:
    """The lowest concurrency cap the servers of these runs reported (what concurrency_check put in provenance)."""
    caps = []
    for text in provenance:
        if not isinstance(text, str):
            continue
        try:
            cap = (json.loads(text).get("concurrency") or {}).get("cap")
        except ValueError:
            continue
        if isinstance(cap, (int, float)):
            caps.append(float(cap))
    return min(caps) if caps else None


def pd_ttft_parts(v: ResolvedVariant, out: MeasuredWindow, engine: EngineFacts) -> Optional[TtftParts]:
    """A prefill/decode run's TTFT split from its servers' scraped histograms; None for any other deployment."""
    if not isinstance(v.deployment, PDDeployment):
        return None
    return ttft_parts(out.server_metrics, out.duration_s, engine.ttft_part_histograms)


def _with_audit(row: RunRow, out: MeasuredWindow) -> tuple[RunRow, list[str]]:
    """The row with the workload audit's columns, and the audit's invalid reasons; nothing audited without a
    selection."""
    if out.selection is None:
        return row, []
    from cluster.analysis.workload_audit import audit_workload

    a = audit_workload(out.requests, out.selection)
    sent = a.lengths_sent or (None, None, None)
    sel = a.lengths_selection or (None, None, None)
    row = replace(row, distinct_prompts_sent=a.distinct_sent, distinct_prompts_planned=a.distinct_planned,
                  category_shares_sent=a.share_json(sent=True), category_shares_selection=a.share_json(sent=False),
                  input_tokens_sent_p10=sent[0], input_tokens_sent_p50=sent[1], input_tokens_sent_p90=sent[2],
                  input_tokens_selection_p10=sel[0], input_tokens_selection_p50=sel[1],
                  input_tokens_selection_p90=sel[2])
    return row, [f"workload not the one planned: {r}" for r in a.reasons]


def build_run_row(p: RunPlan, out: MeasuredWindow, server: ServerFacts, segment: SegmentFacts,
                  spec: ExperimentSpec, neighbours: list[str], git_sha: Optional[str],
                  restart: Optional[str] = None) -> RunRow:
    """The run's row; `restart`: why the endpoint measured is not the one checked at the start (it restarted)."""
    from cluster.analysis.metrics import summarize_run, worker_requests

    m = summarize_run(out.requests, out.token_chunks if out.token_chunks is not None else out.chunks,
                      out.duration_s, spec.slo, workers=gateway_workers(p.variant))
    before, after = out.counters_before or {}, out.counters_after or {}
    deltas = counter_deltas(before, after)
    n_req = int(out.requests.num_rows)
    from cluster.engines.registry import get_engine

    facts: EngineFacts = get_engine(p.variant.engine)
    window = facts.window_acceptance(before, after, n_req)
    m["accept_length_server_counters"] = window.get("accept_length")
    if m.get("accept_length") is None and window.get("accept_length") is not None:
        # engines without per-request verify counts (vLLM): the run-scoped counter figure is the metric
        m["accept_length"] = window["accept_length"]
    for k, v in window.items():
        if k != "accept_length":
            m[k] = v
    from cluster.analysis.gpu_metrics import summarize_gpu, throttle_summary

    m.update(summarize_gpu(out.gpu_metrics, out.duration_s, m.get("output_tok_s"), out.requests))
    parts = pd_ttft_parts(p.variant, out, facts)
    if parts is not None:  # only then: the metrics of every other run keep their keys
        m.update(parts.catalog_figures())
    n_ok = int(m.get("n_ok") or 0)
    invalid: list[str] = []
    gate = segment.correctness
    if gate is not None and not gate.passed:  # measured only for its acceptance health (segment.py): never ok
        from cluster.analysis.correctness import gate_failed_reason

        invalid.append(gate_failed_reason(gate.reasons))
    # the stored m_lag_ms_p99 (request_metrics.client_lag over the committed requests), never a shard's own figure
    lag_p99_ms = m.get("lag_ms_p99") or 0.0
    if lag_p99_ms > spec.max_client_lag_ms:
        invalid.append(f"client fell behind its schedule: send lag p99 {lag_p99_ms:.2f} ms > "
                       f"{spec.max_client_lag_ms:g} ms (the client, not the server, set the pace)")
    err_rate = (n_req - n_ok) / n_req if n_req else 1.0
    if n_ok and err_rate > MAX_ERROR_RATE:
        invalid.append(f"{n_req - n_ok} of {n_req} requests failed ({err_rate:.1%})")
    ep = p.variant.endpoint
    if not out.flushed and (ep is None or ep.flush_cache):  # an endpoint's cache is flushed only with leave
        invalid.append("cache flush before the measured window failed")
    if restart:
        invalid.append(restart)
    cap_reasons, concurrency = concurrency_check(p, out, server, n_req)
    from cluster.loadgen.output_sample import sample_verdict

    garbage, output_sample = sample_verdict(out.samples)
    invalid.extend(cap_reasons)
    sp = p.variant.speculative
    if sp is not None and sp.adaptive_config is not None:
        from cluster.engines.sglang_adaptive import adaptive_not_on

        off = adaptive_not_on(facts.resolved_args(server.infos))
        if off:
            invalid.append(off)
    if garbage and spec.correctness.check_output_samples:
        invalid.append(garbage)
    from cluster.analysis.steady_state import steady_state

    offered = offered_concurrency(p, n_req) if p.load.shape.closed else p.load.value
    ss = steady_state(out.requests, p.load.kind, offered, out.duration_s)
    output_sample["judged"] = spec.correctness.check_output_samples
    provenance = _provenance(p, spec, server, segment, git_sha, out.peak_buffered_rows)
    provenance["concurrency"] = asdict(concurrency)
    provenance["endpoint"] = _endpoint_facts(p.variant, server, out.flushed)
    provenance["load_event_loop"] = out.event_loop or None  # what paced the sends (uvloop in CI and on a node)
    telemetry: dict[str, object] = dict(out.telemetry.provenance()) if out.telemetry is not None else {
        "source": None, "unavailable": "telemetry disabled or not captured"}
    telemetry["throttle_reasons"] = throttle_summary(out.gpu_metrics, out.duration_s)
    provenance["telemetry"] = telemetry
    provenance["output_sample"] = output_sample
    row, audit_reasons = _with_audit(_common(p, spec, server, segment, git_sha, provenance, "ok"), out)
    invalid.extend(audit_reasons)
    from cluster.engines.answer_invariants import invariant_reasons

    impossible = invariant_reasons(out.requests.column("error").to_pylist(),
                                   out.requests.column("request_index").to_pylist()) if n_req else []
    invalid.extend(impossible)
    # answers that break an invariant were measured and are not to be trusted: invalid even when none was left ok
    # (a resubmission would get the same answers, so not `failed`)
    status: RunStatus = "failed" if n_ok == 0 and not impossible else ("invalid" if invalid else "ok")
    return replace(
        row,
        status=status,
        failure_reason="no request succeeded" if status == "failed" else None,
        invalid_reasons="; ".join(invalid) if invalid else None,
        window_start_unix_s=out.window_start_unix_s,
        duration_s=out.duration_s,
        n_requests=n_req,
        n_ok=n_ok,
        n_errors=n_req - n_ok,
        metrics_json=json.dumps(m, sort_keys=True, default=float),
        server_counters_json=json.dumps({"before": out.counters_before, "after": out.counters_after,
                                         "delta": deltas}, sort_keys=True),
        shared_node_with=",".join(neighbours),
        steady_start_ns=ss.start_ns if ss else None, steady_end_ns=ss.end_ns if ss else None,
        steady_share=ss.share if ss else None, steady_output_tps=ss.output_tps if ss else None,
        steady_tpot_ms=ss.tpot_ms if ss else None, steady_accept_length=ss.accept_length if ss else None,
        steady_requests=ss.requests if ss else None, steady_rule=ss.rule if ss else None,
        worker_requests_json=json.dumps(split) if (split := worker_requests(out.requests)) else None,
        ttft_parts_json=parts.as_json() if parts is not None else None,
        metrics=m,
    )


def failed_run_row(p: RunPlan, reason: str, log_tail: str, server: Optional[ServerFacts],
                   segment: Optional[SegmentFacts], spec: ExperimentSpec, git_sha: Optional[str]) -> RunRow:
    """A run that measured nothing (start failed, server died, load actor failed); facts are None when unknown."""
    row = _common(p, spec, server, segment, git_sha, _provenance(p, spec, server, segment, git_sha), "failed")
    return replace(row, failure_reason=reason, log_tail=log_tail[-8000:] if log_tail else None, n_requests=0,
                   n_ok=0, n_errors=0, metrics_json="{}", server_counters_json="{}", shared_node_with="")
