"""The measured depth schedule written as SGLang's adaptive config: `results recommend --write-adaptive FILE`, and
the config an adaptive variant names by experiment (`speculative: {adaptive: {experiment: ...}}`), written before
its server is started; a variant's own config file is read here as SGLang would read it."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from cluster.analysis.adaptive_vs_fixed import schedule_points
from cluster.analysis.recommend import Recommendations
from cluster.config.experiment import ExperimentSpec
from cluster.dataset.atomic import atomic_write
from cluster.engines.sglang_adaptive import buckets_from_schedule, config_json, parse_config
from cluster.errors import PreflightError, UserError
from cluster.input_files import parse_json, read_input_text


def schedule_config_text(rec: Recommendations, workload: Optional[str]) -> tuple[str, list[str]]:
    """(config text, notes): the schedule's concurrency points as batch-size buckets (one candidate depth each)."""
    wl, points, notes = schedule_points(rec, workload)
    text = config_json(buckets_from_schedule(points))
    shown = ", ".join(f"c{c} -> depth {d}" for c, d in sorted(points))
    return text, [f"adaptive config for workload {wl!r} from the depth schedule {shown}: running batch of b uses the "
                  "depth measured at the highest concurrency <= b (the lowest bucket starts at 1)"] + notes


def write_schedule_config(rec: Recommendations, workload: Optional[str], path: str) -> list[str]:
    """Write the schedule as SGLang's adaptive config at `path`; the lines that say what was written."""
    text, notes = schedule_config_text(rec, workload)
    atomic_write(path, text.encode())
    return [f"wrote {path}"] + notes


def check_config_file(path: str, field: str) -> list[str]:
    """A variant's own adaptive config, read and checked by SGLang's reading rules (PreflightError naming file and
    field); the bucket lines it holds."""
    try:
        buckets = parse_config(parse_json(read_input_text(path, PreflightError, "adaptive config", field=field),
                                          path, PreflightError, "adaptive config", field=field))
    except ValueError as e:
        if isinstance(e, UserError):
            raise
        raise PreflightError(f"{path}: {e}", file=path, field=field,
                             expected='{"<batch size>": {"candidate_steps": [depth, ...]}, ...}') from None
    return [f"{path}: " + ", ".join(f"batch >= {b.min_batch}: steps {list(b.candidate_steps)}" for b in buckets)]


def prepare_adaptive_configs(spec: ExperimentSpec, base_dir: Path) -> list[str]:
    """Before any server: each adaptive variant's config exists and reads as SGLang reads it; one named by an earlier
    experiment is written from that experiment's `results recommend` schedule. Lines saying what was used."""
    from cluster.analysis.recommend import recommend_results
    from cluster.analysis.results import Results

    out: list[str] = []
    for i, v in enumerate(spec.variants):
        sp = v.speculative
        if sp is None or sp.adaptive is None:
            continue
        a, field = sp.adaptive, f"variants.{i}.speculative.adaptive"
        path = str(base_dir / a.config_path(spec.output))
        if a.experiment is not None:
            root = str(base_dir / (a.root or spec.output))
            try:
                rec = recommend_results(Results.open(root, a.experiment))
                text, notes = schedule_config_text(rec, a.workload)
            except UserError as e:
                raise PreflightError(f"{field}.experiment: {a.experiment!r} under {root}: {e}", field=f"{field}.experiment",
                                     expected="an earlier experiment with a NEXTN depth schedule") from None
            atomic_write(path, text.encode())
            out += [f"{v.name}: wrote {path} from experiment {a.experiment!r}"] + [f"{v.name}: {n}" for n in notes]
        out += [f"{v.name}: " + line for line in check_config_file(path, f"{field}.file" if a.file else field)]
    return out
