"""DuckDB views over an experiment's dataset, the per-load-point compare tables, and free SQL."""

from __future__ import annotations

import re
from typing import Iterable, Optional

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pads

from cluster.analysis.metric_catalog import declared, with_means
from cluster.analysis.point_marks import with_marks
from cluster.analysis.request_metrics import chunk_gaps_view_sql, request_metrics_view_sql
from cluster.analysis.results import Results
from cluster.dataset.store import TABLE_SCHEMAS, DatasetStore, StoreError
from cluster.errors import UserError, first_line

BASE_TABLES = ("runs", "requests", "chunks")

VIEWS: dict[str, str] = {
    "runs": "one row per run: status, reasons, provenance and every metric as m_<name>",
    "requests": "one row per request: send times, first/last chunk, token counts, spec_verify_ct, error",
    "chunks": "one row per token-bearing chunk: arrival_ns, tokens",
    "variants": "one row per variant: engine, tp, family, speculative settings, baseline flag, run counts",
    "request_metrics": "one row per request: category, session_index, turn, ok, cached_tokens, prompt_tokens, "
                       "output_tokens, ttft_ms, e2e_ms, tpot_ms, accept_length, lag_ms (the definitions of "
                       "cluster/analysis/request_metrics.py)",
    "chunk_gaps": "one row per gap between token-bearing chunks of an ok request: itl_chunk_ms, tokens, itl_token_ms",
    "correctness": "the correctness gate's answers and verdicts (when the experiment ran a gate)",
    "server_metrics": "the server's /metrics scraped during each window (when scraped)",
    "gpu_metrics": "GPU telemetry samples of each window: power, energy counter, clocks, temperature, throttle reasons",
    "kernel_profile": "top kernels of each profiled variant, grouped moe/gemm/attention/communication/other",
}
"""Every view `results query` may read (runs, requests, chunks always; the others when their files exist)."""

VARIANTS_VIEW_SQL = """
CREATE VIEW variants AS
SELECT variant,
       any_value(engine) AS engine,
       any_value(tp) AS tp,
       any_value(variant_family) AS family,
       any_value(spec_algorithm) AS spec_algorithm,
       any_value(spec_num_steps) AS spec_num_steps,
       any_value(spec_num_draft_tokens) AS spec_num_draft_tokens,
       bool_or(coalesce(is_baseline, false)) AS is_baseline,
       count(*) AS n_runs,
       count(*) FILTER (WHERE status = 'ok') AS n_ok,
       count(*) FILTER (WHERE status = 'invalid') AS n_invalid,
       count(*) FILTER (WHERE status = 'failed') AS n_failed,
       min(order_index) AS first_order_index
FROM runs GROUP BY variant
"""
"""One row per variant: engine, tp, family, speculative settings, baseline flag, run counts by status."""

def compare_metrics() -> tuple[tuple[str, str], ...]:
    """(compare-table column, runs-table column) of every metric declared with a Mean (metric_catalog), in its
    place: each is the mean over a point's ok repeats."""
    return tuple((m.name, m.stored) for m in with_means())


POINT_KEYS = ("workload", "load_kind", "load_value")


class QueryError(UserError):
    """Bad SQL, a statement that is not one read-only SELECT, or a baseline that is not a variant."""


def _sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


VIEW_READS: dict[str, tuple[str, ...]] = {"variants": ("runs",), "request_metrics": ("requests",),
                                          "chunk_gaps": ("chunks", "requests")}
"""The tables each derived view reads (the views of request_metrics.py and VARIANTS_VIEW_SQL)."""
_DYNAMIC_SQL_RE = re.compile(r"\b(query|query_table)\b", re.IGNORECASE)


def tables_read_by(sql: str, tables: Iterable[str]) -> set[str]:
    """The tables `sql` may read: each whose name, or a derived view reading it, appears in it as a word (a
    mention inside a string counts too: reading too much is safe); all of them when it builds a table name at
    run time (DuckDB's query/query_table functions)."""
    names = set(tables)
    if _DYNAMIC_SQL_RE.search(sql):
        return names
    words = {w.lower() for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", sql)}
    out = {t for t in names if t in words}
    for view, reads in VIEW_READS.items():
        if view in words:
            out.update(t for t in reads if t in names)
    return out


def connect(results: Results, reads: Optional[str] = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with one view per table (runs, requests, chunks, and any others such as
    correctness or server_metrics when their files exist), plus the derived views `variants`, `request_metrics`
    and `chunk_gaps` (the last two generated from the definitions in request_metrics.py).

    Only committed runs' files are visible, each checked by the store (a foreign or corrupt file is a StoreError
    naming it) and, since DuckDB checks no page checksum, decoded once with its checksums verified before DuckDB
    reads it: every table's files, or with `reads` (the SQL the connection is for) those of the tables it may
    read (tables_read_by), so `results show` decodes no chunk. A table whose files give a column two types is
    refused too. Local datasets are scanned with read_parquet (union_by_name, the variant from each file's
    partition directory); other filesystems lazily through pyarrow datasets. Once the views
    exist the connection is locked down: external access off (only the dataset's own files stay readable) and the
    configuration locked, so no statement can reach another file or switch that back on.
    """
    store = results.store
    con = duckdb.connect()
    allowed: list[str] = []
    checked = {table: store.checked_files(table) for table in sorted(set(BASE_TABLES) | set(store.tables()))}
    for table, found in checked.items():
        store.one_schema(table, found)  # DuckDB's union_by_name would cast a conflicting column silently
    tables = {table: [p for p, _ in found] for table, found in checked.items()}
    for table in tables_read_by(reads, tables) if reads is not None else tables:
        store.verify_files(tables[table])
    try:
        for table, files in tables.items():
            _add_view(con, store, table, files)
            allowed += files if store.is_local else []
        con.execute(VARIANTS_VIEW_SQL)
        present = frozenset(d[0] for d in con.execute("SELECT * FROM requests LIMIT 0").description)
        con.execute(request_metrics_view_sql(present))
        con.execute(chunk_gaps_view_sql())
    except duckdb.Error as e:  # files that passed every check but do not fit one view (an unknown table's types)
        con.close()
        raise StoreError(f"{store.base}: the dataset's files cannot be read as views: {first_line(e)}",
                         file=store.base, expected="files written by sglbench") from None
    _lock_down(con, allowed)
    return con


def _add_view(con: duckdb.DuckDBPyConnection, store: DatasetStore, table: str, files: list[str]) -> None:
    if not files:
        empty = TABLE_SCHEMAS.get(table)
        if empty is not None:
            con.register(table, empty.empty_table())
        return
    # the variant comes from each file's own partition directory, never from hive partitioning, which would also
    # turn a `name=value` directory above the dataset (a root under /data/status=x/) into a column
    by_variant: dict[str, list[str]] = {}
    for f in files:
        by_variant.setdefault(f.rsplit("/", 2)[-2].split("=", 1)[1], []).append(f)
    parts = []
    known = TABLE_SCHEMAS.get(table)
    schema = pa.schema([f for f in known if f.name != "variant"]) if known is not None else None
    for i, (variant, group) in enumerate(by_variant.items()):
        if store.is_local:
            source = (f"read_parquet([{', '.join(_sql_str(f) for f in group)}], hive_partitioning = false, "
                      "union_by_name = true)")
        else:  # scanned lazily through pyarrow
            source = f"_{table}_{i}"
            con.register(source, pads.dataset(group, filesystem=store.fs, format="parquet", schema=schema))
        parts.append(f"SELECT *, {_sql_str(variant)} AS variant FROM {source}")
    con.execute(f"CREATE VIEW {table} AS " + " UNION ALL BY NAME ".join(parts))


def _lock_down(con: duckdb.DuckDBPyConnection, readable: list[str]) -> None:
    """DuckDB's own guards: no file system access but the dataset's own files, and no setting can be changed back."""
    con.execute("SET allowed_paths = ?", [readable])
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")




def read_only_statement(sql: str) -> str:
    """`sql` when it is exactly one SELECT (WITH, FROM-first, VALUES, DESCRIBE and SUMMARIZE parse as SELECT);
    QueryError for anything else: COPY, ATTACH, INSTALL/LOAD, DDL, DML, PRAGMA, SET, EXPLAIN, several statements."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as e:
        raise QueryError(f"SQL error: {first_line(e)}", field="sql", expected="one SELECT") from None
    if len(statements) != 1:
        raise QueryError(f"results query runs exactly one statement, got {len(statements)}", field="sql",
                         expected="one SELECT over the views " + ", ".join(VIEWS))
    kind = statements[0].type
    if kind != duckdb.StatementType.SELECT:
        raise QueryError(f"results query is read-only: {kind.name} statements are refused (no file writes, ATTACH, "
                         "INSTALL/LOAD, DDL, PRAGMA or SET)", field="sql",
                         expected="one SELECT over the views " + ", ".join(VIEWS))
    return sql


def query(results: Results, sql: str) -> pd.DataFrame:
    """Run one read-only SELECT against the experiment's views (files outside the dataset are out of reach)."""
    read_only_statement(sql)
    con = connect(results, reads=sql)
    try:
        return con.execute(sql).df()
    except duckdb.Error as e:
        raise QueryError(f"SQL error: {first_line(e)}", field="sql") from None
    finally:
        con.close()


def compare_table(results: Results, baseline: Optional[str] = None) -> pd.DataFrame:
    """Per load point and variant: run counts, mean metrics over ok repeats, and output tok/s speedup vs baseline.

    The baseline is the variant whose runs have is_baseline (overridden by `baseline`). Rows are ordered by
    workload, load kind and value, then by the variant's first run in the plan.
    """
    from cluster.analysis.per_gpu import GPUS_NOTE, cell_facts, with_gpus_notes, with_per_gpu

    df = results.runs()
    cols = list(POINT_KEYS) + ["variant", "engine", "gpus", "launched_by_sglbench", "is_baseline", "n_runs",
                               "n_failed", "n_invalid"]
    shown = compare_metrics()
    cols += [c for c, _ in shown] + ["speedup_output_tok_s"]
    if df.empty:
        return pd.DataFrame(columns=cols + ["steady_short", "saturated", GPUS_NOTE])
    per_gpu_names = {m.name for m in declared("per_gpu")}
    metrics = [(c, m) for c, m in shown if c not in per_gpu_names]  # divided from the means below
    df = df.sort_values("order_index", kind="stable")
    variants = list(dict.fromkeys(df["variant"]))
    baseline = resolve_baseline(df, baseline, results.experiment)
    for _, mcol in metrics:
        if mcol not in df.columns:
            df[mcol] = float("nan")
    df["_ok"] = df["status"] == "ok"
    keys = list(POINT_KEYS) + ["variant"]
    counts = df.groupby(keys, sort=False).agg(
        engine_name=("engine", "first"),  # not `engine=`: that is agg()'s own keyword
        n_runs=("_ok", "sum"),
        n_failed=("status", lambda s: int((s == "failed").sum())),
        n_invalid=("status", lambda s: int((s == "invalid").sum())),
    )
    ok = df[df["_ok"]]
    means = ok.groupby(keys, sort=False)[[m for _, m in metrics]].mean()
    means.columns = [c for c, _ in metrics]
    out = counts.join(means, how="left").reset_index().rename(columns={"engine_name": "engine"})
    out = with_per_gpu(out.merge(cell_facts(df, keys), on=keys, how="left"))
    return with_gpus_notes(with_marks(_with_speedup(out, baseline, variants)[cols], df))


def resolve_baseline(runs: pd.DataFrame, baseline: Optional[str], experiment: str) -> Optional[str]:
    """The one baseline rule: `baseline` when given (it must be one of the runs' variants), else the first variant
    in plan order whose rows are marked is_baseline, else None. `runs` needs variant and is_baseline columns."""
    if baseline is None:
        marked = runs.loc[runs["is_baseline"].fillna(False).astype(bool), "variant"].unique().tolist()
        return str(marked[0]) if marked else None
    variants = list(dict.fromkeys(runs["variant"]))
    if baseline not in variants:
        raise QueryError(f"baseline {baseline!r} is not a variant of {experiment!r}; variants: {', '.join(variants)}",
                         field="--baseline", expected="one of " + ", ".join(variants))
    return baseline


def baseline_of(table: pd.DataFrame) -> Optional[str]:
    """The baseline variant of a compare table: its rows marked is_baseline (None when none is)."""
    if table.empty or "is_baseline" not in table.columns:
        return None
    marked = table.loc[table["is_baseline"].fillna(False).astype(bool), "variant"]
    return str(marked.iloc[0]) if len(marked) else None


def _with_speedup(df: pd.DataFrame, baseline: Optional[str], variants: list[str]) -> pd.DataFrame:
    """Mark the baseline, add output tok/s speedup over it at the same load point, order rows by point then plan."""
    df["is_baseline"] = df["variant"] == baseline
    base = df.loc[df["is_baseline"], list(POINT_KEYS) + ["output_tok_s"]].rename(
        columns={"output_tok_s": "_base_tok_s"})
    df = df.merge(base, on=list(POINT_KEYS), how="left")
    df["speedup_output_tok_s"] = df["output_tok_s"] / df["_base_tok_s"]
    df["_vorder"] = df["variant"].map({v: i for i, v in enumerate(variants)})
    df = df.sort_values(list(POINT_KEYS) + ["_vorder"], kind="stable").reset_index(drop=True)
    df["n_runs"] = df["n_runs"].astype(int)
    return df


_REQUEST_COMPARE_SQL = """
WITH per_run AS (
    SELECT run_key,
           count(*) AS n_ok,
           sum(output_tokens) AS out_tokens,
           -- one sort per run for both percentiles (linear interpolation like numpy)
           quantile_cont(ttft_ms, [0.5, 0.99]) AS ttft_ms_q,
           avg(tpot_ms) AS tpot_ms_mean
    FROM request_metrics WHERE ok GROUP BY run_key
)
SELECT r.workload, r.load_kind, r.load_value, r.variant,
       any_value(r.engine) AS engine,
       bool_or(coalesce(r.is_baseline, false)) AS is_baseline,
       min(r.order_index) AS first_order_index,
       count(*) AS n_runs,
       avg(p.n_ok / r.duration_s) AS request_throughput_rps,
       avg(p.out_tokens / r.duration_s) AS output_tok_s,
       avg(p.ttft_ms_q[1]) AS ttft_ms_p50,
       avg(p.ttft_ms_q[2]) AS ttft_ms_p99,
       avg(p.tpot_ms_mean) AS tpot_ms_mean
FROM runs r JOIN per_run p USING (run_key)
WHERE r.status = 'ok' AND r.duration_s > 0
GROUP BY r.workload, r.load_kind, r.load_value, r.variant
"""

REQUEST_COMPARE_COLUMNS = ("request_throughput_rps", "output_tok_s", "ttft_ms_p50", "ttft_ms_p99", "tpot_ms_mean")
"""Point estimates compare_from_requests computes from the request rows (per run, then the mean over ok runs)."""


def compare_from_requests(results: Results, baseline: Optional[str] = None) -> pd.DataFrame:
    """Per load point and variant, point estimates computed in DuckDB from the `requests` rows.

    Per ok run, from the `request_metrics` view (the same definitions as the runs table's m_ columns): TTFT
    p50/p99, TPOT mean (requests with > 1 token), output tok/s and req/s over the run's duration_s; then the mean
    over ok runs, and the output tok/s speedup over the baseline. Only the needed columns are scanned.
    """
    con = connect(results, reads=_REQUEST_COMPARE_SQL)
    try:
        df = con.execute(_REQUEST_COMPARE_SQL).df()
    finally:
        con.close()
    cols = list(POINT_KEYS) + ["variant", "engine", "is_baseline", "n_runs", *REQUEST_COMPARE_COLUMNS,
                               "speedup_output_tok_s"]
    if df.empty:
        return pd.DataFrame(columns=cols)
    df = df.sort_values("first_order_index", kind="stable")
    variants = list(dict.fromkeys(df["variant"]))
    baseline = resolve_baseline(df, baseline, results.experiment)
    return _with_speedup(df, baseline, variants)[cols]
