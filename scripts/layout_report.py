"""Layout figures of the `cluster` package: flat modules, import cycles, imports that run upward, `dict[str, Any]` at public signatures, interface and module sizes, store constructions, mypy --strict errors.

    python scripts/layout_report.py [--mypy] [--list]

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


def import_base(node: ast.ImportFrom, me: str, is_pkg: bool) -> str:
    """The absolute module a `from ... import` names, its relative dots resolved against module `me`."""
    base = node.module or ""
    if node.level:
        anchor = me.split(".") if is_pkg else me.split(".")[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join(anchor + ([base] if base else []))
    return base


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
            base = import_base(node, me, is_pkg)
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


LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "version", "input_files"),
    ("config", "spec"),  # `spec` is the config package's name before it was renamed (for the before figures)
    ("kernel",),
    ("probe",),
    ("telemetry",),
    ("engines",),
    ("sim",),
    ("server",),
    ("loadgen",),
    ("dataset",),
    ("tuning",),
    ("plan",),
    ("analysis",),
    ("node",),
    ("distributed",),
    ("commands",),
    ("cli",),
)
"""The declared order of the packages, bottom first: a module may import its own layer and the layers below it.
`sim` sits above `engines` (a simulated server speaks the engines' wire format); `dataset` below `tuning` and
`plan` (the store keeps what it is handed and decides nothing); `analysis` above `plan` and `dataset`."""


def layer_of(module: str) -> int:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else "cli"
    for i, names in enumerate(LAYERS):
        if top in names:
            return i
    raise KeyError(f"{module}: package {top!r} has no layer in LAYERS")


def direct_imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The in-package modules `path` names in an import or hands over to with runpy (no parent-package inits added)."""
    me = module_name(path)
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = import_base(node, me, is_pkg)
            subs = {f"{base}.{a.name}" for a in node.names} & set(known)
            out.update(subs or ({base} & set(known)))
        # a hand-over by module name (runpy.run_module("cluster.x.y")) is a dependency the import statements hide
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("run_module") and node.args \
                and isinstance(node.args[0], ast.Constant) and node.args[0].value in known:
            out.add(str(node.args[0].value))
    out.discard(me)
    out.discard("cluster")
    return out


def upward_imports() -> list[tuple[str, str]]:
    """(importer, imported) module pairs where the imported module's layer is above the importer's."""
    known = all_modules()
    out = []
    for mod, path in known.items():
        if mod == "cluster":
            continue
        for t in sorted(direct_imports(path, known)):
            if layer_of(t) > layer_of(mod):
                out.append((mod, t))
    return sorted(out)


_DICT_ANY = re.compile(r"\b(dict|Dict|Mapping|MutableMapping)\[\s*str\s*,\s*(Any|object)\s*\]")


def dict_any_signatures() -> list[str]:
    """Public functions and methods (no leading underscore, in a public class or at module level) whose parameters
    or return are annotated with dict/Mapping[str, Any] (or object)."""
    out = []
    for path in sorted(PKG.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        rel = path.relative_to(REPO).as_posix()

        def visit(body: list[ast.stmt], owner: str) -> None:
            for node in body:
                if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                    visit(node.body, node.name + ".")
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
                    anns = [a.annotation for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs,
                                                   *([node.args.vararg] if node.args.vararg else []),
                                                   *([node.args.kwarg] if node.args.kwarg else [])] if a.annotation]
                    if node.returns is not None:
                        anns.append(node.returns)
                    if any(_DICT_ANY.search(ast.unparse(a)) for a in anns):
                        out.append(f"{rel}:{node.lineno} {owner}{node.name}")

        visit(tree.body, "")
    return out


def interface_sizes() -> list[tuple[str, int]]:
    """Every Protocol or abstract base class with its number of public methods and properties, largest first."""
    out = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = {ast.unparse(b).split("[")[0].split(".")[-1] for b in node.bases}
            if not bases & {"Protocol", "ABC"}:
                continue
            n = sum(1 for b in node.body if isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and not b.name.startswith("_"))
            out.append((f"{rel}:{node.name}", n))
    return sorted(out, key=lambda x: (-x[1], x[0]))


def module_sizes() -> list[tuple[str, int]]:
    """Every module with its line count, largest first."""
    sizes = [(p.relative_to(REPO).as_posix(), len(p.read_text().splitlines())) for p in PKG.rglob("*.py")]
    return sorted(sizes, key=lambda x: (-x[1], x[0]))


def store_constructions() -> list[str]:
    """Places outside cluster/dataset/ that construct a DatasetStore."""
    out = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel.startswith("cluster/dataset/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] == "DatasetStore":
                out.append(f"{rel}:{node.lineno}")
    return out


def package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "cli"


def layer_drawing() -> str:
    """The layers drawn from the code's own imports, top first: each package with the packages it imports (direct
    imports, those inside functions included), upward ones marked. docs/architecture.md holds this block verbatim."""
    known = all_modules()
    deps: dict[str, set[str]] = {}
    modules: dict[str, int] = {}
    for mod, path in known.items():
        if mod == "cluster":
            continue
        pkg = package_of(mod)
        modules[pkg] = modules.get(pkg, 0) + (0 if path.name == "__init__.py" else 1)
        deps.setdefault(pkg, set()).update(package_of(t) for t in direct_imports(path, known))
    lines = []
    for i in reversed(range(len(LAYERS))):
        for pkg in LAYERS[i]:
            if pkg not in deps:
                continue
            below = sorted((d for d in deps[pkg] - {pkg}), key=lambda d: (-layer_of(f"cluster.{d}"), d))
            shown = [d + (" (UP)" if layer_of(f"cluster.{d}") > i else "") for d in below]
            name = pkg + ("/" if (PKG / pkg).is_dir() else ".py")
            count = f"{modules[pkg]} modules" if (PKG / pkg).is_dir() else "module"
            lines.append(f"{name:<15} {count:<11} -> " + (", ".join(shown) if shown else "(nothing of the project)"))
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mypy", action="store_true", help="also count mypy --strict errors on the core (slow)")
    ap.add_argument("--draw", action="store_true", help="print the layer drawing docs/architecture.md holds, and stop")
    ap.add_argument("--list", action="store_true", help="name every upward import, dict signature and store construction")
    args = ap.parse_args()
    if args.draw:
        print(layer_drawing(), end="")
        return
    flat = flat_modules()
    print(f"modules directly in cluster/: {len(flat)} ({', '.join(flat)})")
    cycles = import_cycles()
    print(f"import cycles (AST, imports inside functions included): {len(cycles)}")
    for c in cycles:
        print("  " + " <-> ".join(c))
    print(f"dict[str, Any] in the config package: {spec_dict_any_count()}")
    up = upward_imports()
    print(f"imports that run upward (LAYERS): {len(up)}")
    for a, b in up if args.list else []:
        print(f"  {a} -> {b}")
    sigs = dict_any_signatures()
    print(f"public signatures with dict/Mapping[str, Any]: {len(sigs)}")
    for sig in sigs if args.list else []:
        print(f"  {sig}")
    ifaces = interface_sizes()
    print("largest interfaces (Protocol/ABC, public methods): "
          + ", ".join(f"{name.split(':')[-1]} {n}" for name, n in ifaces[:5]))
    sizes = module_sizes()
    print(f"largest module: {sizes[0][0]} {sizes[0][1]} lines; modules over 500 lines: "
          + str(sum(1 for _, n in sizes if n > 500)) + "; over 300: " + str(sum(1 for _, n in sizes if n > 300)))
    stores = store_constructions()
    print(f"DatasetStore constructions outside dataset/: {len(stores)}")
    for s_ in stores if args.list else []:
        print(f"  {s_}")
    if args.mypy:
        print(f"mypy --strict errors on the core: {mypy_strict_errors()}")


if __name__ == "__main__":
    main()
