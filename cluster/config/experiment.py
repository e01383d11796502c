"""The experiment: one YAML's typed, frozen model (the loader, cluster/config/loader.py, names file, line and
field), built from its sections (server.py, variants.py, workload.py, load.py, statistics.py, gate.py, output.py)
and the rules that hold across them."""

from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import Field, field_validator, model_validator

from cluster.config import bounds as B
from cluster.config.acceptance import AcceptanceReferenceSpec
from cluster.config.fields import FieldProblem, FrozenModel, check_name
from cluster.config.gate import CorrectnessSpec
from cluster.config.load import LoadSpec
from cluster.config.output import DatasetRoot, TelemetrySpec
from cluster.config import relevance as R
from cluster.config.repeats import Repeats, RepeatsUntil
from cluster.config.server import ServerSpec, arg_flag
from cluster.config.model import ModelSpec
from cluster.config.deployment import NodesDeployment, PDDeployment
from cluster.config.engines import EngineLauncher, EngineName, engine_entry
from cluster.config.sim_knobs import Knobs
from cluster.config.statistics import SLOSpec
from cluster.config.variants import VariantSpec, expanded_names
from cluster.config.workload import WorkloadSpec
from cluster.engines.server_env import set_by_sglbench

SPEC_VERSION = 1
"""The only experiment-spec version this release reads (`version:` in the YAML)."""


class ClusterSpec(FrozenModel):
    """What the experiment assumes about the cluster; checked again against the live cluster at preflight."""

    gpus_per_node: int = Field(default=8, ge=1, le=B.MAX_GPUS_PER_NODE)
    """GPUs on the largest node: a variant's tensor-parallel group must fit on one node."""
    nodes: int = Field(default=1, ge=1, le=1024)
    """GPU nodes the experiment assumes (each with gpus_per_node GPUs): `plan` refuses a deployment that needs more
    (a server across nodes, replicas or pools that do not fit); `run` checks the live cluster again."""


class ExperimentSpec(FrozenModel):
    version: Literal[1] = 1
    """Spec version; 1."""
    name: str
    """Experiment name: a directory in the dataset."""
    model: ModelSpec
    """Checkpoint, engine and tensor-parallel size."""
    engines: dict[EngineName, EngineLauncher] = Field(default_factory=dict)
    """Per engine, how to start it on the node (python: or launcher:, version:)."""
    server: ServerSpec = Field(default_factory=ServerSpec)
    """Server args and env for every variant."""
    sim: Knobs = Field(default_factory=Knobs)
    """Simulated-engine knobs (cluster/sim/model.py): the same model the simulated server validates them with."""
    variants: list[VariantSpec] = Field(min_length=1)
    """Server configurations to compare."""
    workloads: list[WorkloadSpec] = Field(min_length=1)
    """Request shapes to drive at every variant."""
    load: LoadSpec
    """Load points: closed-loop concurrency and/or open-loop request rates."""
    repeats: Repeats = 1
    """Repeats of every load point (3 or more give intervals and verdicts; 5 recommended), or {until, min, max}:
    repeat each point until its interval is narrow enough (cluster/config/repeats.py)."""
    order: Literal["grouped", "interleaved"] = "grouped"
    """grouped: each server starts once and runs all its points; interleaved: ABAB across repeats (restarts)."""
    warmup_requests: int = Field(default=2, ge=0, le=B.MAX_WARMUP_REQUESTS)
    """Requests sent before every measured window (then /flush_cache)."""
    seed: int = Field(default=0, ge=0, le=B.MAX_SEED)
    """One seed for prompts and arrival schedules."""
    isolation: Literal["node", "gpus"] = "node"
    """node: a variant has its node to itself while measured; gpus: variants share nodes on disjoint GPUs."""
    output: DatasetRoot = "results"
    """Dataset root: a local path or a pyarrow filesystem URI (s3://, gs://, ...)."""
    slo: Optional[SLOSpec] = None
    """Per-request latency limits: goodput and SLO attainment per run."""
    correctness: CorrectnessSpec = Field(default_factory=CorrectnessSpec)
    """The correctness gate every variant passes before its speed counts."""
    telemetry: TelemetrySpec = Field(default_factory=TelemetrySpec)
    """GPU telemetry sampled during every measured window (gpu_metrics table)."""
    cluster: ClusterSpec = Field(default_factory=ClusterSpec)
    """What the experiment assumes about the cluster."""
    health_timeout_s: float = Field(default=1800.0, gt=0, le=B.MAX_TIMEOUT_S)
    """Seconds a server may take to become healthy."""
    request_timeout_s: float = Field(default=600.0, gt=0, le=B.MAX_TIMEOUT_S)
    """Seconds one request may take."""
    max_client_lag_ms: float = Field(default=10.0, gt=0, le=B.MAX_LATENCY_MS)
    """A run whose client send lag p99 exceeds this is flagged invalid: the client, not the server, set the pace."""
    acceptance_reference: Optional[AcceptanceReferenceSpec] = None
    """The curve each speculative variant's per-position acceptance is held against (`acceptance-collapsed` when a
    position's interval lies wholly below it by more than the margin; docs/acceptance-health.md)."""

    _n = field_validator("name")(classmethod(lambda cls, v: check_name(v, "experiment name")))

    @model_validator(mode="after")
    def _unique(self) -> "ExperimentSpec":
        for what, names in (("variants", [v.name for v in self.variants]), ("workloads", [w.name for w in self.workloads])):
            folded = [n.casefold() for n in names]
            for i, n in enumerate(names):
                if n in names[:i]:
                    raise FieldProblem((what, i, "name"), f"duplicate {what[:-1]} name {n!r} (names must be unique)")
                if folded[i] in folded[:i]:
                    first = names[folded.index(folded[i])]
                    raise FieldProblem((what, i, "name"), f"{what[:-1]} name {n!r} differs from {first!r} only in case: "
                                       "names become directories, which a case-insensitive filesystem would merge")
        baselines = [i for i, v in enumerate(self.variants) if v.baseline]
        if len(baselines) > 1:
            raise FieldProblem(("variants", baselines[1], "baseline"), "at most one variant may set baseline: true")
        node = self.cluster.gpus_per_node
        if self.model.tp > node:
            raise FieldProblem(("model", "tp"), f"tp {self.model.tp} is larger than cluster.gpus_per_node {node}")
        for i, v in enumerate(self.variants):
            d = v.deployment
            if isinstance(d, NodesDeployment):  # one process per node: each holds tp / nodes GPUs
                tp = v.tp or self.model.tp
                if tp % d.nodes:
                    raise FieldProblem(("variants", i, "tp"), f"variant {v.name!r} spans {d.nodes} nodes: its tp "
                                       f"{tp} (model.tp when not set) must be a multiple of deployment.nodes")
                if tp // d.nodes > node:
                    raise FieldProblem(("variants", i, "tp"), f"tp {tp} over {d.nodes} nodes is {tp // d.nodes} "
                                       f"GPUs per node, more than cluster.gpus_per_node {node}")
            elif isinstance(d, PDDeployment):
                for pool in ("prefill", "decode"):
                    if getattr(d, pool).tp > node:
                        raise FieldProblem(("variants", i, "deployment", pool, "tp"), f"{pool}.tp "
                                           f"{getattr(d, pool).tp} is larger than cluster.gpus_per_node {node}")
            elif v.tp is not None and v.tp > node:
                raise FieldProblem(("variants", i, "tp"), f"tp {v.tp} is larger than cluster.gpus_per_node {node}")
            entry = engine_entry(v.engine or self.model.engine)
            if d is not None and entry is not None and d.kind not in entry.deployments:
                raise FieldProblem(("variants", i, "deployment", "kind"), f"variant {v.name!r}: engine "
                                   f"{entry.name} cannot serve a deployment of kind {d.kind} (its servers do not "
                                   f"speak SGLang's gateway, prefill/decode and multi-node flags); expected one of: "
                                   f"{', '.join(entry.deployments)}")
        return self

    @model_validator(mode="after")
    def _acceptance_reference(self) -> "ExperimentSpec":
        ref = self.acceptance_reference
        if ref is not None and not any(v.speculative is not None for v in self.variants):
            raise FieldProblem(("acceptance_reference",), "no variant is speculative, so there is no acceptance to "
                               "hold against the reference: remove acceptance_reference or add a speculative variant")
        if ref is not None and ref.experiment == self.name:
            raise FieldProblem(("acceptance_reference", "experiment"), f"{self.name!r} is this experiment: name "
                               "another experiment (e.g. the unquantized checkpoint's) in the same results root")
        return self

    @model_validator(mode="after")
    def _repeats_until(self) -> "ExperimentSpec":
        """Repeats until sure are added on the server start that ran the point, after its planned runs."""
        if isinstance(self.repeats, RepeatsUntil):
            if self.order != "grouped":
                raise FieldProblem(("repeats", "until"), "repeats until an interval is narrow run on the server "
                                   "start that measured the point: they need order: grouped")
            if self.load.search is not None:
                raise FieldProblem(("repeats", "until"), "repeats until an interval is narrow are not combined "
                                   "with load.search (each search is one repeat): give repeats as a number")
        return self

    @model_validator(mode="after")
    def _expansion(self) -> "ExperimentSpec":
        """What the plan will expand the variants into is refused here, with its line: a flag under two spellings
        across server.args and a variant's args, a baseline that expands into several variants, expanded names
        that collide, and (isolation: gpus, where variants run side by side) one port fixed by two variants."""
        declared = {v.name.casefold(): i for i, v in enumerate(self.variants)}
        produced: dict[str, int] = {}
        ports: dict[int, tuple[int, str]] = {}
        for i, v in enumerate(self.variants):
            for key in v.args:
                other = arg_flag(self.server.args, key.replace("_", "-"))
                if other is not None and other != key:
                    raise FieldProblem(("variants", i, "args", key), f"server arg {key!r} is the flag server.args "
                                       f"gives as {other!r}: spell it the same way in both (the variant's value "
                                       "then overrides), else one of the two values is lost")
            names = expanded_names(v)
            if not names:
                raise FieldProblem(("variants", i, "tuning", "options", "exclude"), f"variant {v.name!r}: exclude "
                                   "leaves no back-end pair, so the variant would run nothing")
            if v.baseline and len(names) > 1:
                raise FieldProblem(("variants", i, "baseline"), f"a baseline must be a single variant, but "
                                   f"{v.name!r} expands into {len(names)} ({', '.join(names[:3])}"
                                   f"{', ...' if len(names) > 3 else ''}): declare the one to compare against as "
                                   "its own variant and mark that one")
            for n in names:
                try:
                    check_name(n, "expanded variant name")
                except ValueError as e:
                    raise FieldProblem(("variants", i, "name"), str(e)) from None
                other_i = produced.get(n.casefold(), declared.get(n.casefold(), i))
                if other_i != i:
                    j, k = sorted((i, other_i))
                    raise FieldProblem(("variants", k, "name"), f"variant name {n!r} is produced twice: by "
                                       f"variants.{j} ({self.variants[j].name!r}) and variants.{k} "
                                       f"({self.variants[k].name!r}); a num_steps list names its variants "
                                       "NAME-<steps> and a backend_sweep NAME-<backends>: rename one")
                produced[n.casefold()] = i
            self._check_port(i, v, len(names), ports)
        return self

    def _check_port(self, i: int, v: "VariantSpec", count: int, ports: dict[int, tuple[int, str]]) -> None:
        if self.isolation != "gpus":
            return  # isolation node: a variant has its node to itself, so a fixed port is never shared
        own = arg_flag(v.args, "port")
        where: tuple[Union[str, int], ...] = ("variants", i, "args", own) if own else ("server", "args", str(
            arg_flag(self.server.args, "port")))
        port = v.args[own] if own else self.server.args.get(str(arg_flag(self.server.args, "port")))
        if not isinstance(port, int) or isinstance(port, bool):
            return
        if count > 1 or port in ports:
            also = f"variants.{ports[port][0]} ({ports[port][1]!r})" if port in ports else \
                f"the {count} variants it expands into"
            raise FieldProblem(where, f"port {port} is fixed for {v.name!r} and for {also}: with isolation: gpus "
                               "variants share a node, so each needs its own port (or leave port out)")
        ports[port] = (i, v.name)

    @model_validator(mode="after")
    def _template_settings(self) -> "ExperimentSpec":
        """The workloads a chat template axis expands into (cluster/config/template_settings.py) are named here, with
        their line: two settings that sanitise to one name, or a name another workload has (or produces)."""
        from cluster.config.template_settings import duplicate_label, expanded_workload_names

        produced: dict[str, int] = {w.name.casefold(): i for i, w in enumerate(self.workloads)}
        for i, w in enumerate(self.workloads):
            where = ("workloads", i, "prompts", "chat_template_kwargs")
            same = duplicate_label(w)
            if same is not None:
                raise FieldProblem(where, f"two settings of workload {w.name!r} are both named {same!r} once "
                                   "sanitised (letters, digits and '.' kept): make the values differ in those")
            names = expanded_workload_names(w)
            for n in names if names != [w.name] else []:
                try:
                    check_name(n, "expanded workload name")
                except ValueError as e:
                    raise FieldProblem(where, str(e)) from None
                other = produced.get(n.casefold(), i)
                if other != i:
                    raise FieldProblem(where, f"workload {w.name!r} expands into {n!r}, a name workloads.{other} "
                                       f"({self.workloads[other].name!r}) has or produces: rename one")
                produced[n.casefold()] = i
        return self

    @model_validator(mode="after")
    def _env_set_by_sglbench(self) -> "ExperimentSpec":
        """An env key the tool sets itself (cluster/engines/server_env.py) is refused where it is written: given
        here it would be overwritten without a word (SGLBENCH_SIM) or override the tool (Ray's GPU pinning)."""
        for i, v in enumerate(self.variants):
            owned = set_by_sglbench(v.tuning.kind if v.tuning is not None else None)
            for where, env in ((("variants", i, "env"), v.env), (("server", "env"), self.server.env)):
                key = next((k for k in env if k in owned), None)
                if key is not None:
                    for_whom = f" for variant {v.name!r}" if where[0] == "server" and key not in \
                        set_by_sglbench(None) else ""
                    raise FieldProblem(where + (key,), f"{key} is set by {owned[key]}{for_whom}: remove it")
        return self

    @model_validator(mode="after")
    def _meaningful(self) -> "ExperimentSpec":
        """A field another section makes meaningless is refused (cluster/config/relevance.py)."""
        R.check_repeats_metric(self.repeats, self.variants, self.workloads)
        R.check_closed_loop_requests(self.load, self.workloads)
        R.check_window_length(self.load, self.workloads)
        R.check_tokenizer(self.model, self.workloads)
        R.check_engines(self.engines, self.model, self.variants)
        R.check_order(self.order, self.repeats)
        return self

    @model_validator(mode="after")
    def _search_slo(self) -> "ExperimentSpec":
        if self.load.search is not None and (self.slo is None or not self.slo.model_dump(exclude_none=True)):
            raise FieldProblem(("load", "search"), "a capacity search looks for the highest load meeting the SLO: "
                               "set slo: with ttft_ms, tpot_ms and/or e2e_ms")
        return self

    @model_validator(mode="after")
    def _trace_arrivals(self) -> "ExperimentSpec":
        if self.load.arrival != "trace":
            return self
        if not self.load.request_rate:
            raise FieldProblem(("load", "request_rate"), "arrival: trace rescales the recorded times to each "
                               "request_rate: give at least one")
        for i, w in enumerate(self.workloads):
            if w.prompts.source != "trace":
                raise FieldProblem(("workloads", i, "prompts", "source"), f"arrival: trace sends at the times "
                                   f"of a trace, but workload {w.name!r} has prompt source {w.prompts.source!r}")
        return self
