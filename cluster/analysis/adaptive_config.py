"""The measured depth schedule written as SGLang's adaptive config: `results recommend --write-adaptive FILE`, and
the config an adaptive variant names by experiment (`speculative: {adaptive: {experiment: ...}}`), derived and
checked in memory at validate/plan and written by `run` alone, before any server; a variant's own config file is read
here as SGLang would read it."""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator, Optional, Sequence

from cluster.analysis.adaptive_vs_fixed import schedule_points
from cluster.analysis.recommend import Recommendations
from cluster.config.experiment import ExperimentSpec
from cluster.dataset.atomic import atomic_write
from cluster.engines.sglang_adaptive import buckets_from_schedule, config_json, parse_config
from cluster.errors import PreflightError, UserError
from cluster.input_files import parse_json, read_input_text
from cluster.kernel.runs import ResolvedVariant


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


def check_config_text(text: str, path: str, field: str) -> list[str]:
    """An adaptive config's text, checked by SGLang's reading rules (PreflightError naming file and field); the
    bucket lines it holds."""
    try:
        buckets = parse_config(parse_json(text, path, PreflightError, "adaptive config", field=field))
    except ValueError as e:
        if isinstance(e, UserError):
            raise
        raise PreflightError(f"{path}: {e}", file=path, field=field,
                             expected='{"<batch size>": {"candidate_steps": [depth, ...]}, ...}') from None
    return [f"{path}: " + ", ".join(f"batch >= {b.min_batch}: steps {list(b.candidate_steps)}" for b in buckets)]


def check_config_file(path: str, field: str) -> list[str]:
    """A variant's own adaptive config, read and checked by SGLang's reading rules; the bucket lines it holds."""
    return check_config_text(read_input_text(path, PreflightError, "adaptive config", field=field), path, field)


@dataclass(frozen=True)
class AdaptiveConfig:
    """One adaptive variant's config as its server reads it."""

    variant: str
    """The spec variant (its depth-expanded variants share the config)."""
    field: str
    path: str
    """Absolute: where SGLang reads it (`run` writes a derived one there)."""
    text: Optional[str]
    """Derived from an earlier experiment's depth schedule; None: the variant's own file, read as it is."""
    notes: tuple[str, ...]


def adaptive_configs(spec: ExperimentSpec, output_root: str, base_dir: Path) -> list[AdaptiveConfig]:
    """Each adaptive variant's config, derived (from an earlier experiment's `results recommend` schedule under
    `root`, else under `output_root`, the root the run uses) or read, and checked as SGLang reads it; nothing is
    written. PreflightError naming the field."""
    from cluster.analysis.recommend import recommend_results
    from cluster.analysis.results import Results

    out: list[AdaptiveConfig] = []
    for i, v in enumerate(spec.variants):
        sp = v.speculative
        if sp is None or sp.adaptive is None:
            continue
        a, field = sp.adaptive, f"variants.{i}.speculative.adaptive"
        if a.experiment is not None and a.root is None and "://" in output_root:
            raise PreflightError(f"{field}: the output root {output_root} is not a local path, and SGLang reads the "
                                 "adaptive config from a local file", field=f"{field}.root",
                                 expected="root: a local results root that holds the earlier experiment")
        path = a.launch_path(output_root, base_dir)
        if a.experiment is None:
            out.append(AdaptiveConfig(v.name, field, path, None, tuple(check_config_file(path, f"{field}.file"))))
            continue
        root = str(Path(path).parent.parent)
        try:
            text, notes = schedule_config_text(recommend_results(Results.open(root, a.experiment)), a.workload)
        except UserError as e:
            raise PreflightError(f"{field}.experiment: {a.experiment!r} under {root}: {e}", field=f"{field}.experiment",
                                 expected="an earlier experiment with a NEXTN depth schedule") from None
        notes = [f"from experiment {a.experiment!r}"] + notes + check_config_text(text, path, field)
        out.append(AdaptiveConfig(v.name, field, path, text, tuple(notes)))
    return out


def write_adaptive_configs(configs: Sequence[AdaptiveConfig]) -> list[str]:
    """`run`, before any server: each derived config written atomically where SGLang reads it. A file already there
    with other content is refused, not replaced: the variant's run key names the config's path, not its content,
    so replacing it would put runs of two different schedules under one key (resumed runs would be skipped as done
    with the old schedule)."""
    out: list[str] = []
    for c in configs:
        if c.text is None:
            continue
        p = Path(c.path)
        try:
            old = p.read_text(encoding="utf-8") if p.exists() else None
        except (OSError, UnicodeDecodeError) as e:
            raise PreflightError(f"{c.path}: {c.field}: cannot read the adaptive config already there: {e}",
                                 file=c.path, field=c.field, expected="a readable file or none") from None
        if old is not None and old != c.text:
            raise PreflightError(
                f"{c.path}: {c.field}: an adaptive config is already there with another content than the one "
                f"derived now ({c.text.strip()}); the runs already recorded with it "
                "keep their run keys, so it is not replaced: remove the file to serve the new schedule (and rerun "
                "the adaptive variant under a new experiment name), or name it as `file:` to keep it",
                file=c.path, field=c.field, expected="no file there, or the same config")
        if old is None:
            atomic_write(c.path, c.text.encode())
            out.append(f"{c.variant}: wrote {c.path}")
        else:
            out.append(f"{c.variant}: {c.path} already holds this config")
    return out


@contextlib.contextmanager
def checkable(variants: Sequence[ResolvedVariant], configs: Sequence[AdaptiveConfig]) -> Iterator[list[ResolvedVariant]]:
    """validate/plan: the variants with each derived config in a temp file (removed after), so the flag checks that
    read the file (the simulator's, SGLang's own pipeline) read it without anything written under a result root."""
    derived = {c.variant: c for c in configs if c.text is not None}
    if not derived:
        yield list(variants)
        return
    with tempfile.TemporaryDirectory(prefix="sglbench-adaptive-") as tmp:
        paths: dict[str, str] = {}
        for name, c in derived.items():
            paths[name] = str(Path(tmp) / f"{name}.json")
            Path(paths[name]).write_text(c.text or "", encoding="utf-8")
        yield [replace(v, speculative=replace(v.speculative, adaptive_config=paths[v.family or v.name]))
               if v.speculative is not None and (v.family or v.name) in paths else v for v in variants]
