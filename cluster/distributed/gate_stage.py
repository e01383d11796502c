"""The correctness gate as the driver carries it out: answers shared between segment threads, the baseline first,
each variant's gate asked on its own server and judged against the baseline's answers."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from typing import Callable, Optional

from ray.exceptions import RayActorError, RayTaskError

from cluster.config.experiment import ExperimentSpec
from cluster.kernel.run_facts import GateVerdict, ServerFacts
from cluster.dataset.store import DatasetStore
from cluster.distributed.handles import LoadHandle
from cluster.distributed.run_records import error_text
from cluster.kernel.runs import ResolvedVariant, RunPlan
from cluster.loadgen.gate import GateAnswers

GATE_WAIT_LOG_S = 30.0
"""How often a gate waiting for the baseline's answers says so."""
PLACEMENT_PROGRESS_S = 10.0


class GateBoard:
    """Gate answers per variant, shared between segment threads (None: the variant gave none), and whether the
    baseline holds its GPUs yet.

    Every other variant's gate waits for the baseline's answers while its server holds GPUs. Under `isolation: gpus`
    variants that took every GPU first would wait for a baseline that can never be placed (tp 4 + tp 4 on 8 GPUs,
    the baseline third: a stall of health_timeout_s + 600 s, seen in CI). So other variants ask for GPUs only once
    the baseline has its own, or has answers (stored, or none: its segment's end always puts them)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.outputs: dict[str, Optional[GateAnswers]] = {}
        self._placed = False

    def put(self, variant: str, outputs: Optional[GateAnswers]) -> None:
        with self.cond:
            self.outputs[variant] = outputs
            self.cond.notify_all()

    def placed(self) -> None:
        """The baseline holds its GPUs."""
        with self.cond:
            self._placed = True
            self.cond.notify_all()

    def wait_placed(self, baseline: str, timeout_s: float) -> bool:
        """True once the baseline holds its GPUs or has answers; False after timeout_s."""
        with self.cond:
            return self.cond.wait_for(lambda: self._placed or baseline in self.outputs, timeout=timeout_s)

    def has(self, variant: str) -> bool:
        with self.cond:
            return variant in self.outputs

    def wait(self, variant: str, timeout_s: float, on_wait: Callable[[float], None] = lambda waited_s: None,
             every_s: float = GATE_WAIT_LOG_S) -> Optional[GateAnswers]:
        """The variant's answers once put (None after timeout_s); on_wait(seconds waited) every every_s."""
        t0 = time.monotonic()
        with self.cond:
            while variant not in self.outputs:
                left = timeout_s - (time.monotonic() - t0)
                if left <= 0:
                    break
                if not self.cond.wait_for(lambda: variant in self.outputs, timeout=min(every_s, left)):
                    on_wait(time.monotonic() - t0)
            return self.outputs.get(variant)


def gate_key(variant: ResolvedVariant) -> str:
    """The correctness table's file key of a variant's gate answers (one per variant identity)."""
    return "gate-" + hashlib.sha256(json.dumps(variant.identity(), sort_keys=True, default=str).encode()
                                    ).hexdigest()[:16]


def gate_filler(spec: ExperimentSpec) -> int:
    """Filler requests around the gate's concurrent pass: the experiment's highest offered concurrency (closed-loop
    value, or an open loop's max_concurrency) less the gate prompts, never below 0."""
    from cluster.kernel.gate import GATE_PROMPTS
    from cluster.plan.runs import load_points

    peak = 0
    for lp in load_points(spec):
        peak = max(peak, lp.shape.in_flight_bound(lp) or 0)
    return max(0, peak - len(GATE_PROMPTS))


Segment = tuple[ResolvedVariant, list[RunPlan]]


class GateStage:
    """One experiment's gates: the board every segment thread shares, and the baseline they compare with."""

    def __init__(self, spec: ExperimentSpec, store: DatasetStore, log: Callable[[str], None]) -> None:
        self.spec = spec
        self.store = store
        self.log = log
        self.board = GateBoard()
        self.baseline_name: Optional[str] = None

    def baseline_answers(self, variants: list[ResolvedVariant], segments: list[Segment]) -> list[Segment]:
        """Make sure no gate waits on baseline answers that cannot come: on resume the baseline's stored answers
        (correctness table) are put on the board; without any, a baseline that runs now runs first, and one that
        does not run means no answers (and no wait)."""
        from cluster.loadgen.gate import answers_from_correctness_rows

        base = next((v for v in variants if v.is_baseline), None)
        if base is None or not self.spec.correctness.enabled:
            return segments
        stored = self.store.read_variant_table("correctness", base.name, gate_key(base))
        if stored is not None and stored.num_rows:
            self.board.put(base.name, answers_from_correctness_rows(stored))
            self.log(f"[{base.name}] gate: using the baseline's {stored.num_rows} stored gate answers")
            return segments
        first = next((i for i, (v, _) in enumerate(segments) if v.name == base.name), None)
        if first is None:
            if segments:
                self.log(f"[{base.name}] gate: the baseline runs nothing now and has no stored gate answers; "
                         "other variants' gates make no prefix comparison")
            self.board.put(base.name, None)
            return segments
        if first:
            self.log(f"[{base.name}] gate: no stored baseline answers; the baseline's remaining segment runs first")
            return [segments[first]] + segments[:first] + segments[first + 1:]
        return segments

    def wait_baseline_placed(self, variant: ResolvedVariant) -> None:
        """Before a variant asks for GPUs: the baseline holds its own, or will never need them (see GateBoard)."""
        baseline = self.baseline_name
        if baseline is None or variant.name == baseline or not self.spec.correctness.enabled:
            return  # no gate of this variant waits on a baseline's answers
        t0 = time.monotonic()
        while not self.board.wait_placed(baseline, PLACEMENT_PROGRESS_S):
            self.log(f"[{variant.name}] waiting {time.monotonic() - t0:.0f} s for the baseline {baseline!r} to "
                     "get its GPUs first (every gate compares with its answers)")

    def placed(self, variant: ResolvedVariant) -> None:
        """The variant holds its GPUs (what the others wait for when it is the baseline)."""
        if variant.name == self.baseline_name:
            self.board.placed()

    def run(self, variant: ResolvedVariant, load: LoadHandle, server: ServerFacts) -> GateVerdict:
        """Ask the fixed gate prompts greedily; judge against the baseline's answers; store the evidence."""
        from cluster.analysis.correctness import correctness_rows, evaluate_gate

        model_name = self.spec.model.served_name or self.spec.model.path
        try:
            answers = load.run_gate(server.base_url, model_name, self.spec.request_timeout_s, gate_filler(self.spec),
                                    self.spec.correctness.max_new_tokens)
        except (RayActorError, RayTaskError) as e:
            answers = GateAnswers.failed(error_text(e)[0])
        self.board.put(variant.name, answers)
        base = None
        if self.baseline_name and self.baseline_name != variant.name:
            baseline = self.baseline_name
            base = self.board.wait(baseline, self.spec.health_timeout_s + 600, lambda waited_s: self.log(
                f"[{variant.name}] gate waiting {waited_s:.0f} s for the gate answers of the baseline {baseline!r} "
                "(its server is starting or answering the gate prompts)"))
        is_nextn = variant.speculative is not None and variant.speculative.uses_builtin_mtp_head
        result = evaluate_gate(answers.outputs, base.outputs if base is not None else None, answers.accept_length,
                               is_nextn, min_prefix_tokens=self.spec.correctness.min_prefix_tokens,
                               check_answers=self.spec.correctness.check_answers)
        reasons = list(result.reasons)
        under_load = answers.loaded_problems()
        reasons.extend(under_load)
        if base is None and self.baseline_name and self.baseline_name != variant.name:
            reasons.append("note: the baseline gave no gate answers, so no prefix comparison was made")
        elif base is not None and base.stored:
            reasons.append("note: prefix compared with the baseline's gate answers stored in the dataset")
        passed = result.passed and not under_load
        table = correctness_rows(self.spec.name, variant.name, variant.engine, result, answers.outputs,
                                 (passed, reasons), answers.loaded, answers.filler)
        self.store.write_variant_table("correctness", variant.name, gate_key(variant), table)
        return GateVerdict(passed, tuple(reasons), result.accept_length)
