"""One experiment's results opened once per command: the store, the runs table and experiment.json, handed on.

Every reading command (compare, capacity, regress, report, query, recommend) opens one `Results` and hands it to
the analysis functions, which never take a `(root, experiment)` pair and never build a store of their own: the
dataset's files are listed and checked through the one store this object holds and the runs table is decoded
once.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional, Sequence, TypedDict, TypeVar

import pandas as pd
import pyarrow as pa
from pydantic import BaseModel

from cluster.dataset.root import StoreError
from cluster.dataset.store import DatasetStore, ExperimentNotFound

StoredModel = TypeVar("StoredModel", bound=BaseModel)

_UNREAD = object()

REPEAT_IDENTITY = ("variant", "workload", "load_kind", "load_value", "repeat")
"""What names one repeat of a point. The run key hashes the declaration too (variant args, workload, seed), so two
runs rows equal on these with different run keys were run under two declarations into one output."""


class ServerArgsRow(TypedDict, total=False):
    """A runs row's columns the resolved-args readers take (comparison.py); each present when asked for."""

    variant: str
    status: str
    is_baseline: Optional[bool]
    resolved_args_json: Optional[str]


class Results:
    """One experiment under a dataset root, as the reading commands see it (build with Results.open)."""

    def __init__(self, store: DatasetStore) -> None:
        self.store = store
        self._runs: Optional[pa.Table] = None
        self._meta: Any = _UNREAD

    @classmethod
    def open(cls, root: str, experiment: str) -> Results:
        """The experiment's results; ExperimentNotFound when it has no directory under `root`."""
        store = DatasetStore(root, experiment)
        if not store.exists():
            raise ExperimentNotFound(f"experiment {experiment!r} not found under {root!r}")
        return cls(store)

    @property
    def root(self) -> str:
        return self.store.root

    @property
    def experiment(self) -> str:
        return self.store.experiment

    def label(self) -> str:
        """The experiment's name, prefixed by its root when that is not the default one ('results')."""
        return self.experiment if self.root in ("", "results") else f"{self.root}:{self.experiment}"

    def runs_table(self) -> pa.Table:
        """The runs table of committed runs, read (and its files checked) once."""
        if self._runs is None:
            self._runs = self.store.read_table("runs")
        return self._runs

    def runs(self) -> pd.DataFrame:
        """The runs table as a fresh DataFrame (the caller may add columns to it), for the commands that aggregate
        repeats; StoreError when two runs claim one repeat of a point (one_run_per_repeat)."""
        df = self.runs_table().to_pandas()
        one_run_per_repeat(df, f"{self.store.base}/runs")
        return df

    def server_args_rows(self, columns: Sequence[str]) -> list[ServerArgsRow]:
        """The runs rows' `columns` (of ServerArgsRow's) as Python values; KeyError naming one the table lacks."""
        rows: list[ServerArgsRow] = self.runs_table().select(list(columns)).to_pylist()
        return rows

    # free-form JSON stored as given: experiment.json (the spec, the probe reports)
    def meta(self) -> Optional[dict[str, Any]]:
        """experiment.json's object (None when there is none), read once; StoreError naming it when unreadable."""
        if self._meta is _UNREAD:
            self._meta = self.store.read_experiment_meta()
        meta: Optional[dict[str, Any]] = self._meta  # free-form JSON stored as given: experiment.json
        return meta

    def stored_spec(self, model: type[StoredModel], *keys: str) -> Optional[StoredModel]:
        """experiment.json's spec (or its part under `keys`) validated as `model` (DatasetStore.read_stored_spec)."""
        return self.store.read_stored_spec(model, *keys)

    def table(self, name: str, columns: Optional[Iterable[str]] = None) -> pa.Table:
        """Another table of the experiment (gpu_metrics, kernel_profile, ...), its files checked by the store."""
        return self.store.read_table(name, columns)


def one_run_per_repeat(runs: pd.DataFrame, where: str) -> None:
    """Refuse runs rows where two runs claim one repeat: their mean (and every interval over repeats) would mix two
    set-ups under one variant name while counting one measurement twice, and nothing in the rows says which one the
    user meant. Refused rather than marked: a mark beside a mean still prints the mean. `results show` and `results
    query` read the rows as they are (they do not aggregate), so the conflict can be looked at."""
    if runs.empty:
        return
    keys = list(REPEAT_IDENTITY)
    claimed = runs[runs.duplicated(keys, keep=False)]
    if claimed.empty:
        return
    groups = list(claimed.groupby(keys, sort=False))
    (variant, workload, kind, value, repeat), first = groups[0]
    both = " and ".join(f"{k} ({s})" for k, s in zip(first["run_key"], first["status"]))
    more = f" ({len(groups) - 1} more repeat(s) likewise)" if len(groups) > 1 else ""
    raise StoreError(f"{where}: runs {both} claim the same repeat {repeat} of variant {variant!r}, workload "
                     f"{workload!r}, {kind} {value:g}{more}: their run keys differ, so they ran under two "
                     "declarations (the spec changed between runs into this output) and a mean would mix them; "
                     "delete the stale run's files (<run key>.parquet under each table) or run into a fresh output",
                     file=where, field="repeat", expected="one run per repeat of a point")
