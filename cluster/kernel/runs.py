"""The run's vocabulary: a resolved variant, a load point, a speculative configuration, a run plan, and the version
of the dataset's record schemas.

The kernel sits at the bottom of the package: below it are only `errors` and the user's declarations in `config`
(a resolved variant is made of declared values, a workload and a tuning choice, which have one definition there).
Every package that carries a run imports these names from here, so nothing below `plan` imports `plan`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from cluster.config.deployment import EndpointDeployment
from cluster.config.variants import ProfileSpec
from cluster.config.workload import WorkloadSpec
from cluster.config.tuning import ActiveTuning
from cluster.config.server import ArgValue
from cluster.config.engines import EngineName
from cluster.config.secrets import redact_args, redact_env
from cluster.config.sim_knobs import Knobs
from cluster.kernel.load_shapes import LoadPoint as LoadPoint  # a run's load point; defined with its shapes

RECORD_SCHEMA_VERSION = 1
"""Version of the dataset's record schemas (runs, requests, chunks, ...); part of every run key."""
BUILTIN_HEAD_ALGORITHMS = ("NEXTN", "MTP")
"""Always use the checkpoint's own MTP/NextN head; EAGLE does too when no draft_model_path is given."""


def uses_builtin_mtp_head(algorithm: str, draft_model_path: Optional[str]) -> bool:
    """Whether a speculative algorithm drafts with the checkpoint's own MTP/NextN head: NEXTN and MTP always, EAGLE
    when no draft model is given. The one answer for preflight (refuse a checkpoint without the head), the probe's
    list of algorithms a checkpoint runs alone, and the correctness gate's acceptance check."""
    return algorithm.upper() in BUILTIN_HEAD_ALGORITHMS or (algorithm.upper() == "EAGLE" and not draft_model_path)


SWEPT_ARGS = ("moe_runner_backend", "fp4_gemm_backend")
"""backend_sweep options, each named as the server arg it sets (the spec's own spelling of `args:` keys)."""


@dataclass(frozen=True)
class SpecDecode:
    """One concrete speculative configuration: always all three of steps, topk and draft tokens."""

    algorithm: str
    num_steps: int
    eagle_topk: int
    num_draft_tokens: int
    draft_model_path: Optional[str] = None
    adaptive_config: Optional[str] = None
    """SGLang's adaptive speculation with this config file (--speculative-adaptive); num_steps is the start depth."""

    @property
    def uses_builtin_mtp_head(self) -> bool:
        """Drafts with the checkpoint's own MTP/NextN head (see `uses_builtin_mtp_head`)."""
        return uses_builtin_mtp_head(self.algorithm, self.draft_model_path)


@dataclass(frozen=True)
class ResolvedVariant:
    """A variant after expansion: what one server launch is made of."""

    name: str
    engine: EngineName
    tp: int
    model_path: str
    args: dict[str, ArgValue]
    env: dict[str, str]
    speculative: Optional[SpecDecode] = None
    tuning: Optional[ActiveTuning] = None
    sim: Knobs = field(default_factory=Knobs)
    """Simulator knobs (the experiment's `sim:` with the variant's own over it); used by the sim engine only."""
    is_baseline: bool = False
    family: str = ""
    """The spec variant this was expanded from (e.g. `nextn` for `nextn-2`)."""
    profile: Optional[ProfileSpec] = None
    """A kernel profile after the measured windows: not what the runs measure, so not in identity()."""
    endpoint: Optional[EndpointDeployment] = None
    """An endpoint already running that serves this variant: nothing is launched (no argv, no GPU reserved)."""

    @property
    def launched(self) -> bool:
        """Whether sglbench launches this variant's server (False for an endpoint already running)."""
        return self.endpoint is None

    @property
    def gpus(self) -> int:
        """GPUs all of this variant's server processes hold (0 for an endpoint already running)."""
        return self.tp if self.launched else 0

    # free-form JSON stored as given: the variant as declared (args, env, knobs), hashed into the run key and kept
    # in experiment.json
    def identity(self) -> dict[str, Any]:
        """What defines this variant as declared (the part of the run key that belongs to the variant)."""
        d = asdict(self)
        # secrets enter the key as their fingerprints (cluster/config/secrets.py), so experiment.json holds all of it
        d["env"], d["args"] = redact_env(self.env), redact_args(self.args)
        # options and knobs as declared (defaults left out), so adding a default to a model keeps every run key
        d["tuning"] = {"kind": self.tuning.kind, "options": self.tuning.options.model_dump(
            mode="json", exclude_unset=True, by_alias=True)} if self.tuning else None
        d["sim"] = self.sim.wire()
        if d["speculative"] is not None and d["speculative"]["adaptive_config"] is None:
            del d["speculative"]["adaptive_config"]  # a fixed depth keeps the run key it had before adaptive existed
        d.pop("profile")
        if self.endpoint is None:
            del d["endpoint"]  # a launched variant keeps the run key it had before endpoints existed
        else:  # the key's variable name is declared, its value never (it is read at run time)
            d["endpoint"] = self.endpoint.model_dump(mode="json")
        return d


@dataclass(frozen=True)
class RunPlan:
    experiment: str
    variant: ResolvedVariant
    workload: WorkloadSpec
    load: LoadPoint
    repeat: int
    seed: int
    run_key: str
    order_index: int = 0
