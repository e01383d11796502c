"""The window's job travels as one typed record from the driver to the load generator: no function on that path
takes more than MAX_PARAMS parameters (AST, like test_layout.py; self and cls are not counted, *args and **kw are)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MAX_PARAMS = 8

PATH = [
    # the driver: one run's window, its shards started on the load actors
    ("cluster/distributed/point_run.py", "PointRunner._stream_window"),
    ("cluster/distributed/handles.py", "LoadHandle.prepare"),
    ("cluster/distributed/handles.py", "LoadHandle.stream"),
    # the load actor
    ("cluster/distributed/actors.py", "LoadActorImpl.prepare"),
    ("cluster/distributed/actors.py", "LoadActorImpl.run_point_stream"),
    # the load generator
    ("cluster/loadgen/runner.py", "warmup"),
    ("cluster/loadgen/runner.py", "run_load_point"),
    ("cluster/loadgen/runner.py", "run_window"),
    ("cluster/loadgen/runner.py", "_dispatch"),
    ("cluster/loadgen/runner.py", "_dispatch.one"),
    ("cluster/loadgen/sessions.py", "dispatch_sessions"),
]


def _functions(tree: ast.AST, prefix: str = "") -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    """Every function by its dotted name inside the module (methods and nested functions included)."""
    out: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[prefix + node.name] = node
            out.update(_functions(node, f"{prefix}{node.name}."))
        elif isinstance(node, ast.ClassDef):
            out.update(_functions(node, f"{prefix}{node.name}."))
    return out


def _param_count(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = fn.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    names = [n for n in names if n not in ("self", "cls")]
    return len(names) + (a.vararg is not None) + (a.kwarg is not None)


def path_params() -> dict[str, int]:
    """Parameters of each function on the driver-to-load-generator path, by 'file:function'."""
    counts: dict[str, int] = {}
    trees: dict[str, dict[str, ast.FunctionDef | ast.AsyncFunctionDef]] = {}
    for path, name in PATH:
        if path not in trees:
            trees[path] = _functions(ast.parse((REPO / path).read_text(), filename=path))
        assert name in trees[path], f"{path} has no function {name}: update PATH with the window's new route"
        counts[f"{path}:{name}"] = _param_count(trees[path][name])
    return counts


def test_no_function_on_the_window_path_takes_more_than_eight_parameters() -> None:
    counts = path_params()
    longest = max(counts, key=lambda k: counts[k])
    assert counts[longest] <= MAX_PARAMS, f"longest parameter list on the window path: {longest} {counts[longest]}; " \
                                          f"all: {counts}"


def test_the_counter_counts_what_it_says() -> None:
    fn = ast.parse("class A:\n    def f(self, a, b=1, *c, d, **e): pass\n").body[0].body[0]  # type: ignore[attr-defined]
    assert _param_count(fn) == 5
