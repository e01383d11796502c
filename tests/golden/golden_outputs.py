"""Every output the golden test holds, rendered from the stored dataset tests/golden/data/golden-sim: name -> text."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import shutil
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterator

from matplotlib.figure import Figure
from typer.testing import CliRunner

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
"""The stored dataset root (one experiment, golden-sim); never written to: the outputs are rendered from a copy."""
EXPECTED = HERE / "expected"
EXPERIMENT = "golden-sim"
ROOT = "data"
"""The dataset root as every command is given it: relative to the working directory the outputs are rendered in,
so no absolute path (whose length would move the 80-column wrapping) reaches an output."""
COLUMNS = "80"
FIGURE_DIGITS = 12
"""Significant digits a figure's plotted numbers are recorded with (far below a pixel; CLI outputs are exact)."""

CLI_OUTPUTS: dict[str, list[str]] = {
    "show.txt": ["show"],
    "show.json": ["show", "--format", "json"],
    "show.csv": ["show", "--format", "csv"],
    "compare.txt": ["compare"],
    "compare.json": ["compare", "--format", "json"],
    "compare.csv": ["compare", "--format", "csv"],
    "compare_ci.txt": ["compare", "--ci"],
    "compare_ci.json": ["compare", "--ci", "--format", "json"],
    "compare_ci.csv": ["compare", "--ci", "--format", "csv"],
    "compare_by_category.txt": ["compare", "--by", "category"],
    "compare_by_category.json": ["compare", "--by", "category", "--format", "json"],
    "compare_by_position.txt": ["compare", "--by", "position"],
    "compare_by_position.json": ["compare", "--by", "position", "--format", "json"],
    "recommend.txt": ["recommend"],
    "recommend.json": ["recommend", "--format", "json"],
}
"""Output file -> `sglbench results ARGS EXPERIMENT --root data` (the experiment name is inserted after ARGS[0])."""


@contextlib.contextmanager
def dataset_copy(workdir: Path) -> Iterator[None]:
    """Copy the stored dataset to `workdir`/data and work there (a command that writes, e.g. the report, writes in
    the copy), with the terminal width fixed; the previous directory and environment are restored after."""
    shutil.copytree(DATA, workdir / ROOT)
    before_dir, before_cols = os.getcwd(), os.environ.get("COLUMNS")
    os.chdir(workdir)
    os.environ["COLUMNS"] = COLUMNS
    try:
        yield
    finally:
        os.chdir(before_dir)
        if before_cols is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = before_cols


def cli(args: list[str]) -> str:
    from cluster.cli import app

    argv = ["results", args[0], EXPERIMENT, *args[1:], "--root", ROOT]
    res = CliRunner().invoke(app, argv, env={"COLUMNS": COLUMNS})
    if res.exit_code != 0:
        raise AssertionError(f"sglbench {' '.join(argv)} exited {res.exit_code}:\n{res.output}")
    return res.output


def run_summary() -> str:
    """What `sglbench run` printed at its end over this dataset (as into a pipe or a log: the demo's tables)."""
    import pyarrow.parquet as pq

    from cluster.commands.results import print_run_summary
    from cluster.config.experiment import ExperimentSpec

    doc = json.loads((Path(ROOT) / EXPERIMENT / "experiment.json").read_text())
    spec = ExperimentSpec.model_validate(doc["spec"])
    statuses = [str(s) for f in sorted((Path(ROOT) / EXPERIMENT / "runs").rglob("*.parquet"))
                for s in pq.read_table(f, columns=["status"]).column("status").to_pylist()]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print_run_summary(ROOT, spec, Counter(statuses), piped=True)
    return out.getvalue()


def _num(x: Any) -> Any:
    if isinstance(x, (list, tuple)):
        return [_num(v) for v in x]
    if hasattr(x, "tolist"):
        return _num(x.tolist())
    if isinstance(x, float):
        return x if not math.isfinite(x) or x == 0 else float(f"{x:.{FIGURE_DIGITS}g}")
    return x


def _artists(ax: Any) -> dict[str, Any]:
    """What a reader of one axes sees: titles, labels, scales, limits, ticks, and the data of every artist."""
    from matplotlib.collections import LineCollection, PathCollection, PolyCollection
    from matplotlib.patches import Rectangle

    collections: list[dict[str, Any]] = []
    for c in ax.collections:
        if isinstance(c, LineCollection):
            collections.append({"lines": [_num(s) for s in c.get_segments()], "label": c.get_label()})
        elif isinstance(c, PathCollection):
            collections.append({"points": _num(c.get_offsets()), "label": c.get_label()})
        elif isinstance(c, PolyCollection):
            collections.append({"polygons": [_num(p.vertices) for p in c.get_paths()], "label": c.get_label()})
        else:
            collections.append({"kind": type(c).__name__, "label": c.get_label()})
    patches = [{"bar": _num([p.get_x(), p.get_y(), p.get_width(), p.get_height()]), "label": p.get_label()}
               if isinstance(p, Rectangle) else {"kind": type(p).__name__} for p in ax.patches]
    legend = ax.get_legend()
    return {
        "title": [ax.get_title(loc) for loc in ("left", "center", "right")],
        "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(),
        "scale": [ax.get_xscale(), ax.get_yscale()],
        "xlim": _num(ax.get_xlim()), "ylim": _num(ax.get_ylim()),
        "xticks": [_num(ax.get_xticks()), [t.get_text() for t in ax.get_xticklabels()]],
        "yticks": [_num(ax.get_yticks()), [t.get_text() for t in ax.get_yticklabels()]],
        "lines": [{"xy": _num(line.get_xydata()), "label": line.get_label()} for line in ax.get_lines()],
        "patches": patches,
        "collections": collections,
        "texts": [[t.get_text(), _num(t.get_position())] for t in ax.texts],
        "images": [_num(im.get_array()) for im in ax.images],
        "legend": [t.get_text() for t in legend.get_texts()] if legend is not None else None,
    }


def figure_numbers(fig: Figure) -> dict[str, Any]:
    return {"suptitle": fig.get_suptitle(), "texts": [t.get_text() for t in fig.texts], "axes": [_artists(ax) for ax in fig.axes]}


def report() -> tuple[str, str]:
    """`sglbench results report` into ./report: its index.html (the PNGs are named, not embedded) and, per figure
    saved, in order, the numbers it was drawn from. Figures are recorded, not rasterised (PNG bytes are not what the
    test holds, and rasterising was 60 % of the test's time), so the PNG files are written empty."""
    figures: list[dict[str, Any]] = []
    save: Callable[..., Any] = Figure.savefig

    def record(fig: Figure, *args: Any, **kwargs: Any) -> None:
        figures.append(figure_numbers(fig))

    Figure.savefig = record  # type: ignore[method-assign, assignment]
    try:
        out = cli(["report", "--out", "report"])
    finally:
        Figure.savefig = save  # type: ignore[method-assign]
    pngs = sorted(p.name for p in Path("report").glob("*.png"))
    html = Path("report/index.html").read_text()
    return out + html, json.dumps({"png_files": pngs, "figures": figures}, indent=1, sort_keys=True) + "\n"


ANSI_STYLE = re.compile(r"\x1b\[[0-9;]*m")
"""Colour codes: rich adds them where the environment asks for a terminal (FORCE_COLOR, TTY_COMPATIBLE, read when
its consoles are made at import); like the width, the terminal's business, not a figure."""


def render_all() -> dict[str, str]:
    """Every output, by its expected file's name; call inside dataset_copy()."""
    outputs = {name: cli(args) for name, args in CLI_OUTPUTS.items()}
    outputs["run_summary.txt"] = run_summary()
    outputs["report.html"], outputs["report_figures.json"] = report()
    return {name: ANSI_STYLE.sub("", text) for name, text in outputs.items()}
