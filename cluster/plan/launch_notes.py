"""Per-release SGLang launch notes for Qwen3.5 NVFP4 on SM120, and the plan warning for a variant that lacks one.

The table is docs/launch-notes.md (tests/unit/plan/test_launch_notes.py keeps the two equal). Each row is a flag
the community needed on releases before `fixed_in`; where the first release that no longer needs it is not
confirmed, `fixed_in` is the release this tool was checked against (0.5.23), so any older image is warned.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from cluster.input_files import JsonObject
from cluster.plan.findings import FindingCollector
from cluster.plan.model_rules import SM120, ModelFacts
from cluster.kernel.runs import ResolvedVariant

Condition = Literal["sm120", "sm120_nvfp4_moe", "sm120_multi_gpu"]


@dataclass(frozen=True)
class LaunchNote:
    flag: str
    """Full flag name without dashes."""
    value: Optional[str]
    """The value the note needs (None: a bare boolean flag)."""
    fixed_in: tuple[int, int, int]
    """First release that no longer needs it (UNCONFIRMED ones: 0.5.23, the release checked here)."""
    confirmed: bool
    """Whether fixed_in is a confirmed boundary."""
    condition: Condition
    why: str
    source: str


LAUNCH_NOTES: tuple[LaunchNote, ...] = (
    LaunchNote(
        "attention-backend", "triton", (0, 5, 23), False, "sm120",
        "FlashInfer/FA attention kernels were not usable on SM120 in early Qwen3.5 builds; every working SM120 "
        "recipe pinned triton",
        "RTX6kPRO community recipes for Qwen3.5-397B-A17B-NVFP4, Feb 2026 (collected in "
        "github.com/AlexGS74/glm47-nvfp4-sm120 docs/qwen35-397b-nvfp4-recipes.md, recipes 5-7)"),
    LaunchNote(
        "disable-shared-experts-fusion", None, (0, 5, 23), False, "sm120_nvfp4_moe",
        "fusing the (BF16 or NVFP4) shared expert into the NVFP4 routed-expert kernel failed on SM120 builds; 0.5.23 "
        "disables the fusion itself only for some runners (arg_groups/overrides.py _moe_runner_fusion_disable: "
        "cutedsl, trtllm, not flashinfer_cutlass)",
        "sglbench issue 15 item 9 (community reports); 0.5.23 source as cited"),
    LaunchNote(
        "disable-custom-all-reduce", None, (0, 5, 23), False, "sm120_multi_gpu",
        "SGLang's custom all-reduce on PCIe-only SM120 nodes (no NVLink) hung or ran slower than NCCL on earlier "
        "releases",
        "sglbench issue 15 item 9 (community reports)"),
)


def _has(args: JsonObject, note: LaunchNote) -> bool:
    got = args.get(note.flag)
    if note.value is None:
        return got is True or (isinstance(got, str) and got.lower() in ("true", "1"))
    return isinstance(got, str) and got.strip().lower() == note.value


def _applies(note: LaunchNote, v: ResolvedVariant, facts: ModelFacts, gpu_sm: Optional[int]) -> bool:
    if gpu_sm is not None and gpu_sm != SM120:
        return False
    if note.condition == "sm120_nvfp4_moe":
        return facts.nvfp4 is not False and facts.moe is not False
    if note.condition == "sm120_multi_gpu":
        return v.tp > 1
    return True


def launch_note_rules(chk: FindingCollector, v: ResolvedVariant, args: JsonObject, facts: ModelFacts,
                      gpu_sm: Optional[int], version: Optional[str]) -> None:
    """A warning for each note the variant's release needs and its args lack (SGLang variants only)."""
    from cluster.engines.sglang import parse_version

    ver = parse_version(version)
    for note in LAUNCH_NOTES:
        if ver >= note.fixed_in or _has(args, note) or not _applies(note, v, facts, gpu_sm):
            continue
        want = f"--{note.flag}" + (f" {note.value}" if note.value else "")
        node = "" if gpu_sm == SM120 else " if the node is SM120"
        bound = "" if note.confirmed else " (first release without the need unconfirmed)"
        chk.add(v, "warning", "launch-notes",
                f"SGLang {version} needs {want}{node} and the variant lacks it: {note.why}; needed before "
                f"{'.'.join(map(str, note.fixed_in))}{bound}; source: {note.source} (docs/launch-notes.md)")
