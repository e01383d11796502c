"""Re-derive the SGLang release boundaries in cluster/engines/sglang.py from a directory of SGLang wheels.

    pip download --no-deps sglang==0.5.5.post3 sglang==0.5.6 sglang==0.5.10 sglang==0.5.11 \
        sglang==0.5.13.post1 sglang==0.5.14 sglang==0.5.23 -d /tmp/sglang-wheels
    python scripts/sglang_release_facts.py /tmp/sglang-wheels

Each fact is a marker in the wheel's `sglang/srt/**.py`: the boundary is the first release (by version) whose source
has it (or, for a removal, the first release without it after one that had it). Prints one line per fact and exits
1 when a boundary the wheels decide differs from the constant, 2 when no wheel was found.
"""

from __future__ import annotations

import re
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cluster.engines import sglang as eng  # noqa: E402


@dataclass(frozen=True)
class Fact:
    name: str
    constant: str
    """The name of the boundary in cluster.engines.sglang."""
    marker: str
    """A regular expression over the release's sglang/srt/**.py."""
    appears: bool = True
    """True: the boundary is where the marker appears; False: where it disappears."""


FACTS: tuple[Fact, ...] = (
    Fact("decode CUDA-graph flags", "CUDA_GRAPH_REFACTOR", r"cuda_graph_max_bs_decode"),
    Fact("/server_info route", "SERVER_INFO_RENAME", r"""@app\.get\(["']/server_info["']\)"""),
    Fact("--mamba-radix-cache-strategy", "MAMBA_STRATEGY_RENAME", r"mamba_radix_cache_strategy"),
    Fact("NEXTN + no_buffer radix-cache ValueError", "MAMBA_STRATEGY_RENAME",
         r"is not compatible with radix cache when using --mamba-scheduler-strategy no_buffer", appears=False),
    Fact("SGLANG_ENABLE_SPEC_V2 on by default", "SPEC_V2_DEFAULT", r"SGLANG_ENABLE_SPEC_V2 = EnvBool\(True\)"),
)


def wheel_version(path: Path) -> tuple[int, ...]:
    """sglang-0.5.13.post1-....whl → (0, 5, 13, 1); a plain release sorts before its .post ones (…, 0)."""
    m = re.match(r"sglang-(\d+)\.(\d+)\.(\d+)(?:\.post(\d+))?-", path.name)
    if not m:
        raise ValueError(f"not an sglang wheel name: {path.name}")
    return tuple(int(g or 0) for g in m.groups())


def presence(wheels: Sequence[Path]) -> list[tuple[tuple[int, ...], frozenset[str]]]:
    """(version, names of the FACTS whose marker its source has) per wheel, by version; each wheel read once."""
    patterns = {f.name: re.compile(f.marker) for f in FACTS}
    out = []
    for wheel in sorted(wheels, key=wheel_version):
        with zipfile.ZipFile(wheel) as z:
            text = "\n".join(z.read(n).decode("utf-8", "replace")
                             for n in z.namelist() if n.startswith("sglang/srt/") and n.endswith(".py"))
        out.append((wheel_version(wheel), frozenset(name for name, pat in patterns.items() if pat.search(text))))
    return out


def boundary(seen: Sequence[tuple[tuple[int, ...], frozenset[str]]], fact: Fact
             ) -> tuple[Optional[tuple[int, ...]], str]:
    """(first release on the far side of the boundary, how the wheels show it); None where they do not decide."""
    has = [(v, fact.name in names) for v, names in seen]
    for (v_before, before), (v_after, after) in zip(has, has[1:]):
        if before != fact.appears and after == fact.appears:
            return v_after[:3], f"{_label(v_before)} {'lacks' if fact.appears else 'has'} it, {_label(v_after)} " \
                                f"{'has' if fact.appears else 'lacks'} it"
    return None, "no change across " + ", ".join(_label(v) for v, _ in has)


def _label(v: tuple[int, ...]) -> str:
    return ".".join(map(str, v[:3])) + (f".post{v[3]}" if len(v) > 3 and v[3] else "")


def check(wheels: Sequence[Path]) -> list[tuple[Fact, Optional[tuple[int, ...]], tuple[int, ...], str]]:
    """(fact, boundary the wheels show or None, the constant's value, evidence) for every fact."""
    seen = presence(wheels)
    out = []
    for fact in FACTS:
        found, why = boundary(seen, fact)
        out.append((fact, found, tuple(getattr(eng, fact.constant)), why))
    return out


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    wheels = sorted(Path(argv[0]).glob("sglang-*.whl"))
    if not wheels:
        print(f"no sglang-*.whl under {argv[0]}", file=sys.stderr)
        return 2
    bad = 0
    for fact, found, const, why in check(wheels):
        if found is None:
            verdict = "undecided"
        elif found == const:
            verdict = "agrees"
        else:
            verdict, bad = "DIFFERS", bad + 1
        shown = ".".join(map(str, found)) if found else "-"
        print(f"{fact.name:42s} {fact.constant}={'.'.join(map(str, const)):8s} wheels: {shown:8s} {verdict:9s} ({why})")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
