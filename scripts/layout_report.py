"""Layout figures of the `cluster` package: flat modules, import cycles, `dict[str, Any]` in the spec, mypy --strict errors.

    python scripts/layout_report.py [--mypy]

Import edges come from an AST walk over every module, imports inside functions included. Importing
`cluster.a.b` also runs `cluster/a/__init__.py`, so an edge to a sub-package's `__init__` is added for every
import below it; the root `cluster/__init__.py` (the public face, which imports from everything) is left out of
that rule, since no submodule reads a name from it.
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "cluster"
# Everything but the Ray executor, the CLI commands and the Triton kernel (which needs CUDA-era typing).
NOT_CORE = ("cluster/distributed", "cluster/commands", "cluster/tuning/moe_kernel.py", "cluster/cli.py")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def imported_modules(path: Path, known: dict[str, Path]) -> set[str]:
    """Every in-package module `path` imports, anywhere in its body, plus the sub-package inits that run first."""
    me = module_name(path)
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = me.split(".") if is_pkg else me.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        for t in targets:
            if t in known:
                out.add(t)
    for t in list(out):
        parts = t.split(".")
        for i in range(2, len(parts)):
            parent = ".".join(parts[:i])
            if parent in known:
                out.add(parent)
    out.discard(me)
    return out


def import_cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    known = all_modules()
    graph = {m: imported_modules(p, known) - {"cluster"} for m, p in known.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    sccs: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(sccs)


def flat_modules() -> list[str]:
    return sorted(p.name for p in PKG.glob("*.py"))


def spec_dict_any_count() -> int:
    spec_files = sorted((PKG / "config").rglob("*.py"))
    pattern = re.compile(r"dict\[\s*str\s*,\s*Any\s*\]")
    return sum(len(pattern.findall(p.read_text())) for p in spec_files if p.exists())


def core_paths() -> list[str]:
    out = []
    for p in sorted(PKG.rglob("*.py")):
        rel = p.relative_to(REPO).as_posix()
        if not rel.startswith(NOT_CORE):
            out.append(rel)
    return out


def mypy_strict_errors() -> int:
    proc = subprocess.run([sys.executable, "-m", "mypy", "--strict", *core_paths()], cwd=REPO,
                          capture_output=True, text=True, check=False)
    m = re.search(r"Found (\d+) error", proc.stdout)
    return int(m.group(1)) if m else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mypy", action="store_true", help="also count mypy --strict errors on the core (slow)")
    args = ap.parse_args()
    flat = flat_modules()
    print(f"modules directly in cluster/: {len(flat)} ({', '.join(flat)})")
    cycles = import_cycles()
    print(f"import cycles (AST, imports inside functions included): {len(cycles)}")
    for c in cycles:
        print("  " + " <-> ".join(c))
    print(f"dict[str, Any] in the spec package: {spec_dict_any_count()}")
    if args.mypy:
        print(f"mypy --strict errors on the core: {mypy_strict_errors()}")


if __name__ == "__main__":
    main()
