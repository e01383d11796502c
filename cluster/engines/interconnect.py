"""Interconnect provenance of a GPU node: nvidia-smi topology and P2P matrices, PCIe links, NCCL/CUDA env, IOMMU.

Why (issue 15 item 8): on PCIe-only 8-GPU SM120 nodes, enabling P2P moved throughput 15-42 % and one GPU on a x4
link bottlenecked every all-reduce, so two runs on "the same" node can differ by the node's wiring. Collected where
nvidia-smi exists; elsewhere recorded as unavailable with the reason, never guessed. Parsers take the text that
`nvidia-smi topo -m`, `nvidia-smi topo -p2p r` and the `--query-gpu` CSV print, so they are tested on hand-written
outputs.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence

from cluster.input_files import JsonValue

PCIE_FIELDS = ("index", "pci.bus_id", "pcie.link.gen.current", "pcie.link.gen.max", "pcie.link.width.current",
               "pcie.link.width.max", "compute_cap")
"""`nvidia-smi --query-gpu=` fields read per GPU (`--format=csv,noheader,nounits`)."""

ENV_PREFIXES = ("NCCL_", "CUDA_")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_IOMMU_CMDLINE = re.compile(r"^(iommu|intel_iommu|amd_iommu)(=.*)?$")

Runner = Callable[[Sequence[str]], Optional[str]]


def _run(argv: Sequence[str], timeout_s: float = 20.0) -> Optional[str]:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


@dataclass(frozen=True)
class PcieLink:
    index: int
    bus_id: Optional[str]
    gen_current: Optional[int]
    gen_max: Optional[int]
    width_current: Optional[int]
    width_max: Optional[int]
    compute_cap: Optional[str]
    """e.g. "12.0" for SM120."""

    @property
    def below_max_width(self) -> bool:
        return self.width_current is not None and self.width_max is not None and self.width_current < self.width_max


@dataclass(frozen=True)
class Interconnect:
    """One node's interconnect facts; `available` False (with `reason`) where nvidia-smi cannot be run."""

    available: bool
    reason: Optional[str] = None
    topology_text: Optional[str] = None
    topology: dict[str, dict[str, str]] = field(default_factory=dict)
    """`nvidia-smi topo -m`: row device → column device → link (X, NV#, PIX, PXB, PHB, NODE, SYS)."""
    p2p_read: dict[str, dict[str, str]] = field(default_factory=dict)
    """`nvidia-smi topo -p2p r`: GPU → GPU → OK / NS / CNS / GNS / TNS / NS (P2P read status)."""
    links: tuple[PcieLink, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    """NCCL_* and CUDA_* variables of the process that collected it (the server inherits them)."""
    iommu_cmdline: tuple[str, ...] = ()
    """iommu=/intel_iommu=/amd_iommu= words of /proc/cmdline (e.g. iommu=pt: passthrough)."""
    iommu_devices: Optional[int] = None
    """Entries of /sys/class/iommu (0: no IOMMU active; None: not readable)."""

    def to_json(self) -> dict[str, JsonValue]:
        return asdict(self)

    def width_warnings(self) -> list[str]:
        """One line per GPU whose PCIe link runs narrower than it can (a x4 link bottlenecks every all-reduce)."""
        return [f"GPU {g.index} ({g.bus_id}) runs its PCIe link at x{g.width_current}, below its maximum "
                f"x{g.width_max}: every all-reduce through it is bottlenecked (check the slot/riser)"
                for g in self.links if g.below_max_width]

    def compute_sm(self) -> Optional[int]:
        """The node's compute capability ×10 (120 for SM120) when every GPU agrees, else None."""
        caps = {g.compute_cap for g in self.links if g.compute_cap}
        if len(caps) != 1:
            return None
        major, _, minor = next(iter(caps)).partition(".")
        return int(major) * 10 + int(minor or 0) if major.isdigit() and (minor or "0").isdigit() else None


def parse_matrix(text: str) -> dict[str, dict[str, str]]:
    """A tab-separated nvidia-smi matrix (`topo -m`, `topo -p2p r`): rows and columns by device name, up to the
    legend; non-device columns (CPU/NUMA affinity) are dropped."""
    lines = [_ANSI.sub("", ln).rstrip("\n") for ln in text.splitlines()]
    header: Optional[list[str]] = None
    out: dict[str, dict[str, str]] = {}
    for line in lines:
        if not line.strip():
            if header is not None and out:
                break
            continue
        if line.strip().startswith("Legend"):
            break
        cells = [c.strip() for c in line.split("\t")]
        if header is None:
            header = [c for c in cells if c]
            continue
        label, rest = cells[0], cells[1:]
        if not label:
            label, rest = rest[0], rest[1:]
        devices = [h for h in header if re.match(r"^(GPU|NIC|mlx)\w*$", h)]
        out[label] = {dev: val for dev, val in zip(devices, rest)}
    return out


def _int_or_none(s: str) -> Optional[int]:
    s = s.strip()
    return int(s) if s.isdigit() else None


def parse_pcie_csv(text: str) -> tuple[PcieLink, ...]:
    """The `--query-gpu=<PCIE_FIELDS> --format=csv,noheader,nounits` lines; [N/A] reads as None."""
    out: list[PcieLink] = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(PCIE_FIELDS) or not cells[0].isdigit():
            continue
        out.append(PcieLink(index=int(cells[0]), bus_id=cells[1] or None, gen_current=_int_or_none(cells[2]),
                            gen_max=_int_or_none(cells[3]), width_current=_int_or_none(cells[4]),
                            width_max=_int_or_none(cells[5]),
                            compute_cap=cells[6] if re.match(r"^\d+\.\d+$", cells[6]) else None))
    return tuple(out)


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _iommu_devices(sys_dir: str) -> Optional[int]:
    try:
        return len(os.listdir(sys_dir))
    except OSError:
        return None


def collect_interconnect(run: Runner = _run, environ: Mapping[str, str] = os.environ,
                         read: Callable[[str], Optional[str]] = _read,
                         iommu_dir: str = "/sys/class/iommu") -> Interconnect:
    """The node's interconnect facts (never raises). Without a working nvidia-smi: available=False, the reason,
    and only what needs no GPU (env, IOMMU)."""
    from cluster.config.secrets import redact_env

    env = redact_env({k: v for k, v in environ.items() if k.startswith(ENV_PREFIXES)})
    cmdline = tuple(w for w in (read("/proc/cmdline") or "").split() if _IOMMU_CMDLINE.match(w))
    common: dict[str, Any] = {"env": dict(sorted(env.items())), "iommu_cmdline": cmdline,
                              "iommu_devices": _iommu_devices(iommu_dir)}
    csv = run(["nvidia-smi", f"--query-gpu={','.join(PCIE_FIELDS)}", "--format=csv,noheader,nounits"])
    if csv is None:
        return Interconnect(available=False, reason="nvidia-smi is absent or failed on this node", **common)
    links = parse_pcie_csv(csv)
    if not links:
        return Interconnect(available=False, reason="nvidia-smi listed no GPU", **common)
    topo = run(["nvidia-smi", "topo", "-m"]) or ""
    p2p = run(["nvidia-smi", "topo", "-p2p", "r"]) or ""
    return Interconnect(available=True, topology_text=topo or None, topology=parse_matrix(topo) if topo else {},
                        p2p_read=parse_matrix(p2p) if p2p else {}, links=links, **common)
