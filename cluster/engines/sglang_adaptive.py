"""SGLang 0.5.23's adaptive speculation config (`--speculative-adaptive-config`): written from a depth schedule, read
by the simulator, and the /server_info check that adaptive is really on.

The format (sglang/srt/speculative/adaptive_spec_params.py `_load_adaptive_config`, lines 103-139): a JSON object
whose integer-string keys are running-batch-size buckets, each `{"candidate_steps": [non-negative ints], ...}`
(optional per-bucket knobs ema_alpha, update_interval, warmup_batches, up/down_hysteresis, ceiling_coeff; keys that
are not digits are top-level defaults). A batch of b running requests is served by the bucket with the largest key
<= b, the smallest bucket below it (`_find_closest_bs`, line 356), after padding b to a CUDA-graph batch size when
graphs are on (`_pad_to_cuda_graph_bs`). A slot starts at --speculative-num-steps when that is one of its candidates,
else at its middle candidate (`AdaptiveStepSlot.__init__`, line 178); step 0 is no speculation.
"""

from __future__ import annotations

import bisect
import json
from pathlib import Path
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from cluster.input_files import JsonValue

ADAPTIVE_FLAG = "speculative-adaptive"
CONFIG_FLAG = "speculative-adaptive-config"
SERVER_INFO_KEY = "speculative_adaptive"
"""The resolved arg /server_info reports (False where `_maybe_disable_adaptive` turned the flag off)."""


@dataclass(frozen=True)
class AdaptiveBucket:
    """One batch-size bucket: batches of at least `min_batch` running requests (up to the next bucket) draft with
    one of `candidate_steps`."""

    min_batch: int
    candidate_steps: tuple[int, ...]


def buckets_from_schedule(points: Sequence[tuple[int, int]]) -> list[AdaptiveBucket]:
    """(concurrency, depth) per measured load point -> buckets: each point's concurrency is a bucket's lower bound,
    the smallest lowered to 1 so a batch below every measured load takes the lowest load's depth. The running batch
    of a closed loop at concurrency c is at most c, so a batch of b is served the depth measured at the highest
    concurrency <= b."""
    pts = sorted(points)
    if not pts:
        raise ValueError("no load point with a decided depth")
    out: list[AdaptiveBucket] = []
    for i, (conc, depth) in enumerate(pts):
        if conc < 1 or depth < 0:
            raise ValueError(f"concurrency {conc} and depth {depth}: expected concurrency >= 1 and depth >= 0")
        if out and out[-1].min_batch == conc:
            raise ValueError(f"two depths for concurrency {conc}")
        out.append(AdaptiveBucket(1 if i == 0 else conc, (depth,)))
    return out


def config_json(buckets: Sequence[AdaptiveBucket]) -> str:
    """The buckets as SGLang's adaptive config file text (keys ascending)."""
    lines = [f'  {json.dumps(str(b.min_batch))}: {json.dumps({"candidate_steps": list(b.candidate_steps)})}'
             for b in buckets]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def parse_config(doc: JsonValue) -> list[AdaptiveBucket]:
    """The buckets of a decoded config, by SGLang's own acceptance rule (ValueError with SGLang's wording where it
    would refuse the file): digit keys only, each a non-empty list of non-negative ints."""
    if not isinstance(doc, Mapping):
        raise ValueError(f"the config is a JSON {type(doc).__name__}, not an object")
    out: list[AdaptiveBucket] = []
    for key, entry in doc.items():
        if not key.isdigit():
            continue
        steps = entry.get("candidate_steps") if isinstance(entry, Mapping) else None
        if (not isinstance(steps, list) or not steps
                or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in steps)):
            raise ValueError(f"BS {key}: candidate_steps must be a list of non-negative ints, got {steps!r}")
        out.append(AdaptiveBucket(int(key), tuple(sorted(set(steps)))))
    if not out:
        raise ValueError("speculative_adaptive_config must contain at least one integer-string BS key, e.g. "
                         '{"1": {"candidate_steps": [1,3,7]}}. ' f"Got keys: {list(doc.keys())}")
    return sorted(out, key=lambda b: b.min_batch)


def candidate_union(buckets: Sequence[AdaptiveBucket]) -> list[int]:
    """Every bucket's candidates (SGLang sizes its buffers for these and wants --speculative-num-steps among them)."""
    return sorted({s for b in buckets for s in b.candidate_steps})


def start_steps(bucket: AdaptiveBucket, initial_steps: int) -> int:
    """The depth a bucket's slot starts at: --speculative-num-steps when a candidate, else the middle candidate."""
    c = bucket.candidate_steps
    return initial_steps if initial_steps in c else c[len(c) // 2]


def bucket_for(buckets: Sequence[AdaptiveBucket], batch_size: int) -> AdaptiveBucket:
    """The bucket serving a running batch of `batch_size` (largest lower bound <= it, else the smallest)."""
    keys = [b.min_batch for b in buckets]
    return buckets[max(0, bisect.bisect_right(keys, batch_size) - 1)]


def adaptive_not_on(resolved: Mapping[str, JsonValue]) -> Optional[str]:
    """Why a server asked for --speculative-adaptive is not running it, from its resolved /server_info args (None: on)."""
    value = resolved.get(SERVER_INFO_KEY)
    if value is True:
        return None
    if value is None:
        return (f"/server_info has no {SERVER_INFO_KEY}: the server cannot show that adaptive speculation is on "
                "(SGLang 0.5.23 reports it)")
    return (f"--speculative-adaptive was asked for but /server_info resolved {SERVER_INFO_KEY}={value!r}: SGLang "
            "turned it off (its log says why: 'speculative_adaptive disabled: ...'), so this ran static depth "
            f"{resolved.get('speculative_num_steps')!r}, not the adaptive schedule")


def config_missing(config_path: Optional[str], node: str) -> Optional[str]:
    """Why a server asked for --speculative-adaptive cannot read its config on `node` (None: the file is there)."""
    if config_path is None or Path(config_path).is_file():
        return None
    return (f"{config_path}: the adaptive config (--{CONFIG_FLAG}) is not a file on node {node}, where the server "
            "would read it: `run` writes it on the machine it runs on, so on a multi-node cluster the output root "
            "(or the adaptive `root`/`file`) must be on storage every node shares")
