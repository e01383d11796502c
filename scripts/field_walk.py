"""Walk every field of the experiment schema and say, per load kind, what setting it does: write docs/field-walk.md.

For each field (recursively: every sub-model, every member of a `source:` / `kind:` / form union, every list item's
and dict value's model) and each base experiment (one per load kind: closed loop, open loop, a capacity search over
concurrency and over request rate, sessions, a trace replay; each base holds a plain, a speculative and a tuned
variant, so the variant kinds are walked inside every load kind), the field is set to a non-default valid value and
the outcome is one of:

  plan     the plan changed: run keys, their order, a run's load point, a variant's argv, env, tp, baseline role
           or profile, or one of the experiment-wide settings as the driver reads them (`settings()` below)
  refused  the spec refuses it, naming the field (and, in the message, the field that makes it meaningless)
  no-op    a documented no-op there (cluster/config/relevance.py's NO_OPS): validate prints its note
  n/a      the field's parent cannot be set in this base at all (the parent's own row says refused)
  IGNORED  none of these: a field silently ignored. tests/unit/config/test_field_walk.py fails on any.

    python scripts/field_walk.py            # rewrite docs/field-walk.md
    python scripts/field_walk.py --check    # exit 1 when it is stale
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import types
import typing
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, Optional, Union, get_args, get_origin

from pydantic import BaseModel

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "docs" / "field-walk.md"

Doc = dict[str, Any]
Outcome = Literal["plan", "refused", "no-op", "n/a", "IGNORED", "WRONG-FIELD"]

_VARIANTS: list[Doc] = [
    {"name": "base"},
    {"name": "nextn", "speculative": {"algorithm": "NEXTN", "num_steps": 2}},
    {"name": "tuned", "tuning": {"kind": "flashinfer_autotune"}},
]
_WORKLOAD: Doc = {"name": "w", "input_tokens": 64, "output_tokens": 8, "num_requests": 16}
_TRACE = str(REPO / "datasets" / "example-trace.jsonl")


def _base(workload: Doc, load: Doc, **extra: Any) -> Doc:
    return {"version": 1, "name": "walk", "model": {"path": "/models/m", "engine": "sim"},
            "variants": copy.deepcopy(_VARIANTS), "workloads": [workload], "load": load, **extra}


BASES: dict[str, Doc] = {
    "closed": _base(_WORKLOAD, {"concurrency": [1, 2]}),
    "open": _base(_WORKLOAD, {"request_rate": [2.0, 4.0]}),
    "search-c": _base(_WORKLOAD, {"search": {"slo_attainment": 0.9, "min": 1, "max": 8}}, slo={"ttft_ms": 500.0}),
    "search-rate": _base(_WORKLOAD, {"search": {"slo_attainment": 0.9, "over": "request_rate", "min": 1.0,
                                                "max": 8.0}}, slo={"ttft_ms": 500.0}),
    "sessions": _base({**_WORKLOAD, "sessions": {"turns": 2}}, {"concurrency": [1, 2]}),
    "trace": _base({"name": "w", "input_tokens": "dataset", "output_tokens": "dataset", "num_requests": 16,
                    "prompts": {"source": "trace", "path": _TRACE}}, {"request_rate": [2.0, 4.0], "arrival": "trace"}),
}
"""One base experiment per load kind; each walks the plain (variants.0), speculative (1) and tuned (2) variant."""

# ------------------------------------------------------------------------------------------ values to set a field to

SAMPLES: dict[str, Any] = {
    # minimal valid values of fields whose type alone does not say one (paths: list items as [], dict values as {})
    "model.path": "/models/other",
    "model.served_name": "served",
    "engines": {"sim": {"python": "/usr/bin/python3"}},
    "engines{}.python": "/usr/bin/python3",
    "engines{}.launcher": ["/usr/bin/sim-launcher"],
    "engines{}.version": "0.5.23",
    "engines{}.gateway": "/opt/sglang/bin/smg",
    "server.args": {"mem-fraction-static": 0.8},
    "server.env": {"NCCL_DEBUG": "INFO"},
    "variants[].args": {"mem-fraction-static": 0.8},
    "variants[].env": {"NCCL_DEBUG": "INFO"},
    "variants[].engine": "sglang",
    "variants[].speculative": {"algorithm": "NEXTN", "num_steps": 1},
    "variants[].speculative.algorithm": "EAGLE",
    "variants[].speculative.num_steps": [1, 3],
    "variants[].speculative.num_draft_tokens": 4,
    "variants[].speculative.eagle_topk": 2,
    "variants[].speculative.draft_model_path": "/models/draft",
    "variants[].speculative.adaptive": {"experiment": "earlier-study"},
    "variants[].speculative.adaptive.experiment": "other-study",
    "variants[].speculative.adaptive.root": "/data/results",
    "variants[].speculative.adaptive.workload": "chat",
    "variants[].tuning.options.model_config": "/models/base",
    "variants[].tuning.options.dtype": "fp8_w8a8",
    "variants[].tuning.options.batch_sizes": [1, 2],
    "variants[].tuning.options.moe_runner_backend": ["triton"],
    "variants[].tuning.options.fp4_gemm_backend": ["cutlass"],
    "variants[].tuning.options.exclude": [{"moe_runner_backend": "triton"}],
    "variants[].tuning.options.exclude[].moe_runner_backend": "flashinfer_cutlass",
    "variants[].tuning.options.exclude[].fp4_gemm_backend": "flashinfer_cutlass",
    "variants[].tuning.options.combination": {"moe_runner_backend": "triton"},
    "variants[].profile": {"steps": 5},
    "variants[].deployment.replicas": 3,
    "variants[].deployment.policy": "round_robin",
    "variants[].deployment.gateway_args": {"cache-threshold": 0.5},
    "variants[].deployment.prefill": {"servers": 2, "tp": 1},
    "variants[].deployment.decode": {"servers": 2, "tp": 1},
    "variants[].deployment.prefill.args": {"chunked-prefill-size": 4096},
    "variants[].deployment.decode.args": {"chunked-prefill-size": 4096},
    "variants[].deployment.prefill.env": {"NCCL_DEBUG": "INFO"},
    "variants[].deployment.decode.env": {"NCCL_DEBUG": "INFO"},
    "variants[].deployment.prefill_policy": "random",
    "variants[].deployment.nodes": 4,
    "variants[].deployment.dist_init_port": 29500,
    "variants[].deployment.bootstrap_port": 8999,
    "variants[].deployment.transfer_backend": "nixl",
    "variants[].deployment.decode_policy": "random",
    "variants[].deployment.url": "http://10.0.0.6:30000",
    "variants[].deployment.api_key_env": "ENDPOINT_KEY",
    "workloads[].prompts.path": "/data/p.jsonl",
    "workloads[].prompts.tokenizer": "/models/tok",
    "workloads[].prompts.category": "math",
    "workloads[].prompts.categories": ["math"],
    "workloads[].prompts.category_field": "topic",
    "workloads[].prompts.chat_template_kwargs": {"enable_thinking": False},
    "workloads[].prompts.shared_prefix": {"groups": 2, "tokens": 8},
    "workloads[].sessions": {"turns": 2},
    "load.concurrency": [2],
    "load.request_rate": [3.0],
    "load.search": {"slo_attainment": 0.9, "min": 1, "max": 4},
    "load.search.min": 2,
    "load.search.max": 6,
    "load.search.resolution": 2,
    "load.read_batch_ms": 1.0,
    "load.shapes": [{"shape": "registered-in-tests-only"}],
    "repeats": 2,
    "slo": {"tpot_ms": 50.0},
    "correctness.eval": {"path": str(REPO / "datasets" / "arithmetic-200.jsonl")},
    "correctness.eval.prompt_field": "question",
    "correctness.eval.answer_field": "solution",
    "correctness.eval.path": str(REPO / "datasets" / "arithmetic-200.jsonl") + ".copy",
    "output": "results-other",
    "name": "walk2",
    "sim.accept_probs": [0.5],
    "sim.category_accept_probs": {"math": [0.5]},
    "sim.template_accept_probs": {"enable_thinking=false": [0.5]},
    "sim.dp_accept_probs": [[0.5], [0.9]],
    "acceptance_reference": {"positions": [0.8]},
    "acceptance_reference.positions": [0.7, 0.6],
    "acceptance_reference.experiment": "other-study",
    "acceptance_reference.variant": "nextn",
    "acceptance_reference.family": "qwen3.5-mtp",
    "acceptance_reference.margin": 0.2,
    "sim.fail_start": "boom",
    "sim.garbage_backends": ["triton"],
    "sim.backend_speed_factors": {"triton": 0.9},
    "sim.gpu_throttle_reason": "power",
}
"""A field's sample value where the generic rule (flip a bool, step a number inside its bounds, another literal)
does not fit; `variants[].sim.*` read `sim.*`'s."""

WITH: dict[str, dict[str, Any]] = {
    "load.arrival": {"arrival_cv": 1.5},
}
"""Fields whose sample needs a companion set beside it (its siblings, by name): gamma arrivals need arrival_cv."""

MEMBERS: dict[str, dict[str, Any]] = {
    # every member of a union field: the value that selects it (its fields are walked with the field set to it)
    "repeats": {"count": 3, "until": {"until": {"half_width_pct": 10.0}}},
    "workloads[].prompts": {"random_ids": {"source": "random_ids"}, "jsonl": {"source": "jsonl", "path": "/p.jsonl"},
                            "text": {"source": "text", "path": "/c.txt"},
                            "sharegpt": {"source": "sharegpt", "path": "/c.json"},
                            "trace": {"source": "trace", "path": _TRACE}},
    "variants[].tuning": {"flashinfer_autotune": {"kind": "flashinfer_autotune"}, "triton_moe": {"kind": "triton_moe"},
                          "backend_sweep": {"kind": "backend_sweep", "options": {"moe_runner_backend": ["triton",
                                                                                                         "cutlass"]}},
                          "none": {"kind": "none"}},
    "variants[].deployment": {"endpoint": {"kind": "endpoint", "url": "http://10.0.0.5:30000"},
                              "replicas": {"kind": "replicas", "replicas": 2},
                              "pd": {"kind": "pd", "prefill": {"tp": 1}, "decode": {"tp": 1}},
                              "nodes": {"kind": "nodes", "nodes": 2}},
    "workloads[].input_tokens": {"count": 32, "dist": {"dist": "normal", "mean": 32.0, "std": 4.0, "min": 16,
                                                       "max": 48}, "dataset": "dataset"},
    "workloads[].output_tokens": {"count": 4, "dist": {"dist": "normal", "mean": 8.0, "std": 2.0, "min": 4,
                                                       "max": 12}, "dataset": "dataset"},
}
"""Union fields: member name → the value that selects it."""

MEMBER_WITH: dict[tuple[str, str], dict[str, Any]] = {
    ("workloads[].prompts", "sharegpt"): {"input_tokens": "dataset"},
    ("workloads[].prompts", "trace"): {"input_tokens": "dataset", "output_tokens": "dataset"},
    ("variants[].deployment", "nodes"): {"tp": 4},
}
"""Members that need siblings set beside them (by name): a conversation source sends its prompts as written, a
trace replays its own lengths; set in the member's step and under every field walked inside it."""


def _norm(path: tuple[Any, ...]) -> str:
    out = ""
    for i, p in enumerate(path):
        if isinstance(p, int):
            out += "[]"
        elif i and isinstance(path[i - 1], str) and path[i - 1] == "engines":
            out += "{}"
        else:
            out += ("." if out else "") + p
    return out


def _strip_optional(ann: Any) -> Any:
    if get_origin(ann) in (Union, types.UnionType):
        args = [a for a in get_args(ann) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return ann


def _unwrap(ann: Any) -> Any:
    """The type under Optional and Annotated; a registered engine's name (config/engines.py) reads as the Literal of
    the registered names, so a walk picks another engine as it picks another literal."""
    from cluster.config.engines import RegisteredEngine, engine_names

    while True:
        if get_origin(ann) is typing.Annotated and RegisteredEngine in ann.__metadata__:
            return Literal[engine_names()]
        nxt = _strip_optional(get_args(ann)[0] if get_origin(ann) is typing.Annotated else ann)
        if nxt is ann:
            return ann
        ann = nxt


def _model_of(ann: Any) -> Optional[type[BaseModel]]:
    ann = _unwrap(ann)
    return ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None


def _bounds(info: Any) -> tuple[Optional[float], Optional[float], bool]:
    lo = hi = None
    strict_lo = False
    found = list(info.metadata)
    ann = info.annotation
    for _ in range(4):
        found += list(getattr(ann, "__metadata__", ()))
        inner = [a for a in get_args(ann) if a is not type(None)]
        if not inner:
            break
        ann = inner[0]
    for m in found:
        for attr in ("ge", "gt"):
            if getattr(m, attr, None) is not None:
                lo, strict_lo = getattr(m, attr), attr == "gt"
        for attr in ("le", "lt"):
            if getattr(m, attr, None) is not None:
                hi = getattr(m, attr)
    return lo, hi, strict_lo


def _declared(info: Any) -> Any:
    """A field's annotation with the metadata pydantic moved off it (model.engine's EngineName marker) put back."""
    return typing.Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation


def generic_sample(info: Any) -> Any:
    """A valid value other than the default from the field's type: a flipped bool, a number stepped inside its
    bounds, another literal."""
    ann = _unwrap(_declared(info))
    default = info.default
    if ann is bool:
        return not default
    if get_origin(ann) is Literal:
        return next(a for a in get_args(ann) if a != default)
    if ann in (int, float):
        lo, hi, strict = _bounds(info)
        base = default if isinstance(default, (int, float)) and not isinstance(default, bool) else None
        if base is None:
            v = (lo or 0) + 1 if lo is not None else 1
        else:
            v = base + 1 if base >= 1 else base + 0.5 if ann is float else base + 1
            if hi is not None and v > hi:
                v = base - 1 if ann is int else base / 2
        return int(v) if ann is int else float(v)
    if ann is str:
        return f"{default}-walk" if isinstance(default, str) else "walk"
    raise LookupError(f"no generic sample for {info.annotation}")


# ------------------------------------------------------------------------------------------------- the walk itself

@dataclass(frozen=True)
class Step:
    field: str
    """The field's path (list items []), with the union member in brackets where it is one: `repeats<until>.min`."""
    path: tuple[Any, ...]
    """Where it is set in the base document."""
    parents: tuple[tuple[tuple[Any, ...], Any], ...]
    """Values set before it (its absent parents, a union member): the reference the field's change is measured from."""
    value: Any
    beside: tuple[tuple[tuple[Any, ...], Any], ...] = ()
    """Siblings set with it (MEMBER_WITH, WITH)."""


def _get(doc: Doc, path: tuple[Any, ...]) -> Any:
    for p in path:
        if isinstance(doc, list):
            doc = doc[p] if p < len(doc) else None
        elif isinstance(doc, dict):
            doc = doc.get(p)
        else:
            return None
        if doc is None:
            return None
    return doc


def _set(doc: Doc, path: tuple[Any, ...], value: Any) -> None:
    cur: Any = doc
    for p in path[:-1]:
        nxt = cur[p] if isinstance(cur, list) else cur.get(p)
        if nxt is None:
            nxt = {}
            cur[p] = nxt
        cur = nxt
    cur[path[-1]] = copy.deepcopy(value)


def _members(name: str, ann: Any) -> Optional[dict[str, Any]]:
    if name in MEMBERS:
        return MEMBERS[name]
    return None


def _with(doc: Doc, parents: tuple[tuple[tuple[Any, ...], Any], ...]) -> Doc:
    out = copy.deepcopy(doc)
    for p, v in parents:
        _set(out, p, v)
    return out


def steps(model: type[BaseModel], base: Doc, path: tuple[Any, ...] = (), label: str = "",
          parents: tuple[tuple[tuple[Any, ...], Any], ...] = ()) -> Iterator[Step]:
    """Every field under `model` at `path` of the base document."""
    from cluster.config.sim_knobs import Knobs

    doc = _with(base, parents)

    for fname, info in model.model_fields.items():
        key = info.alias or fname
        fpath = path + (key,)
        name = _norm(fpath)
        flabel = f"{label}.{key}" if label else key
        sample_key = name if name in SAMPLES else name.replace("variants[].sim.", "sim.")
        members = _members(name, info.annotation)
        sub = _model_of(info.annotation)
        current = _get(doc, fpath)
        if members is not None:
            default = info.default_factory() if info.default_factory is not None else info.default
            for member, value in members.items():
                member_model = _member_model(name, value)
                as_default = member_model is not None and isinstance(default, member_model) and \
                    member_model.model_validate(value) == default
                beside = tuple((path + (k,), v) for k, v in MEMBER_WITH.get((name, member), {}).items())
                if value != current and not as_default:  # the base's own member, or the default spelled out: its
                    yield Step(f"{flabel}<{member}>", fpath, parents, value, beside)  # fields are still walked
                if member_model is not None:
                    yield from steps(member_model, base, fpath, f"{flabel}<{member}>",
                                     parents + ((fpath, value),) + beside)
            continue
        origin = get_origin(_unwrap(info.annotation))
        if origin is list and _model_of(get_args(_unwrap(info.annotation))[0]) is not None \
                and model is not Knobs:
            item_model = _model_of(get_args(_unwrap(info.annotation))[0])
            assert item_model is not None
            items = current if isinstance(current, list) and current else None
            if sample_key in SAMPLES:
                yield Step(flabel, fpath, parents, SAMPLES[sample_key])
            if items is None:
                sample = SAMPLES[sample_key]
                yield from steps(item_model, base, fpath + (0,), f"{flabel}[]", parents + ((fpath, sample),))
            else:
                for i in range(len(items)):
                    yield from steps(item_model, base, fpath + (i,), f"{flabel}[{i}]", parents)
            continue
        if origin is dict and _model_of(get_args(_unwrap(info.annotation))[1]) is not None:
            value_model = _model_of(get_args(_unwrap(info.annotation))[1])
            assert value_model is not None
            yield Step(flabel, fpath, parents, SAMPLES[sample_key])
            for engine in ("sim", "sglang", "vllm"):
                yield Step(f"{flabel}.{engine}", fpath + (engine,), parents, SAMPLES[sample_key]["sim"])
                yield from steps(value_model, base, fpath + (engine,), f"{flabel}.{engine}",
                                 parents + ((fpath + (engine,), {}),))
            continue
        if sub is not None:
            if current is None and sample_key in SAMPLES:
                yield Step(flabel, fpath, parents, SAMPLES[sample_key])
                yield from steps(sub, base, fpath, flabel, parents + ((fpath, SAMPLES[sample_key]),))
            else:
                yield from steps(sub, base, fpath, flabel, parents)
            continue
        ann = _unwrap(info.annotation)
        if get_origin(ann) is Literal and len(get_args(ann)) == 1:
            continue  # one valid value (version: 1, a union member's source: or kind:): walked as the member
        if sample_key in SAMPLES:
            value = SAMPLES[sample_key]
        else:
            try:
                value = generic_sample(info)
            except LookupError as e:
                raise LookupError(f"{name}: {e}: give it a value in SAMPLES") from None
        if current is not None and value == current:
            value = _other(info, current)
        yield Step(flabel, fpath, parents, value)


def _other(info: Any, current: Any) -> Any:
    ann = _unwrap(_declared(info))
    if ann is bool:
        return not current
    if get_origin(ann) is Literal:
        return next(a for a in get_args(ann) if a != current)
    if isinstance(current, (int, float)):
        return current + 1
    raise LookupError(f"no other value than {current!r}")


def _member_model(name: str, value: Any) -> Optional[type[BaseModel]]:
    from cluster.config.prompts import PROMPT_SOURCES
    from cluster.config.repeats import RepeatsUntil
    from cluster.config.tuning import TUNING_MODELS
    from cluster.config.workload import LengthDist

    if name == "repeats":
        return RepeatsUntil if isinstance(value, dict) else None
    if name == "workloads[].prompts":
        return PROMPT_SOURCES[value["source"]]
    if name == "variants[].tuning":
        return TUNING_MODELS[value["kind"]]
    if name == "variants[].deployment":
        from cluster.config.deployment import DEPLOYMENT_MODELS

        return DEPLOYMENT_MODELS[value["kind"]]
    if name.endswith("_tokens"):
        return LengthDist if isinstance(value, dict) else None
    return None


# ---------------------------------------------------------------------------------------------- what the plan is

def settings(spec: Any) -> dict[str, Any]:
    """The experiment-wide settings as the driver reads them (cluster/distributed/): each one only where it acts."""
    c, t = spec.correctness, spec.telemetry
    return {
        "warmup_requests": spec.warmup_requests, "health_timeout_s": spec.health_timeout_s,
        "request_timeout_s": spec.request_timeout_s, "max_client_lag_ms": spec.max_client_lag_ms,
        "output": spec.output, "isolation": spec.isolation, "gpus_per_node": spec.cluster.gpus_per_node,
        "nodes": spec.cluster.nodes,  # read by preflight's placement check (plan refuses what cannot be placed)
        "served_name": spec.model.served_name,
        "telemetry": t.rate_hz if t.enabled else None,
        "gate": c.model_dump(mode="json", exclude={"eval"}) if c.enabled else None,
        "eval": c.eval.model_dump(mode="json") if c.eval is not None else None,
        "slo": spec.slo.model_dump(mode="json") if spec.slo is not None else None,
        "repeats": spec.repeats if isinstance(spec.repeats, int) else spec.repeats.model_dump(mode="json"),
        "search": spec.load.search.model_dump(mode="json") if spec.load.search is not None else None,
        "stop_when_saturated": spec.load.stop_when_saturated,
        "actors_per_server": spec.load.actors_per_server,
        # read by the analysis, from the experiment.json the driver stores: the acceptance health verdict
        "acceptance_reference": (spec.acceptance_reference.model_dump(mode="json")
                                 if spec.acceptance_reference is not None else None),
    }


def fingerprint(spec: Any) -> str:
    """Run keys in order with their load points; per expanded variant its argv, env, tp, baseline role and profile;
    the settings above. The arrival schedule and prompts are functions of the run key's inputs (seed, workload,
    load point), so a change to them changes a run key."""
    from cluster.engines.registry import get_engine
    from cluster.engines.gateway import PrefillWorker
    from cluster.plan.deployment import gateway_command, planned_processes
    from cluster.plan.runs import expand_variants, make_plan
    from cluster.tuning.stage import with_artifact

    runs = [(r.run_key, r.variant.name, r.workload.name, r.load.identity(), r.repeat) for r in make_plan(spec)]
    variants = []
    for v in expand_variants(spec):
        cmd = get_engine(v.engine).launch(with_artifact(v, None), "127.0.0.1", 30000, spec.engines.get(v.engine),
                                          "python")
        # a deployment: every process's argv and env as launched, and the gateway's settings as the driver reads them
        procs = [(p.name, list(c.argv), dict(c.env)) for p, pv in planned_processes(v) for c in [get_engine(
            pv.engine).launch(with_artifact(pv, None), "127.0.0.1", 30000, spec.engines.get(pv.engine), "python")]]
        gw = gateway_command(v, spec.engines.get(v.engine), ["http://w:1"], [PrefillWorker("http://p:1", 1)],
                             ["http://d:1"], 30000, 30001)
        procs.append(("gateway", list(gw.argv) if gw is not None else [], {}))
        variants.append((v.name, list(cmd.argv), dict(cmd.env), v.tp, v.is_baseline,
                         v.profile.model_dump(mode="json") if v.profile is not None else None, procs,
                         v.deployment.model_dump(mode="json") if v.deployment is not None else None))
    return json.dumps([runs, variants, settings(spec)], sort_keys=True, default=str)


@dataclass(frozen=True)
class Row:
    field: str
    base: str
    outcome: Outcome
    detail: str


def _load(doc: Doc) -> Any:
    """The spec the loader gives; a refusal through the loader itself, so it names the field as a user sees it."""
    from pydantic import ValidationError

    from cluster.config.experiment import ExperimentSpec
    from cluster.config.loader import parse_spec_text

    try:
        return ExperimentSpec.model_validate(doc)  # the loader's last step; its YAML checks find nothing in JSON
    except ValidationError:
        return parse_spec_text(json.dumps(doc), "walk.yaml")


def _notes(spec: Any) -> Callable[[], list[tuple[str, str]]]:
    try:
        from cluster.config.relevance import no_op_notes
    except ImportError:  # the walk run against a tree without the registry (the count before it existed)
        return lambda: []
    return lambda: no_op_notes(spec.variants)


_REFS: dict[str, Any] = {}
"""Reference document (JSON) → (spec, fingerprint) or the refusal: the fields under one parent share it."""


def _reference(ref: Doc) -> Any:
    from cluster.errors import UserError

    key = json.dumps(ref, sort_keys=True)
    if key not in _REFS:
        try:
            spec = _load(ref)
            _REFS[key] = (spec, fingerprint(spec))
        except UserError as e:
            _REFS[key] = e
    return _REFS[key]


def outcome(base: str, step: Step) -> Row:
    from cluster.errors import UserError

    ref = copy.deepcopy(BASES[base])
    for p, v in step.parents:
        _set(ref, p, v)
    got = _reference(ref)
    if isinstance(got, UserError):
        return Row(step.field, base, "n/a", f"its parent is refused here: {getattr(got, 'field', '')}")
    ref_spec, ref_print = got
    doc = copy.deepcopy(ref)
    _set(doc, step.path, step.value)
    for sibling, v in WITH.get(_norm(step.path), {}).items():
        _set(doc, step.path[:-1] + (sibling,), v)
    for p, v in step.beside:
        _set(doc, p, v)
    try:
        spec = _load(doc)
        changed = fingerprint(spec) != ref_print
    except UserError as e:
        where = str(getattr(e, "field", "") or "")
        message = str(getattr(e, "message", e))
        here = ".".join(map(str, step.path))
        # the refusal names the field: as its location, or in its message (by key, or by the member's value)
        named = where == here or where.startswith(here + ".") or str(step.path[-1]) in message or (
            isinstance(step.value, str) and step.value in message) or (
            isinstance(step.value, dict) and any(k in step.value and (k in message or str(step.value[k]) in message)
                                                 for k in ("source", "kind")))
        return Row(step.field, base, "refused" if named else "WRONG-FIELD",
                   (f"{where}: " if where else "") + message[:200])
    if changed:
        return Row(step.field, base, "plan", "")
    dotted = ".".join(map(str, step.path))
    notes = [n for f, n in _notes(spec)() if f == dotted] if dotted not in {f for f, _ in _notes(ref_spec)()} else []
    if notes:
        return Row(step.field, base, "no-op", notes[0])
    return Row(step.field, base, "IGNORED", f"set to {json.dumps(step.value, default=str)[:60]}")


def walk(bases: Optional[list[str]] = None) -> list[Row]:
    from cluster.config.experiment import ExperimentSpec

    rows = []
    for base in bases or list(BASES):
        for step in steps(ExperimentSpec, BASES[base]):
            rows.append(outcome(base, step))
    return rows


# ------------------------------------------------------------------------------------------------------ the table

_CELL = {"plan": "plan", "refused": "**refused**", "no-op": "no-op", "n/a": "–", "IGNORED": "**IGNORED**",
         "WRONG-FIELD": "**refused, another field named**"}


def render(rows: list[Row]) -> str:
    bases = list(BASES)
    by: dict[str, dict[str, Row]] = {}
    for r in rows:
        by.setdefault(r.field, {})[r.base] = r
    lines = ["# Field walk: what every experiment field does, per load kind", "",
             "Generated by `python scripts/field_walk.py` (do not edit by hand); tests/unit/config/test_field_walk.py "
             "fails when this file is stale or any cell says IGNORED.", "",
             "Each field is set to a non-default valid value on a base experiment of each load kind (its plain "
             "variant is `variants[0]`, the speculative one `variants[1]`, the tuned one `variants[2]`); `<member>` "
             "names the union member walked. **plan**: the run keys, a run's load point, a variant's argv/env/tp/"
             "baseline/profile or an experiment-wide setting as the driver reads it changed; **refused**: the spec "
             "refuses it naming the field and the field that makes it meaningless; **no-op**: a documented no-op "
             "there (cluster/config/relevance.py, validate prints the note); –: its parent cannot be set in that "
             "base.", "",
             "| field | " + " | ".join(bases) + " |", "|---|" + "---|" * len(bases)]
    for field, cells in by.items():
        lines.append(f"| `{field}` | " + " | ".join(_CELL[cells[b].outcome] if b in cells else "" for b in bases)
                     + " |")
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.outcome] = counts.get(r.outcome, 0) + 1
    lines += ["", f"{len(by)} fields × {len(bases)} load kinds: " + ", ".join(
        f"{k} {counts.get(k, 0)}" for k in ("plan", "refused", "no-op", "n/a", "IGNORED")) + ".", ""]
    refused = [r for r in rows if r.outcome in ("refused", "no-op")]
    if refused:
        lines += ["## Why refused / no-op", "", "| field | base | message |", "|---|---|---|"]
        seen: set[tuple[str, str]] = set()
        for r in refused:
            if (r.field, r.detail) not in seen:
                seen.add((r.field, r.detail))
                lines.append(f"| `{r.field}` | {r.base} | {r.detail.replace('|', '/')} |")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when docs/field-walk.md is stale")
    ap.add_argument("--ignored", action="store_true", help="list the IGNORED cells and exit 1 when there are any")
    args = ap.parse_args()
    rows = walk()
    if args.ignored:
        bad = [r for r in rows if r.outcome in ("IGNORED", "WRONG-FIELD")]
        for r in bad:
            print(f"{r.field}\t{r.base}\t{r.outcome}\t{r.detail}")
        print(f"{len({r.field for r in bad})} fields ignored in {len(bad)} (field, base) cells")
        return 1 if bad else 0
    text = render(rows)
    if args.check:
        return 0 if OUT.read_text(encoding="utf-8") == text else 1
    OUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
