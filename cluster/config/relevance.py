"""Fields another field makes meaningless: the cross-section rules that refuse them (each once, called by
ExperimentSpec._meaningful) and the documented no-ops accepted with a printed note (NO_OPS: validate and plan print
them; scripts/field_walk.py and docs/field-walk.md read them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Literal, Mapping, Sequence, Union

from cluster.config import bounds as B
from cluster.config.engines import EngineLauncher, EngineName, engine_entry
from cluster.config.fields import FieldProblem
from cluster.config.load import LoadSpec
from cluster.config.locations import MODEL_SCHEMES
from cluster.config.model import ModelSpec
from cluster.config.repeats import RepeatsUntil
from cluster.config.tuning import NoTuning
from cluster.config.variants import VariantSpec
from cluster.config.workload import WorkloadSpec

Loc = tuple[Union[str, int], ...]


def check_repeats_metric(repeats: Union[int, RepeatsUntil], variants: Sequence[VariantSpec],
                         workloads: Sequence[WorkloadSpec]) -> None:
    """repeats.until's metric must exist on the points it decides: acceptance length needs a speculative variant,
    TPOT needs a second output token."""
    if not isinstance(repeats, RepeatsUntil):
        return
    metric = repeats.until.metric
    if metric == "accept_length" and not any(v.speculative is not None for v in variants):
        raise FieldProblem(("repeats", "until", "metric"), "accept_length is measured only on speculative "
                           "variants, but no variant sets variants[].speculative: every point would run to "
                           "repeats.max without an interval (pick another metric or add a speculative variant)")
    if metric == "tpot_ms_p50":
        for i, w in enumerate(workloads):
            if w.output_tokens_max() == 1:
                raise FieldProblem(("repeats", "until", "metric"), f"tpot_ms_p50 is the time between output "
                                   f"tokens, but workloads.{i}.output_tokens is 1 (workload {w.name!r}): there is "
                                   "no second token, so the interval never narrows (pick another metric)")


def check_closed_loop_requests(load: LoadSpec, workloads: Sequence[WorkloadSpec]) -> None:
    """A closed loop keeps `concurrency` requests (sessions) in flight: a window with fewer never reaches it."""
    for i, w in enumerate(workloads):
        turns = w.sessions.turns if w.sessions is not None else 1
        flights = w.num_requests // turns
        what = f"{flights} sessions ({w.num_requests} requests of {turns} turns)" if turns > 1 else \
            f"{w.num_requests} requests"
        for j, c in enumerate(load.concurrency):
            if c > flights:
                raise FieldProblem(("load", "concurrency", j), f"concurrency {c} is above workloads.{i}.num_requests: "
                                   f"workload {w.name!r} sends {what} per window, so at most {flights} are ever in "
                                   f"flight (raise num_requests to at least {c * turns} or lower the concurrency)")


def check_window_length(load: LoadSpec, workloads: Sequence[WorkloadSpec]) -> None:
    """An open loop's window sends num_requests at request_rate: at most bounds.MAX_WINDOW_S long."""
    rates: list[tuple[Loc, float]] = [(("load", "request_rate", j), r) for j, r in enumerate(load.request_rate)]
    s = load.search
    if s is not None and s.over == "request_rate":
        rates.append((("load", "search", "min"), s.min))
    for i, w in enumerate(workloads):
        for loc, rate in rates:
            if w.num_requests / rate > B.MAX_WINDOW_S:
                raise FieldProblem(loc, f"request rate {rate:g}/s sends workloads.{i}.num_requests "
                                   f"({w.num_requests}) over {w.num_requests / rate:.3g} s: a window may take at most "
                                   f"{B.MAX_WINDOW_S:g} s (one day); expected a rate of at least "
                                   f"{w.num_requests / B.MAX_WINDOW_S:.3g}/s")


def check_tokenizer(model: ModelSpec, workloads: Sequence[WorkloadSpec]) -> None:
    """Counting a conversation's tokens needs a tokenizer: a simulated model (sim://) has none of its own."""
    if not model.path.startswith(tuple(f"{s}://" for s in MODEL_SCHEMES)):
        return
    for i, w in enumerate(workloads):
        field = w.tokenizer_field()
        if field is not None and getattr(w.prompts, "tokenizer", None) is None:
            what = "output_tokens: dataset" if field == ("output_tokens",) else ".".join(field)
            raise FieldProblem(("workloads", i) + field, f"{what} counts tokens with the model's tokenizer, but "
                               f"model.path {model.path!r} is simulated and has none: set "
                               f"workloads.{i}.prompts.tokenizer (a tokenizer.json or its directory)")


def check_engines(engines: Mapping[EngineName, EngineLauncher], model: ModelSpec,
                  variants: Sequence[VariantSpec]) -> None:
    """engines.<name> launches that engine: an entry for an engine no variant runs would never be read."""
    used = {v.engine or model.engine for v in variants}
    for name, launcher in engines.items():
        if name not in used:
            raise FieldProblem(("engines", name), f"no variant runs on {name} (model.engine is {model.engine!r}; "
                               f"the variants run on: {', '.join(sorted(used))}): remove it")
        gated = [v.name for v in variants if (v.engine or model.engine) == name and v.deployment is not None
                 and v.deployment.kind in ("replicas", "pd")]
        if launcher.gateway is not None and not gated:
            raise FieldProblem(("engines", name, "gateway"), f"no {name} variant is a deployment behind SGLang's "
                               "gateway (deployment.kind replicas or pd): engines."
                               f"{name}.gateway would never be run (remove it)")
        entry = engine_entry(name)
        if entry is not None and entry.reports_sglbench_version and launcher.version is not None:
            raise FieldProblem(("engines", name, "version"), f"the {name} engine is part of sglbench and reports "
                               f"its own version: engines.{name}.version would be ignored (remove it)")


def check_order(order: Literal["grouped", "interleaved"], repeats: Union[int, RepeatsUntil]) -> None:
    """interleaved alternates variants between repeats: one repeat has nothing to alternate."""
    if order == "interleaved" and repeats == 1:
        raise FieldProblem(("order",), "interleaved alternates the variants between repeats, but repeats is 1: "
                           "there is nothing to interleave (set repeats to 2 or more, or leave order out)")


@dataclass(frozen=True)
class NoOp:
    """A field accepted although it changes nothing where it is set, with the note validate prints."""

    field: str
    """Its path, list items as []."""
    note: str


NO_OPS: tuple[NoOp, ...] = (
    NoOp("variants[].baseline", "marks the variant that is the baseline anyway (the first variant without "
                                "speculative decoding or tuning): it changes nothing"),
    NoOp("variants[].tuning", "kind none is the same as leaving tuning out"),
)
"""Documented no-ops: each found where it is set by no_op_notes."""


def _set_no_ops(variants: Sequence[VariantSpec]) -> Iterator[tuple[str, str]]:
    notes = {n.field: n.note for n in NO_OPS}
    explicit = [i for i, v in enumerate(variants) if v.baseline]
    if explicit:
        first_plain = next((j for j, v in enumerate(variants) if v.speculative is None and
                            (v.tuning is None or isinstance(v.tuning, NoTuning))), 0)
        if explicit[0] == first_plain:
            yield f"variants.{first_plain}.baseline", notes["variants[].baseline"]
    for i, v in enumerate(variants):
        if isinstance(v.tuning, NoTuning):
            yield f"variants.{i}.tuning", notes["variants[].tuning"]


def no_op_notes(variants: Sequence[VariantSpec]) -> list[tuple[str, str]]:
    """(field, note) of every documented no-op an experiment's variants set."""
    return list(_set_no_ops(variants))
