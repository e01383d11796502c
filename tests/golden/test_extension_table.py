"""docs/architecture.md's extension-cost table (issue 36): each `before` count is its list, each `after` its target.

WHERE THE NUMBERS COME FROM
- before: measured on throwaway branches from a8528d0 (never merged; the method is in the doc's section).
- after: the coordinator fills the `after` cells from the helpers' throwaway extensions written as tests on the
  refactored code: the engine helper's throwaway engine (one module + registration + test), the metric helper's
  throwaway metric (one declaration + test), the shapes helper's throwaway load shape and prompt source (one module
  + test each). Write an `after` cell as the before cell is written: `**N**` then the N files as `path` items
  (generated files after '; generated:', not counted). Until a cell is filled it reads `pending` and its check
  is skipped, saying so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
HEADING = "## Extension cost: the files one change touches (issue 36)"
KINDS = ("engine adapter", "metric", "load shape", "prompt source")
TARGETS = {"engine adapter": 3, "metric": 2, "load shape": 2, "prompt source": 2}
"""Issue 36's targets in files edited by hand: an engine <= 3 (its module, its registration, its tests); a metric one
declaration plus its test; a load shape or a prompt source one module plus its test."""


@dataclass(frozen=True)
class Cell:
    count: int
    files: tuple[str, ...]
    """The files edited by hand (those before '; generated:')."""


@dataclass(frozen=True)
class Row:
    kind: str
    before: Cell
    after: Optional[Cell]
    target: int


def cell(text: str) -> Optional[Cell]:
    """A `**N** `path` ...; generated: ...` cell (None for `pending`)."""
    text = text.strip()
    if text == "pending":
        return None
    m = re.match(r"\*\*(\d+)\*\*", text)
    if m is None:
        raise ValueError(f"a count cell starts with **N** or reads 'pending', got {text[:60]!r}")
    by_hand = text.split("; generated:")[0]
    return Cell(int(m.group(1)), tuple(re.findall(r"`([^`]+\.[a-z]+)`", by_hand)))


def table(doc: str) -> list[Row]:
    if HEADING not in doc:
        raise ValueError(f"{DOC.name} has no section {HEADING!r}")
    section = doc.split(HEADING, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| extension")]
    out = []
    for line in rows:
        kind, before, after, target = (c.strip() for c in line.strip().strip("|").split("|"))
        before_cell = cell(before)
        assert before_cell is not None, f"{kind}: the before count is measured, never pending"
        t = re.match(r"\*\*(\d+)\*\*", target)
        assert t is not None, f"{kind}: the target cell starts with **N**"
        out.append(Row(kind, before_cell, cell(after), int(t.group(1))))
    return out


ROWS = {r.kind: r for r in table(DOC.read_text(encoding="utf-8"))}


def test_the_table_has_one_row_per_kind_with_the_issues_targets() -> None:
    assert tuple(ROWS) == KINDS
    assert {k: r.target for k, r in ROWS.items()} == TARGETS


@pytest.mark.parametrize("kind", KINDS)
def test_each_count_is_the_number_of_files_it_lists(kind: str) -> None:
    row = ROWS[kind]
    for name, c in (("before", row.before), ("after", row.after)):
        if c is not None:
            assert c.count == len(c.files) == len(set(c.files)), (kind, name, c)


@pytest.mark.parametrize("kind", KINDS)
def test_after_the_refactor_each_extension_meets_its_target(kind: str) -> None:
    row = ROWS[kind]
    if row.after is None:
        pytest.skip(f"{kind}: 'after' is pending (the coordinator fills it from the helpers' throwaway tests)")
    assert row.after.count <= row.target, (kind, row.after.files)
    assert row.after.count < row.before.count, kind


def test_the_parser_reads_counts_lists_and_pending() -> None:
    got = cell("**2** `cluster/a.py` (new), `tests/test_a.py`; generated: `docs/x.md`")
    assert got == Cell(2, ("cluster/a.py", "tests/test_a.py"))
    assert cell(" pending ") is None
    with pytest.raises(ValueError):
        cell("3 files")


@pytest.mark.parametrize("kind", KINDS)
def test_the_throwaway_extension_is_its_listed_files_alone(kind: str) -> None:
    """The `after` files exist, and no module of the package names the throwaway: it was added in those files alone
    (a registry keyed by a name no package file mentions)."""
    row = ROWS[kind]
    if row.after is None:
        pytest.skip(f"{kind}: 'after' is pending")
    repo = DOC.parents[1]
    for f in row.after.files:
        assert (repo / f).is_file(), f"{kind}: {f} is listed but absent"
    stems = {Path(f).stem for f in row.after.files if not Path(f).stem.startswith("test_")}
    for path in sorted((repo / "cluster").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for stem in stems:
            assert stem not in text, f"{kind}: {path.relative_to(repo)} names the throwaway {stem!r}"
