"""Fields another field makes meaningless: the cross-section rules that refuse them (each once, called by
ExperimentSpec) and the documented no-ops that are accepted with a printed note (NO_OPS: validate prints them,
scripts/field_walk.py and docs/field-walk.md read them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator

from cluster.config import bounds as B
from cluster.config.fields import FieldProblem
from cluster.config.locations import MODEL_SCHEMES
from cluster.config.repeats import RepeatsUntil
from cluster.config.tuning import NoTuning

if TYPE_CHECKING:
    from cluster.config.experiment import ExperimentSpec


def check_repeats_metric(spec: "ExperimentSpec") -> None:
    """repeats.until's metric must exist on the points it decides: acceptance length needs a speculative variant,
    TPOT needs a second output token."""
    if not isinstance(spec.repeats, RepeatsUntil):
        return
    metric = spec.repeats.until.metric
    if metric == "accept_length" and not any(v.speculative is not None for v in spec.variants):
        raise FieldProblem(("repeats", "until", "metric"), "accept_length is measured only on speculative "
                           "variants, but no variant sets variants[].speculative: every point would run to "
                           "repeats.max without an interval (pick another metric or add a speculative variant)")
    if metric == "tpot_ms_p50":
        for i, w in enumerate(spec.workloads):
            if w.output_tokens_max() == 1:
                raise FieldProblem(("repeats", "until", "metric"), f"tpot_ms_p50 is the time between output "
                                   f"tokens, but workloads.{i}.output_tokens is 1 (workload {w.name!r}): there is "
                                   "no second token, so the interval never narrows (pick another metric)")


def check_closed_loop_requests(spec: "ExperimentSpec") -> None:
    """A closed loop keeps `concurrency` requests (sessions) in flight: a window with fewer never reaches it."""
    for i, w in enumerate(spec.workloads):
        turns = w.sessions.turns if w.sessions is not None else 1
        flights = w.num_requests // turns
        what = f"{flights} sessions ({w.num_requests} requests of {turns} turns)" if turns > 1 else \
            f"{w.num_requests} requests"
        for j, c in enumerate(spec.load.concurrency):
            if c > flights:
                raise FieldProblem(("load", "concurrency", j), f"concurrency {c} is above workloads.{i}.num_requests: "
                                   f"workload {w.name!r} sends {what} per window, so at most {flights} are ever in "
                                   f"flight (raise num_requests to at least {c * turns} or lower the concurrency)")


def check_window_length(spec: "ExperimentSpec") -> None:
    """An open loop's window sends num_requests at request_rate: at most bounds.MAX_WINDOW_S long."""
    rates = [(("load", "request_rate", j), r) for j, r in enumerate(spec.load.request_rate)]
    s = spec.load.search
    if s is not None and s.over == "request_rate":
        rates.append((("load", "search", "min"), s.min))
    for i, w in enumerate(spec.workloads):
        for loc, rate in rates:
            if w.num_requests / rate > B.MAX_WINDOW_S:
                raise FieldProblem(loc, f"request rate {rate:g}/s sends workloads.{i}.num_requests "
                                   f"({w.num_requests}) over {w.num_requests / rate:.3g} s: a window may take at most "
                                   f"{B.MAX_WINDOW_S:g} s (one day); expected a rate of at least "
                                   f"{w.num_requests / B.MAX_WINDOW_S:.3g}/s")


def check_tokenizer(spec: "ExperimentSpec") -> None:
    """Counting a conversation's tokens needs a tokenizer: a simulated model (sim://) has none of its own."""
    if not spec.model.path.startswith(tuple(f"{s}://" for s in MODEL_SCHEMES)):
        return
    for i, w in enumerate(spec.workloads):
        field = w.tokenizer_field()
        if field is not None and getattr(w.prompts, "tokenizer", None) is None:
            what = "output_tokens: dataset" if field == ("output_tokens",) else ".".join(field)
            raise FieldProblem(("workloads", i) + field, f"{what} counts tokens with the model's tokenizer, but model.path {spec.model.path!r} is simulated and has none: set "
                               f"workloads.{i}.prompts.tokenizer (a tokenizer.json or its directory)")


def check_engines(spec: "ExperimentSpec") -> None:
    """engines.<name> launches that engine: an entry for an engine no variant runs would never be read."""
    used = {v.engine or spec.model.engine for v in spec.variants}
    for name, launcher in spec.engines.items():
        if name not in used:
            raise FieldProblem(("engines", name), f"no variant runs on {name} (model.engine is "
                               f"{spec.model.engine!r}; variants[].engine: {sorted(used)}): remove it")
        if name == "sim" and launcher.version is not None:
            raise FieldProblem(("engines", "sim", "version"), "the simulated engine is part of sglbench and "
                               "reports its own version: engines.sim.version would be ignored (remove it)")


def check_order(spec: "ExperimentSpec") -> None:
    if spec.order == "interleaved" and spec.repeats == 1:
        raise FieldProblem(("order",), "interleaved alternates the variants between repeats, but repeats is 1: "
                           "there is nothing to interleave (set repeats to 2 or more, or leave order out)")


CROSS_SECTION_RULES: tuple[Callable[["ExperimentSpec"], None], ...] = (
    check_repeats_metric, check_closed_loop_requests, check_window_length, check_tokenizer, check_engines,
    check_order)
"""The rules across sections that refuse a field another makes meaningless (each raises FieldProblem)."""


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


def _set_no_ops(spec: "ExperimentSpec") -> Iterator[tuple[str, str]]:
    notes = {n.field: n.note for n in NO_OPS}
    explicit = [i for i, v in enumerate(spec.variants) if v.baseline]
    if explicit:
        i = explicit[0]
        first_plain = next((j for j, v in enumerate(spec.variants) if v.speculative is None and
                            (v.tuning is None or isinstance(v.tuning, NoTuning))), 0)
        if i == first_plain:
            yield f"variants.{i}.baseline", notes["variants[].baseline"]
    for i, v in enumerate(spec.variants):
        if isinstance(v.tuning, NoTuning):
            yield f"variants.{i}.tuning", notes["variants[].tuning"]


def no_op_notes(spec: "ExperimentSpec") -> list[tuple[str, str]]:
    """(field, note) of every documented no-op this spec sets."""
    return list(_set_no_ops(spec))
