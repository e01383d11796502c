"""Issue 15 item 8: interconnect provenance parsed from hand-written nvidia-smi outputs; unavailable without it."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from cluster.engines.interconnect import collect_interconnect, parse_matrix, parse_pcie_csv

# shaped like `nvidia-smi topo -m` on a PCIe-only 4-GPU workstation (tabs between cells, a legend after a blank line)
TOPO = (
    "\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \tNODE\tSYS\tSYS\tPIX\t0-31,64-95\t0\t\tN/A\n"
    "GPU1\tNODE\t X \tSYS\tSYS\tNODE\t0-31,64-95\t0\t\tN/A\n"
    "GPU2\tSYS\tSYS\t X \tPHB\tSYS\t32-63,96-127\t1\t\tN/A\n"
    "GPU3\tSYS\tSYS\tPHB\t X \tSYS\t32-63,96-127\t1\t\tN/A\n"
    "NIC0\tPIX\tNODE\tSYS\tSYS\t X \t\t\t\t\n"
    "\n"
    "Legend:\n\n"
    "  X    = Self\n"
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)\n"
)
P2P = (
    " \tGPU0\tGPU1\tGPU2\tGPU3\t\n"
    " GPU0\tX\tOK\tCNS\tCNS\t\n"
    " GPU1\tOK\tX\tCNS\tCNS\t\n"
    " GPU2\tCNS\tCNS\tX\tOK\t\n"
    " GPU3\tCNS\tCNS\tOK\tX\t\n"
    "\nLegend:\n\n  X    = Self\n  OK   = Status Ok\n  CNS  = Chipset not supported\n"
)
# GPU 3 sits on a x4 riser; GPU 1 idles at gen 1 (power saving: generation is not a warning, width is)
PCIE = ("0, 00000000:01:00.0, 5, 5, 16, 16, 12.0\n"
        "1, 00000000:21:00.0, 1, 5, 16, 16, 12.0\n"
        "2, 00000000:41:00.0, 5, 5, 16, 16, 12.0\n"
        "3, 00000000:61:00.0, 4, 5, 4, 16, 12.0\n")


def test_topology_matrix_parses_devices_and_drops_affinity_columns() -> None:
    m = parse_matrix(TOPO)
    assert set(m) == {"GPU0", "GPU1", "GPU2", "GPU3", "NIC0"}
    assert m["GPU0"] == {"GPU0": "X", "GPU1": "NODE", "GPU2": "SYS", "GPU3": "SYS", "NIC0": "PIX"}
    assert m["GPU3"]["GPU2"] == "PHB"
    assert parse_matrix("\x1b[4m\tGPU0\tGPU1\x1b[0m\nGPU0\t X \tNV4\nGPU1\tNV4\t X \n")["GPU1"]["GPU0"] == "NV4"


def test_p2p_matrix_parses_with_leading_spaces() -> None:
    m = parse_matrix(P2P)
    assert m["GPU0"]["GPU1"] == "OK" and m["GPU0"]["GPU2"] == "CNS" and m["GPU3"]["GPU3"] == "X"


def test_pcie_links_and_the_width_warning() -> None:
    links = parse_pcie_csv(PCIE + "4, 00000000:81:00.0, [N/A], [N/A], [N/A], [N/A], [N/A]\n")
    assert [g.index for g in links] == [0, 1, 2, 3, 4]
    assert (links[3].width_current, links[3].width_max, links[3].gen_current) == (4, 16, 4)
    assert links[4].width_current is None and links[4].compute_cap is None and not links[4].below_max_width
    assert [g.index for g in links if g.below_max_width] == [3]


def _runner(outputs: dict[str, Optional[str]]):  # type: ignore[no-untyped-def]
    def run(argv: Sequence[str]) -> Optional[str]:
        key = " ".join(argv[1:3]) if argv[1] == "topo" else "query"
        return outputs.get(key)
    return run


def test_collect_on_a_gpu_node(tmp_path: Path) -> None:
    (tmp_path / "dmar0").mkdir()
    ic = collect_interconnect(_runner({"query": PCIE, "topo -m": TOPO, "topo -p2p": P2P}),
                              {"NCCL_P2P_LEVEL": "4", "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "HOME": "/root",
                               "NCCL_API_TOKEN": "s3cret"},
                              lambda p: "BOOT_IMAGE=/vmlinuz ro amd_iommu=on iommu=pt quiet", str(tmp_path))
    assert ic.available and ic.reason is None
    assert ic.topology["GPU2"]["GPU3"] == "PHB" and ic.p2p_read["GPU1"]["GPU0"] == "OK"
    assert set(ic.env) == {"NCCL_P2P_LEVEL", "CUDA_DEVICE_ORDER", "NCCL_API_TOKEN"}
    assert ic.env["NCCL_API_TOKEN"] != "s3cret"  # a secret-looking name is masked, never stored
    assert ic.iommu_cmdline == ("amd_iommu=on", "iommu=pt") and ic.iommu_devices == 1
    assert ic.compute_sm() == 120
    (warning,) = ic.width_warnings()
    assert "GPU 3" in warning and "x4" in warning and "x16" in warning
    doc = ic.to_json()
    assert doc["links"][3]["width_current"] == 4 and doc["topology_text"] == TOPO


def test_without_nvidia_smi_it_is_recorded_unavailable_not_faked(tmp_path: Path) -> None:
    ic = collect_interconnect(_runner({}), {"CUDA_VISIBLE_DEVICES": ""}, lambda p: None, str(tmp_path / "none"))
    assert not ic.available and "nvidia-smi" in (ic.reason or "")
    assert ic.links == () and ic.topology == {} and ic.width_warnings() == [] and ic.compute_sm() is None
    assert ic.env == {"CUDA_VISIBLE_DEVICES": ""} and ic.iommu_devices is None
    # the real call on this machine never raises, whatever it has
    real = collect_interconnect()
    assert real.available or real.reason
