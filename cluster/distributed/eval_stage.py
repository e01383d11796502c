"""The accuracy task (`correctness.eval`) as the driver carries it out: asked alone on each variant's server after
its gate, handed to the load actor for the window loadgen/eval.py's carries_eval names, and both phases' answers
stored in the correctness table (analysis/accuracy.py scores them)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional, Sequence

from ray.exceptions import RayActorError, RayTaskError

from cluster.analysis.accuracy import describe, eval_table, wilson
from cluster.config.experiment import ExperimentSpec
from cluster.config.template_settings import expand_workload
from cluster.kernel.run_facts import GateVerdict, ServerFacts
from cluster.dataset.store import DatasetStore
from cluster.distributed.gate_stage import gate_key
from cluster.distributed.handles import LoadHandle
from cluster.distributed.run_records import error_text
from cluster.kernel.gate import PHASE_ALONE
from cluster.kernel.runs import ResolvedVariant, RunPlan
from cluster.loadgen.eval import carries_eval, heaviest, read_eval_items
from cluster.kernel.eval_task import EvalAnswer, EvalItem
from cluster.plan.runs import load_points


class EvalStage:
    """One experiment's accuracy task: its items (read once, from the driver's directory) and the load point its
    loaded pass rides in."""

    def __init__(self, spec: ExperimentSpec, store: DatasetStore, base_dir: Path, log: Callable[[str], None]) -> None:
        self.spec = spec
        self.store = store
        self.log = log
        self.task = spec.correctness.eval
        self.items: tuple[EvalItem, ...] = read_eval_items(self.task, base_dir) if self.task is not None else ()
        self.point = heaviest(load_points(spec)) if self.task is not None and self.task.under_load else None

    @property
    def max_new_tokens(self) -> int:
        return self.task.max_new_tokens if self.task is not None else 0

    def ask_alone(self, load: LoadHandle, server: ServerFacts) -> tuple[EvalAnswer, ...]:
        """Every item asked by itself on a server with nothing else running (before the gate, whose loaded pass
        leaves requests behind); a failed call is each item's error (a wrong answer, counted)."""
        if not self.items:
            return ()
        model_name = self.spec.model.served_name or self.spec.model.path
        try:
            return load.run_eval_alone(server.base_url, model_name, self.items, self.max_new_tokens,
                                       self.spec.request_timeout_s)
        except (RayActorError, RayTaskError) as e:
            why = error_text(e)[0]
            return tuple(EvalAnswer(i.item_id, PHASE_ALONE, None, f"load actor failed: {why}") for i in self.items)

    def record_alone(self, variant: ResolvedVariant, answers: Sequence[EvalAnswer], gate: GateVerdict) -> None:
        """Store the answers asked alone, with the gate's verdict that followed them."""
        if answers:
            self._store(variant, answers, gate, "eval-alone-" + gate_key(variant)[5:], None, "alone")

    def items_for(self, run: RunPlan) -> tuple[EvalItem, ...]:
        """The items to send beside this run's load (none unless it is its variant's carrier)."""
        first = expand_workload(self.spec.workloads[0])[0].name  # a template axis's first setting
        return self.items if self.items and carries_eval(run, first, self.point) else ()

    def under_load(self, run: RunPlan, answers: Sequence[EvalAnswer], gate: Optional[GateVerdict]) -> None:
        """Store the answers sent during `run`'s window (one file per run: a re-measured run replaces its own)."""
        if answers:
            self._store(run.variant, answers, gate or GateVerdict(True, ()), "eval-" + run.run_key, run.run_key,
                        "under load")

    def _store(self, variant: ResolvedVariant, answers: Sequence[EvalAnswer], gate: GateVerdict, key: str,
               run_key: Optional[str], phase: str) -> None:
        table = eval_table(self.spec.name, variant.name, variant.engine, self.items, answers, gate.passed,
                           gate.reasons, run_key)
        self.store.write_variant_table("correctness", variant.name, key, table)
        rows = table.select(["correct", "counted"]).to_pylist()
        counted = [r for r in rows if r["counted"]]
        share = wilson(sum(1 for r in counted if r["correct"]), len(counted))
        skipped = len(rows) - len(counted)
        self.log(f"[{variant.name}] eval {phase}: {describe(share)}"
                 + (f" ({skipped} not answered while the load ran, not counted)" if skipped else ""))
