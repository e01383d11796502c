"""compare_by_category's intervals do not depend on the order DuckDB returns rows in where its SQL set none: on the
same dataset, `results compare --by category` (and the report's category table) gave other intervals from one call
to the next (GROUP BY rows come back in hash order), found by tests/golden/test_golden.py."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from cluster.analysis import categories
from cluster.analysis.results import Results
from tests.unit.analysis.test_categories import _build

_ORDERED = re.compile(r"ORDER BY [^()]*$", re.S)


class _Unordered:
    """A connection whose results come back reversed unless the query ends with its own ORDER BY: an order DuckDB
    is free to return (and, with several threads, does)."""

    def __init__(self, con: Any) -> None:
        self.con = con

    def execute(self, sql: str, params: Any = None) -> "_Unordered":
        self.frame = self.con.execute(sql, params).df()
        if not _ORDERED.search(sql.strip()):
            self.frame = self.frame.iloc[::-1].reset_index(drop=True)
        return self

    def df(self) -> pd.DataFrame:
        return self.frame

    def close(self) -> None:
        self.con.close()


def test_category_intervals_do_not_follow_duckdbs_row_order(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    _build(str(tmp_path))
    results = Results.open(str(tmp_path), "cats")
    as_read = categories.compare_by_category(results, n_boot=300)
    real_connect = categories.connect
    monkeypatch.setattr(categories, "connect", lambda r: _Unordered(real_connect(r)))
    reversed_rows = categories.compare_by_category(results, n_boot=300)
    pd.testing.assert_frame_equal(as_read, reversed_rows)
