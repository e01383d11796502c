"""The checks `sglbench doctor` (and `sglbench run`, before it reserves GPUs) makes over a node's facts: pure functions.

Each check reads the facts it names and gives one line: its level, what it found and what to do. Levels: ok; info
(not needed by this experiment, or nothing to check); warning (the run can start but may be slowed or its numbers
not vouched for); fail (a run cannot work here). `NodeNeeds` says what the experiment asks of the node; without an
experiment every need is assumed (a GPU SGLang server), so a missing GPU is a warning rather than a failure.
"""

from __future__ import annotations

from typing import Callable, Literal, Optional

from pydantic import BaseModel, ConfigDict

from cluster.errors import one_line
from cluster.node.facts import NodeFacts

Level = Literal["ok", "info", "warning", "fail"]

GIB = 1 << 30
SHM_MIN_BYTES = 4 * GIB
"""SGLang's TP workers pass tensors through /dev/shm (NCCL and torch multiprocessing): a container's default 64 MiB
ends in a bus error once the first batch is large; several GiB is the usual advice."""
DISK_MIN_BYTES = 10 * GIB
"""Free space below which a long run (per-chunk tables, server logs, tuning caches) is warned about."""
NOFILE_BASE = 256
"""Descriptors a load actor holds besides its request sockets (Ray, its logs, the dataset files, Python itself)."""
FAST_CLOCKSOURCES = ("tsc", "kvm-clock", "arch_sys_counter", "hyperv_clocksource_tsc_page")
"""Clock sources read through the vDSO (no system call): the client stamps every chunk with time.monotonic_ns()."""


class _Record(BaseModel):
    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")


class NodesNeed(_Record):
    """A variant served by one server across nodes: the cluster must have `nodes` GPU nodes of `gpus_per_node`."""

    variant: str
    nodes: int
    gpus_per_node: int
    """GPUs each rank holds (tp / nodes)."""


class NodeNeeds(_Record):
    """What the experiment asks of the serving node (the defaults: no experiment given, everything assumed)."""

    from_spec: bool = False
    gpus: int = 1
    """GPUs the experiment needs on one node: its largest per-node need (one server's tp, a packed deployment's
    total, a rank's tp / nodes; 0: simulated or CPU engines only)."""
    gpus_for: str = ""
    """The variant that needs them, in words (empty: one server assumed)."""
    gateway: bool = False
    """A variant is served behind SGLang's gateway (replicas, prefill/decode): `smg` must run beside the engine."""
    gateway_variants: tuple[str, ...] = ()
    transfer_backends: tuple[str, ...] = ()
    """The prefill/decode variants' transfer backends: each one's module must import in the engine's interpreter."""
    nodes: tuple[NodesNeed, ...] = ()
    sglang: bool = True
    sglang_launcher: bool = False
    """SGLang starts from a command (engines.sglang.launcher), not an interpreter this tool can ask."""
    sglang_version: Optional[str] = None
    """engines.sglang.version as declared."""
    target_version: Optional[str] = None
    """The SGLang release this tool's flags and rules are checked against."""
    speculative: bool = False
    """A NEXTN/MTP variant needs the checkpoint's MTP weights."""
    concurrency_per_actor: int = 256
    load_actors: int = 1
    load_actor_cpus: float = 1.0


class CheckResult(_Record):
    name: str
    level: Level
    message: str
    fix: str = ""

    def line(self) -> str:
        """One printable line: a fact's text (a path, an error a node sent back) cannot break it or move the
        cursor; control characters show escaped."""
        text = f"{self.level:<7} {self.name:<11} {self.message}" + (f" -> {self.fix}" if self.fix else "")
        return one_line(text)


def _unneeded_or(needed: bool, needs: NodeNeeds) -> Level:
    """The level of a missing fact: fail where the experiment needs it, warning where no experiment says."""
    if not needed:
        return "info"
    return "fail" if needs.from_spec else "warning"


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB / 10 else f"{n / (1 << 20):.0f} MiB"


def _visible(facts: NodeFacts) -> int:
    n = len(facts.gpus or ())
    cvd = facts.cuda_visible_devices
    if cvd is None:
        return n
    ids = [x for x in cvd.split(",") if x.strip() and x.strip() != "-1"]
    return min(n, len(ids))


def check_gpus(facts: NodeFacts, needs: NodeNeeds) -> CheckResult:
    if facts.gpus is None:
        return CheckResult(name="gpus", level=_unneeded_or(needs.gpus > 0, needs),
                           message=f"unavailable: {facts.gpus_reason or 'no GPU listed'}",
                           fix="install the NVIDIA driver / run on the GPU node" if needs.gpus else "")
    seen = _visible(facts)
    caps = sorted({g.compute_cap for g in facts.gpus if g.compute_cap})
    cvd = "unset" if facts.cuda_visible_devices is None else repr(facts.cuda_visible_devices)
    sm = ", ".join(f"{c} (SM{c.replace('.', '')})" for c in caps) or "unknown"
    msg = f"{seen} of {len(facts.gpus)} GPU(s) visible to the server (CUDA_VISIBLE_DEVICES {cvd}), compute capability {sm}"
    if seen < needs.gpus:
        who = f"{needs.gpus_for} needs" if needs.gpus_for else "a server needs"
        return CheckResult(name="gpus", level="fail", message=f"{msg}; {who} {needs.gpus} on one node",
                           fix="unset or widen CUDA_VISIBLE_DEVICES, or lower model.tp")
    if len(caps) > 1:
        return CheckResult(name="gpus", level="warning", message=f"{msg}: mixed GPUs in one node",
                           fix="pin the server to one kind of GPU (tensor parallelism runs at the slowest)")
    return CheckResult(name="gpus", level="ok", message=msg)


def check_nvml(facts: NodeFacts, needs: NodeNeeds) -> CheckResult:
    if facts.nvml_ok:
        return CheckResult(name="nvml", level="ok", message="NVML readable: GPU clocks, power and throttling are sampled")
    level: Level = "warning" if needs.gpus > 0 else "info"
    return CheckResult(name="nvml", level=level, message=f"unavailable: {facts.nvml_reason or 'not read'}",
                       fix="pip install 'sglbench[gpu]' on the node; without NVML no run can vouch for its clocks"
                       if needs.gpus else "")


def check_topology(facts: NodeFacts, needs: NodeNeeds) -> CheckResult:
    if facts.topology_text:
        rows = sum(1 for ln in facts.topology_text.splitlines() if ln.startswith("GPU"))
        return CheckResult(name="topology", level="ok", message=f"nvidia-smi topo -m read ({rows} GPU rows), "
                           "recorded with every run")
    return CheckResult(name="topology", level="warning" if needs.gpus > 1 else "info",
                       message=f"unavailable: {facts.topology_reason or 'not read'}",
                       fix="run nvidia-smi topo -m on the node: TP over SYS/PHB links is much slower than NVLink"
                       if needs.gpus > 1 else "")


def check_link_width(facts: NodeFacts, needs: NodeNeeds) -> CheckResult:
    if facts.gpus is None:
        return CheckResult(name="link-width", level="warning" if needs.gpus > 1 else "info",
                           message=f"unavailable: {facts.gpus_reason or 'no GPU listed'}")
    narrow = [g for g in facts.gpus if g.width_current is not None and g.width_max is not None
              and g.width_current < g.width_max]
    if narrow:
        which = ", ".join(f"GPU {g.index} x{g.width_current} of x{g.width_max}" for g in narrow)
        return CheckResult(name="link-width", level="warning", message=f"PCIe below maximum width: {which}",
                           fix="reseat the card or check the slot/riser: every all-reduce through it is slower")
    known = [g for g in facts.gpus if g.width_current is not None]
    return CheckResult(name="link-width", level="ok" if known else "info",
                       message=f"{len(known)} PCIe link(s) at maximum width" if known else "PCIe width not reported")


def check_engine(facts: NodeFacts, needs: NodeNeeds) -> CheckResult:
    it = facts.interpreter
    if not needs.sglang:
        return CheckResult(name="engine", level="info", message="no SGLang variant in this experiment")
    if needs.sglang_launcher:
        return CheckResult(name="engine", level="info", message="SGLang starts from engines.sglang.launcher, a "
                           "command: no interpreter to ask; its version is read from the server it starts")
    if it is None:
        return CheckResult(name="engine", level=_unneeded_or(True, needs), message="no SGLang interpreter given",
                           fix="set engines.sglang.python to SGLang's own interpreter")
    if not it.runs:
        return CheckResult(name="engine", level=_unneeded_or(True, needs), message=f"{it.path}: {it.reason}",
                           fix="set engines.sglang.python to an interpreter that exists on this node")
    found = (f"sglang {it.sglang_version or 'absent'}, flashinfer {it.flashinfer_version or 'absent'}, "
             f"torch {it.torch_version or 'absent'} in {it.path}")
    if it.sglang_version is not None and not it.sglang_importable:
        return CheckResult(name="engine", level=_unneeded_or(True, needs),
                           message=f"{found}, but `import sglang` does not find the package",
                           fix="reinstall sglang for that interpreter (its metadata outlived the package)")
    if it.sglang_version is None or it.torch_version is None:
        return CheckResult(name="engine", level=_unneeded_or(True, needs), message=found,
                           fix="install sglang (with its torch) for that interpreter, or point engines.sglang.python "
                           "at the one that has it")
    from cluster.engines.sglang import parse_version

    if needs.sglang_version and parse_version(needs.sglang_version) != parse_version(it.sglang_version):
        return CheckResult(name="engine", level="fail", message=f"{found}; the experiment declares "
                           f"{needs.sglang_version}", fix="fix engines.sglang.version or the interpreter")
    if needs.target_version and parse_version(needs.target_version) != parse_version(it.sglang_version):
        return CheckResult(name="engine", level="warning", message=f"{found}; flags and rules are checked "
                           f"against {needs.target_version}", fix="expect renamed flags; `sglbench plan` warns per flag")
    if it.flashinfer_version is None and needs.gpus > 0:
        return CheckResult(name="engine", level="warning", message=found,
                           fix="install flashinfer-python: SGLang's default GPU attention and sampling need it")
    return CheckResult(name="engine", level="ok", message=found)


def check_gateway(facts: NodeFacts, needs: NodeNeeds) -> CheckResult:
    """SGLang's gateway beside the engine's interpreter, and its version (what replicas and prefill/decode need)."""
    from cluster.engines.deployment_needs import GATEWAY_INSTALL, GATEWAY_VERSION

    gw = facts.gateway
    users = f" ({', '.join(needs.gateway_variants)})" if needs.gateway_variants else ""
    if gw is None:
        return CheckResult(name="gateway", level="info", message="SGLang's gateway not looked for" + (
            "" if needs.gateway else ": no variant is served behind it"))
    if not gw.runs:
        if not needs.gateway:
            return CheckResult(name="gateway", level="info", message=f"{gw.path}: {gw.reason}; no variant is served "
                               "behind SGLang's gateway")
        return CheckResult(name="gateway", level="fail", message=f"{gw.path}: {gw.reason}; the replicas/prefill-decode "
                           f"variant(s){users} run behind SGLang's gateway", fix=GATEWAY_INSTALL)
    msg = f"smg {gw.version} at {gw.path}" + (f" for {', '.join(needs.gateway_variants)}" if users else "")
    if gw.version != GATEWAY_VERSION:
        level: Level = "warning" if needs.gateway else "info"
        return CheckResult(name="gateway", level=level, message=f"{msg}; sglbench's gateway flags and headers are "
                           f"checked against smg {GATEWAY_VERSION}", fix=GATEWAY_INSTALL if needs.gateway else "")
    return CheckResult(name="gateway", level="ok" if needs.gateway else "info", message=msg + (
        "" if needs.gateway else "; no variant is served behind it"))


def check_transfer(facts: NodeFacts, needs: NodeNeeds) -> list[CheckResult]:
    """For prefill/decode: each transfer backend's module imports in the engine's interpreter (one line each)."""
    from cluster.engines.deployment_needs import TRANSFER_MODULES

    found = {m.name: m for m in facts.modules}
    out = []
    for backend in needs.transfer_backends:
        module, package = TRANSFER_MODULES[backend]
        fact = found.get(module)
        where = facts.interpreter.path if facts.interpreter else "the engine's interpreter"
        if fact is None:
            out.append(CheckResult(name="transfer", level="warning" if not needs.sglang_launcher else "info",
                                   message=f"{backend}: `import {module}` not tried (no interpreter to ask)"))
        elif fact.importable:
            out.append(CheckResult(name="transfer", level="ok", message=f"{backend}: `import {module}` works in "
                                   f"{where}"))
        else:
            out.append(CheckResult(name="transfer", level="fail", message=f"{backend}: `import {module}` fails in "
                                   f"{where}: {fact.reason}", fix=f"install {package} for that interpreter (and the "
                                   "system libraries its extension links, e.g. libibverbs for mooncake), or change "
                                   "the prefill/decode variants' transfer_backend"))
    return out


def check_nodes(facts: NodeFacts, needs: NodeNeeds) -> list[CheckResult]:
    """For a server across nodes: the cluster must have that many GPU nodes, each with a rank's GPUs (one line per
    variant; compared with the live cluster when the facts came from one)."""
    out = []
    for n in needs.nodes:
        want = f"{n.variant} runs one server across {n.nodes} nodes with {n.gpus_per_node} GPU(s) each"
        if facts.cluster_gpus is None:
            out.append(CheckResult(name="nodes", level="info", message=f"{want}: the cluster must have {n.nodes} GPU "
                                   f"nodes with at least {n.gpus_per_node} GPUs each (not compared: give --address "
                                   "to check the live cluster)"))
            continue
        fit = sum(g >= n.gpus_per_node for g in facts.cluster_gpus)
        msg = (f"{want}; the cluster has {fit} such node(s) (GPUs per node: "
               f"{', '.join(map(str, facts.cluster_gpus)) or 'no GPU node'})")
        if fit < n.nodes:
            out.append(CheckResult(name="nodes", level="fail", message=msg, fix="join more GPU nodes to the cluster "
                                   "(ray start --address ...), or lower the variant's deployment.nodes"))
        else:
            out.append(CheckResult(name="nodes", level="ok", message=msg))
    return out


def check_checkpoint(facts: NodeFacts, needs: NodeNeeds) -> CheckResult:
    ck = facts.checkpoint
    if ck is None:
        why = "the experiment's engine reads no checkpoint" if needs.from_spec else "no experiment given"
        return CheckResult(name="checkpoint", level="info", message=f"{why}: nothing to probe")
    if not ck.readable:
        said = ck.reason or "not readable"
        return CheckResult(name="checkpoint", level="fail",
                           message=said if said.startswith(ck.path) else f"{ck.path}: {said}",
                           fix="stage the weights on this node at model.path")
    msg = f"{ck.path}: {ck.tensors} tensors probed, MTP {ck.mtp_verdict}"
    if needs.speculative and not ck.mtp_weights_present:
        return CheckResult(name="checkpoint", level="fail", message=f"{msg}: a NEXTN variant needs MTP weights",
                           fix="use a checkpoint that keeps the MTP head, or drop the NEXTN variants")
    return CheckResult(name="checkpoint", level="ok", message=msg)


def check_disks(facts: NodeFacts, needs: NodeNeeds) -> list[CheckResult]:
    out = []
    for d in facts.disks:
        where = d.path if d.measured_at in (None, d.path) else f"{d.path} (on {d.measured_at})"
        if d.free_bytes is None:
            out.append(CheckResult(name="disk", level="fail", message=f"{where}: unavailable: {d.reason}",
                                   fix="give the run a directory (--output) where the dataset root can live"))
        elif not d.writable:
            out.append(CheckResult(name="disk", level="fail", message=f"{where}: not writable",
                                   fix="give the run a writable output directory (--output)"))
        elif d.free_bytes < DISK_MIN_BYTES:
            out.append(CheckResult(name="disk", level="warning", message=f"{where}: {_gib(d.free_bytes)} free",
                                   fix=f"free space or move it: below {_gib(DISK_MIN_BYTES)} a long run can fill it"))
        else:
            out.append(CheckResult(name="disk", level="ok", message=f"{where}: {_gib(d.free_bytes)} free"))
    return out


def check_shm(facts: NodeFacts, needs: NodeNeeds) -> CheckResult:
    needed = needs.sglang and needs.gpus > 0
    if facts.shm_bytes is None:
        return CheckResult(name="shm", level="warning" if needed else "info",
                           message=f"unavailable: {facts.shm_reason}")
    msg = f"/dev/shm is {_gib(facts.shm_bytes)}"
    if facts.shm_bytes < SHM_MIN_BYTES and needed:
        return CheckResult(name="shm", level="warning", message=f"{msg}, below {_gib(SHM_MIN_BYTES)}",
                           fix="docker run --shm-size=16g, or a Kubernetes emptyDir {medium: Memory} at /dev/shm: "
                           "SGLang's workers fail with a bus error on a small one")
    return CheckResult(name="shm", level="ok" if needed else "info", message=msg)


def check_nofile(facts: NodeFacts, needs: NodeNeeds) -> CheckResult:
    soft, hard = facts.nofile_soft, facts.nofile_hard
    if soft is None or hard is None:
        return CheckResult(name="open-files", level="warning", message="unavailable: RLIMIT_NOFILE not read")
    want = needs.concurrency_per_actor + NOFILE_BASE
    unlimited = -1
    msg = f"open-file limit {soft} (hard {'unlimited' if hard == unlimited else hard}); a load actor at " \
          f"concurrency {needs.concurrency_per_actor} needs about {want}"
    if soft != unlimited and soft < want:
        if hard == unlimited or hard >= want:
            return CheckResult(name="open-files", level="warning", message=msg,
                               fix=f"ulimit -n {want} (or more) in the shell that starts Ray")
        return CheckResult(name="open-files", level="fail", message=msg,
                           fix="raise the hard limit (limits.conf, the container's --ulimit nofile=65536)")
    return CheckResult(name="open-files", level="ok", message=msg)


def check_cpu(facts: NodeFacts, needs: NodeNeeds) -> CheckResult:
    want = needs.load_actor_cpus * needs.load_actors
    if facts.ray_node_cpus is not None:
        msg = f"Ray node has {facts.ray_node_cpus:g} CPU, {facts.ray_available_cpus or 0:g} unreserved in the " \
              f"cluster; the load actors ask for {want:g}"
        if facts.ray_node_cpus < want:
            return CheckResult(name="cpu", level="fail", message=msg,
                               fix="start Ray with more --num-cpus, or lower load.actors_per_server")
        if facts.ray_available_cpus is not None and facts.ray_available_cpus < want:
            return CheckResult(name="cpu", level="warning", message=msg,
                               fix="other work holds the CPU: the placement waits until it is freed")
        return CheckResult(name="cpu", level="ok", message=msg)
    if facts.cpus is None:
        return CheckResult(name="cpu", level="warning", message="unavailable: CPU affinity not read")
    msg = f"{facts.cpus} CPU(s) for this process (no Ray cluster asked); the load actors use {want:g}"
    if facts.cpus < want + 1:
        return CheckResult(name="cpu", level="warning", message=f"{msg} and the server's scheduler one more",
                           fix="give the node more cores: a load actor sharing a core stamps chunks late")
    return CheckResult(name="cpu", level="ok", message=msg)


def check_clocksource(facts: NodeFacts, needs: NodeNeeds) -> CheckResult:
    cs = facts.clocksource
    if cs is None:
        return CheckResult(name="clock", level="warning", message=f"unavailable: {facts.clocksource_reason}")
    msg = f"clock source {cs} (available: {' '.join(facts.clocksource_available) or '?'})"
    if cs in FAST_CLOCKSOURCES:
        return CheckResult(name="clock", level="ok", message=msg)
    fast = [c for c in facts.clocksource_available if c in FAST_CLOCKSOURCES]
    return CheckResult(name="clock", level="warning", message=f"{msg}: every timestamp is a system call",
                       fix=f"echo {fast[0]} > /sys/devices/system/clocksource/clocksource0/current_clocksource"
                       if fast else "use a host whose kernel offers tsc")


CHECKS: tuple[Callable[[NodeFacts, NodeNeeds], CheckResult], ...] = (
    check_gpus, check_nvml, check_topology, check_link_width, check_engine, check_gateway, check_checkpoint,
    check_shm, check_nofile, check_cpu, check_clocksource)


def run_checks(facts: NodeFacts, needs: NodeNeeds) -> list[CheckResult]:
    """Every check's line, in a fixed order (the cluster's nodes after the GPUs, the transfer modules after the
    gateway, disks after the checkpoint)."""
    out = [check(facts, needs) for check in CHECKS[:4]]
    out += check_nodes(facts, needs)
    out += [check(facts, needs) for check in CHECKS[4:6]]
    out += check_transfer(facts, needs)
    out.append(check_checkpoint(facts, needs))
    out += check_disks(facts, needs)
    out += [check(facts, needs) for check in CHECKS[7:]]
    return out


def exit_code(results: list[CheckResult]) -> int:
    """0 all fine, 1 warnings, 3 (the environment's code) when a run cannot work here."""
    from cluster.errors import EXIT_ENVIRONMENT

    levels = {r.level for r in results}
    return EXIT_ENVIRONMENT if "fail" in levels else 1 if "warning" in levels else 0
