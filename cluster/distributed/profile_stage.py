"""A variant's kernel profile after its measured windows: the server asked to trace a few forward steps, the trace
archive kept under `_artifacts/profiles/`, the top kernels in the `kernel_profile` table; never a failed run."""

from __future__ import annotations

from typing import Callable

from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from cluster.config.experiment import ExperimentSpec
from cluster.kernel.run_facts import ServerFacts
from cluster.dataset.store import DatasetStore
from cluster.distributed.gate_stage import gate_key
from cluster.distributed.handles import EngineHandle, LoadHandle
from cluster.distributed.run_records import error_text
from cluster.kernel.runs import ResolvedVariant, RunPlan
from cluster.kernel.window_job import WindowJob


def profile_variant(spec: ExperimentSpec, store: DatasetStore, log: Callable[[str], None], variant: ResolvedVariant,
                    engine: EngineHandle, load: LoadHandle, server: ServerFacts, first: RunPlan) -> None:
    """A kernel profile of `profile.steps` forward steps driven by `profile.requests` requests of the variant's
    first workload. A failed profile is logged."""
    from cluster.analysis.kernel_profile import kernel_profile_rows

    prof = variant.profile
    assert prof is not None
    model_name = spec.model.served_name or spec.model.path
    try:
        why_not = engine.profile_start(prof.steps)
        if why_not:
            log(f"[{variant.name}] no kernel profile: {why_not}")
            return
        load.prepare(WindowJob.of_run(first, server.base_url, model_name, spec.request_timeout_s), prof.requests,
                     timeout_s=spec.request_timeout_s)
        cap = engine.profile_collect(120.0, prof.max_archive_bytes)
    except (RayActorError, RayTaskError, GetTimeoutError) as e:
        log(f"[{variant.name}] kernel profile failed: {error_text(e)[0]}")
        return
    artifact = None
    if cap.archive is not None and cap.archive_sha256:
        artifact = store.write_artifact(f"profiles/{variant.name}-{cap.archive_sha256[:16]}.tar.gz", cap.archive)
    if cap.note:
        log(f"[{variant.name}] kernel profile: {cap.note}")
    if cap.summary is None or not cap.summary.top:
        return
    rows = kernel_profile_rows(spec.name, variant.engine, prof.steps, cap.summary, artifact)
    store.write_variant_table("kernel_profile", variant.name, "profile-" + gate_key(variant)[5:], rows)
    log(f"[{variant.name}] kernel profile of {prof.steps} steps: {len(cap.files)} trace file(s), top "
        f"{cap.summary.top[0].kernel} ({cap.summary.top[0].share:.0%}); archive {artifact or 'not kept'}")
