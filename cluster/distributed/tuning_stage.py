"""The tuning stage on Ray: produce (or reuse) each tuned variant's artifact before its server segments run, carrying
out the jobs cluster/tuning/jobs.py decides (it asks each engine adapter what differs per engine).

flashinfer_autotune: one EngineActor launch with autotuning on into a staging SGLANG_CACHE_DIR, warmed with the
workload's prompt shapes, stopped; its per-rank cache JSONs are archived. triton_moe: one Ray task per GPU of one
node (a STRICT_PACK placement group of 1-GPU bundles), batch sizes split among them, results merged into SGLang's
config file. Both are stored content-hashed under `<dataset root>/_artifacts/` and reused when the key matches.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Callable, Optional

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from cluster.engines.registry import get_engine, get_tuning_surface
from cluster.engines import sglang_tuning as sgt
from cluster.engines.base import Prompt, StreamRequest
from cluster.errors import EnvironmentFault
from cluster.input_files import JsonValue
from cluster.kernel.runs import ResolvedVariant
from cluster.config.experiment import ExperimentSpec
from cluster.config.engines import EngineName
from cluster.tuning.jobs import AutotuneJob, MoeSearchJob, RefusedJob, decide_tuning
from cluster.tuning.stage import merge_moe_configs
from cluster.engines.tuning_contract import GpuFacts, TuningError
from cluster.tuning.artifacts import ArtifactStore, TuningArtifact
from cluster.tuning.moe_search import MoeShapeFields, WorkerSearch, tune_batch_sizes

STAGE_STATS: dict[str, int] = {"triton_tasks": 0, "autotune_launches": 0}
"""Counters of real tuning work done by this process (tests assert that a reuse launched nothing)."""
PG_TIMEOUT_S = 600.0
WARMUP_OUTPUT_TOKENS = 16


class TuningStageError(EnvironmentFault):
    """A tuning job failed (server did not start, no GPU, no files produced); `log_tail` holds evidence."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        super().__init__(message)
        self.log_tail = log_tail


# ------------------------------------------------------------------------------------------- GPU facts
def probe_gpu_facts(python: Optional[str]) -> GpuFacts:
    """Ray-free: GPU name, driver, compute capability (nvidia-smi) and SGLang/FlashInfer/Triton/torch versions of
    the engine's interpreter. Missing tools give empty strings, never an exception."""
    name, drv, cap, count = "", "", "", 0
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=False).stdout.strip().splitlines()
        if out:
            name, drv, cap = (x.strip() for x in (out[0].split(",") + ["", "", ""])[:3])
            count = len(out)
    except (OSError, subprocess.SubprocessError):
        pass
    code = ("import importlib.metadata as m, json\nout = {}\n"
            "for k, d in (('sglang','sglang'),('flashinfer','flashinfer-python'),('triton','triton'),('torch','torch')):\n"
            "    try: out[k] = m.version(d)\n    except Exception: out[k] = ''\nprint(json.dumps(out))")
    try:
        done = subprocess.run([python or "python3", "-c", code], capture_output=True, text=True, timeout=60,
                              check=False)
        vers = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {}
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        vers = {}
    return GpuFacts(gpu_name=name, compute_capability=cap, driver_version=drv, gpu_count=count,
                    sglang_version=str(vers.get("sglang", "")), flashinfer_version=str(vers.get("flashinfer", "")),
                    triton_version=str(vers.get("triton", "")), torch_version=str(vers.get("torch", "")))


def facts_for(spec: ExperimentSpec, declared: Optional[GpuFacts], engine: EngineName, given: Optional[GpuFacts],
              cache: dict[str, GpuFacts]) -> GpuFacts:
    """The GPU the engine declares (the simulator's); otherwise `given`, else probed once per engine on a GPU node."""
    if declared is not None:
        return declared
    if given is not None:
        return given
    if engine not in cache:
        launcher = spec.engines.get(engine)
        task = ray.remote(num_gpus=1, num_cpus=0, max_retries=0)(probe_gpu_facts)
        facts: GpuFacts = ray.get(task.remote(launcher.python if launcher else None))
        cache[engine] = facts
    return cache[engine]


# ------------------------------------------------------------------------------------------- triton_moe
class _WorkerRun(WorkerSearch):
    """One worker's search and where it ran."""

    gpu_ids: list[str]
    cuda_visible_devices: str
    node_id: str


def _tune_worker(shape: MoeShapeFields, batch_sizes: list[int], mode: str, max_configs: Optional[int], seed: int,
                 sim_device: str, sim_triton: str) -> _WorkerRun:
    out = tune_batch_sizes(shape, batch_sizes, mode, max_configs, seed, sim_device, sim_triton)
    return {**out, "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
            "node_id": ray.get_runtime_context().get_node_id()}


_tune_task = ray.remote(num_cpus=0, max_retries=0)(_tune_worker)


def _triton_moe(spec: ExperimentSpec, job: MoeSearchJob, facts: GpuFacts, store: ArtifactStore,
                log: Callable[[str], None]) -> TuningArtifact:
    v, shape, dev = job.variant, job.shape, job.device
    key = job.key(facts)
    found = store.find(key)
    if found:
        log(f"[{v.name}] reusing triton_moe artifact {found.hash16} ({found.path})")
        return found
    chunks = job.worker_batches(spec.cluster.gpus_per_node, int(ray.cluster_resources().get("GPU", 0)))
    pg = placement_group([{"GPU": 1.0}] * len(chunks), strategy="STRICT_PACK", name=f"sglbench-tune-{v.name}")
    t0 = time.monotonic()
    try:
        ready, _ = ray.wait([pg.ready()], timeout=PG_TIMEOUT_S)
        if not ready:
            raise TuningStageError(f"[{v.name}] triton_moe: {len(chunks)} GPU(s) on one node not free within "
                                   f"{PG_TIMEOUT_S:.0f} s")
        refs = [_tune_task.options(num_gpus=1, scheduling_strategy=PlacementGroupSchedulingStrategy(
            pg, placement_group_bundle_index=i)).remote(shape.__dict__, chunk, dev.mode, job.max_configs, job.seed,
                                                         dev.device_name, dev.triton_version)
                for i, chunk in enumerate(chunks)]
        STAGE_STATS["triton_tasks"] += len(refs)
        parts = ray.get(refs)
    finally:
        remove_placement_group(pg)
    devices = {p["device_name"] for p in parts}
    if len(devices) != 1:
        raise TuningStageError(f"[{v.name}] triton_moe workers saw different GPUs {sorted(devices)}; a config file "
                               "is per device name")
    device = devices.pop()
    triton_ver = facts.triton_version or parts[0]["triton_version"]
    doc = merge_moe_configs([{bs: r["config"] for bs, r in p["results"].items()} for p in parts])
    rel = sgt.moe_config_relpath(triton_ver, shape.file_name(device))
    details: dict[str, JsonValue] = {
        "shape": shape.__dict__, "device_name": device, "mode": parts[0]["mode"],
        "worker_triton_version": parts[0]["triton_version"], "tuning_s": round(time.monotonic() - t0, 3),
        "workers": [{"gpu_ids": p["gpu_ids"], "node_id": p["node_id"], "batch_sizes": sorted(map(int, p["results"]))}
                    for p in parts],
        "time_us": {bs: r["time_us"] for p in parts for bs, r in p["results"].items()}}
    art = store.put("triton_moe", key, {rel: (json.dumps(doc, indent=4) + "\n").encode()}, v.name, details)
    log(f"[{v.name}] triton_moe tuned {len(job.batch_sizes)} batch sizes on {len(parts)} GPU(s) in "
        f"{details['tuning_s']:.1f} s → {rel} (artifact {art.hash16})")
    return art


# ------------------------------------------------------------------------------------------- flashinfer_autotune
def _warm(spec: ExperimentSpec, variant: ResolvedVariant, base_url: str, per_workload: int) -> int:
    """A few greedy requests per workload shape (input length as the workload's) through the engine's own body."""
    engine = get_engine(variant.engine)
    ok = 0
    model_name = spec.model.served_name or spec.model.path
    for w in spec.workloads:
        for i in range(per_workload):
            ids = tuple(100 + (j * 7 + i) % 1000 for j in range(w.input_tokens_nominal() or 128))
            req = engine.build_request(StreamRequest("native", Prompt(input_ids=ids), min(w.output_tokens_nominal() or WARMUP_OUTPUT_TOKENS, WARMUP_OUTPUT_TOKENS),
                                                     True, 0.0, model_name))
            http = urllib.request.Request(base_url + req.path, data=req.body, method="POST",
                                          headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(http, timeout=spec.request_timeout_s) as resp:
                    resp.read()
                    ok += int(resp.status == 200)
            except OSError:
                pass
    return ok


def _flashinfer_autotune(spec: ExperimentSpec, job: AutotuneJob, facts: GpuFacts, store: ArtifactStore,
                         log: Callable[[str], None], log_dir: str) -> TuningArtifact:
    from cluster.distributed.actors import EngineActor

    v = job.variant
    key = job.key(facts)
    found = store.find(key)
    if found:
        log(f"[{v.name}] reusing flashinfer_autotune artifact {found.hash16} ({found.path})")
        return found
    staging = store.staging_dir(v.name)
    tv = job.launch_variant(str(staging))
    pg = placement_group([{"GPU": float(v.tp)}], strategy="STRICT_PACK", name=f"sglbench-autotune-{v.name}")
    actor = None
    t0 = time.monotonic()
    try:
        ready, _ = ray.wait([pg.ready()], timeout=PG_TIMEOUT_S)
        if not ready:
            raise TuningStageError(f"[{v.name}] autotune: {v.tp} GPU(s) on one node not free in {PG_TIMEOUT_S:.0f} s")
        actor = EngineActor.options(num_gpus=v.tp, scheduling_strategy=PlacementGroupSchedulingStrategy(
            pg, placement_group_bundle_index=0)).remote(tv, spec.engines.get(v.engine), log_dir, "127.0.0.1", None)
        STAGE_STATS["autotune_launches"] += 1
        try:
            info = ray.get(actor.start.remote(spec.health_timeout_s))
        except Exception as e:  # noqa: BLE001 - reported with the server's log tail
            cause = getattr(e, "cause", e)
            raise TuningStageError(f"[{v.name}] autotune server failed to start: {cause}",
                                   getattr(cause, "log_tail", "")) from None
        warmed = _warm(spec, tv, info.base_url, job.warmup_requests)
        stopped = ray.get(actor.stop.remote(), timeout=120)
    finally:
        if actor is not None:
            ray.kill(actor)
        remove_placement_group(pg)
    root = staging / "flashinfer" / "autotune"
    files = {str(p.relative_to(staging)).replace(os.sep, "/"): p.read_bytes()
             for p in sorted(root.rglob("*.json")) if "runs" not in p.relative_to(root).parts} if root.is_dir() else {}
    shutil.rmtree(staging, ignore_errors=True)
    if not files:
        raise TuningStageError(f"[{v.name}] autotune produced no cache files under SGLANG_CACHE_DIR/flashinfer/"
                               "autotune (is autotuning applicable to this MoE/FP4 back end?)",
                               stopped.log_tail)
    details = {"tuning_s": round(time.monotonic() - t0, 3), "warmup_ok": warmed, "gpu_ids": info.gpu_ids,
               "node_id": info.node_id, "argv": info.argv, "env": info.env}
    art = store.put("flashinfer_autotune", key, files, v.name, details)
    log(f"[{v.name}] FlashInfer autotune archived {len(files)} cache file(s) in {details['tuning_s']:.1f} s "
        f"(artifact {art.hash16})")
    return art


# ------------------------------------------------------------------------------------------- the stage
def run_tuning_stage(spec: ExperimentSpec, variants: list[ResolvedVariant], dataset_root: str,
                     gpu_facts: Optional[GpuFacts] = None, log: Callable[[str], None] = print,
                     failures: Optional[dict[str, str]] = None) -> dict[str, TuningArtifact]:
    """{variant name: artifact} for every variant whose tuning kind makes one; reuses matching artifacts.

    Refusals raise TuningError before any GPU is reserved. A failing tuning job raises TuningStageError, or, when
    `failures` is given, is recorded there (variant → reason) and the variant is left out of the result.
    """
    decision = decide_tuning(variants, get_tuning_surface, spec.cluster.gpus_per_node)
    if not decision.jobs:
        return {}
    store = ArtifactStore(dataset_root)
    log_dir = str(Path(os.environ.get("SGLBENCH_LOG_DIR", "/tmp/sglbench-logs")) / spec.name / "tuning")
    facts_cache: dict[str, GpuFacts] = {}
    out: dict[str, TuningArtifact] = {}
    for job in decision.jobs:
        v = job.variant
        try:
            facts = facts_for(spec, job.declared_facts, v.engine, gpu_facts, facts_cache)
            if isinstance(job, RefusedJob):
                raise job.error
            if isinstance(job, MoeSearchJob):
                out[v.name] = _triton_moe(spec, job, facts, store, log)
            else:
                out[v.name] = _flashinfer_autotune(spec, job, facts, store, log, log_dir)
        except (TuningStageError, TuningError) as e:
            if failures is None:
                raise
            failures[v.name] = str(e)
            log(f"[{v.name}] tuning failed: {e}")
    return out
