"""The simulator's deployment-role flags (SGLang 0.5.23's PD and multi-node flags) and the launch rules it applies.

Prefill/decode: `--disaggregation-mode`, `--disaggregation-transfer-backend`, `--disaggregation-bootstrap-port`
(arg_groups/fields/disagg.py). Multi-node: `--nnodes`, `--node-rank`, `--dist-init-addr` (arg_groups/fields/
parallel.py). Defaults and choices are SGLang's; the rules marked "simulator" below are the simulator's own."""

from __future__ import annotations

import argparse
from typing import Optional

from cluster.config.bounds import PORT_MAX, PORT_MIN

DISAGG_MODES = ("null", "prefill", "decode")
TRANSFER_BACKENDS = ("mooncake", "nixl", "ascend", "fake", "mori", "mooncake_tcp")
"""SGLang 0.5.23's DISAGG_TRANSFER_BACKEND_CHOICES (arg_groups/choices.py)."""
BOOTSTRAP_PORT_DEFAULT = 8998
FAKE_PREFILL_REFUSED = "Prefill server does not support 'fake' as the transfer backend"
"""SGLang 0.5.23's assertion message (arg_groups/pd_disaggregation_hook.py:146-148)."""


def add_role_flags(p: argparse.ArgumentParser) -> None:
    """The PD and multi-node flags, with SGLang's defaults and choices."""
    p.add_argument("--disaggregation-mode", choices=DISAGG_MODES, default="null",
                   help="prefill or decode: a simulated PD role (its bootstrap is the simulator's own, not mooncake's)")
    p.add_argument("--disaggregation-transfer-backend", choices=TRANSFER_BACKENDS, default="mooncake",
                   help="reported in /server_info; the simulated transfer follows the kv_transfer_gb_s knob")
    p.add_argument("--disaggregation-bootstrap-port", type=int, default=BOOTSTRAP_PORT_DEFAULT,
                   help="prefill: the port of the simulated bootstrap listener")
    p.add_argument("--nnodes", type=int, default=1, help="simulated nodes of one server (one process each)")
    p.add_argument("--node-rank", type=int, default=0, help="this process's node rank")
    p.add_argument("--dist-init-addr", "--nccl-init-addr", dest="dist_init_addr", default=None,
                   help="HOST:PORT where rank 0 listens for the other ranks")


def split_host_port(addr: str) -> Optional[tuple[str, int]]:
    """(host, port) of HOST:PORT (an IPv6 host in brackets), or None when it is not one."""
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not PORT_MIN <= int(port) <= PORT_MAX:
        return None
    return host.strip("[]"), int(port)


def role_error(mode: str, backend: str, bootstrap_port: int, nnodes: int, rank: int, addr: Optional[str],
               tp_size: int) -> Optional[str]:
    """Why SGLang (or, where marked, the simulator) refuses these role flags; None when they launch."""
    if mode == "prefill" and backend == "fake":
        return FAKE_PREFILL_REFUSED
    if mode == "prefill" and not PORT_MIN <= bootstrap_port <= PORT_MAX:
        return f"--disaggregation-bootstrap-port {bootstrap_port}: expected a TCP port from {PORT_MIN} to {PORT_MAX}"
    if nnodes < 1 or not 0 <= rank < nnodes:
        return f"--node-rank {rank} with --nnodes {nnodes}: expected 0 <= node rank < nnodes"
    if nnodes > 1:
        if addr is None or split_host_port(str(addr)) is None:
            return (f"--dist-init-addr {addr}: the simulator needs HOST:PORT with --nnodes {nnodes} "
                    "(rank 0 listens there for the other ranks)")
        if tp_size % nnodes:
            return f"--tp-size {tp_size} is not divisible by --nnodes {nnodes} (simulator rule: tp per node)"
        if mode != "null":
            return "the simulator does not model a PD role across several nodes (--nnodes > 1 with a PD mode)"
    return None
