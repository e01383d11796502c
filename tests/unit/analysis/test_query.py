"""compare_table averages ok repeats and computes speedups; DuckDB views see only committed runs."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from cluster.plan.runs import make_plan
from cluster.kernel.runs import RunPlan
from cluster.analysis.query import QueryError, compare_from_requests, compare_table, connect, query
from cluster.kernel.records import RequestRecord
from cluster.loadgen.sink import request_batches
from cluster.config.loader import parse_spec_text
from cluster.dataset.store import DatasetStore, ExperimentNotFound
from cluster.analysis.results import Results
from cluster.kernel.run_row import RunRow

SPEC = """
version: 1
name: cmp
model: {path: sim://m, engine: sim, tp: 1}
variants:
  - name: base
  - name: nextn
    speculative: {algorithm: NEXTN, num_steps: [2]}
workloads:
  - {name: w1, input_tokens: 16, output_tokens: 8, num_requests: 4}
load: {concurrency: [1, 4]}
repeats: 2
"""


def _plans() -> dict[tuple[str, float, int], RunPlan]:
    return {(p.variant.name, p.load.value, p.repeat): p for p in make_plan(parse_spec_text(SPEC))}


def _records(n: int) -> tuple[pa.RecordBatch, pa.RecordBatch]:
    recs = [RequestRecord(request_index=i, intended_send_ns=0, actual_send_ns=0, prompt_tokens_sent=16,
                          max_tokens=8, chunk_arrival_ns=[5, 9], chunk_tokens=[1, 1], completion_tokens=2)
            for i in range(n)]
    return request_batches(recs)


@pytest.fixture
def root(tmp_path: Path) -> str:
    store = DatasetStore(str(tmp_path), "cmp")
    plans = _plans()
    tok = {("base", 1.0): [100.0, 110.0], ("base", 4.0): [300.0, 340.0],
           ("nextn", 1.0): [210.0, 230.0], ("nextn", 4.0): [480.0, 9999.0]}
    for (v, c, r), p in plans.items():
        status = "failed" if (v, c, r) == ("nextn", 4.0, 1) else "ok"
        m = {"output_tok_s": tok[(v, c)][r], "request_throughput_rps": 1.0 + r, "ttft_ms_p50": 10.0 * (r + 1),
             "accept_length": 2.5 if v == "nextn" else None}
        reqs, chunks = _records(2 + r)
        store.write_run(p, RunRow(status=status, metrics=m), reqs, chunks)
    # an uncommitted run's rows must stay invisible to the views
    stray = make_plan(parse_spec_text(SPEC.replace("repeats: 2", "repeats: 3")))[-1]
    store.write_table_rows("requests", stray, _records(7)[0])
    return str(tmp_path)


def test_compare_table_means_counts_and_speedup(root: str) -> None:
    df = compare_table(Results.open(root, "cmp"))
    assert list(df["variant"]) == ["base", "nextn", "base", "nextn"]
    assert list(df["load_value"]) == [1.0, 1.0, 4.0, 4.0]
    assert list(df["engine"]) == ["sim"] * 4
    r = df.set_index(["variant", "load_value"])
    assert r.loc[("base", 1.0), "output_tok_s"] == pytest.approx(105.0)
    assert r.loc[("nextn", 1.0), "output_tok_s"] == pytest.approx(220.0)
    assert r.loc[("nextn", 1.0), "speedup_output_tok_s"] == pytest.approx(220.0 / 105.0)
    assert r.loc[("base", 1.0), "speedup_output_tok_s"] == pytest.approx(1.0)
    # the failed repeat is counted, not averaged
    assert r.loc[("nextn", 4.0), "n_runs"] == 1 and r.loc[("nextn", 4.0), "n_failed"] == 1
    assert r.loc[("nextn", 4.0), "output_tok_s"] == pytest.approx(480.0)
    assert r.loc[("nextn", 4.0), "speedup_output_tok_s"] == pytest.approx(480.0 / 320.0)
    assert r.loc[("base", 4.0), "ttft_ms_p50"] == pytest.approx(15.0)
    assert r.loc[("nextn", 1.0), "accept_length"] == pytest.approx(2.5)
    assert pd_isna(r.loc[("base", 1.0), "accept_length"])
    assert bool(r.loc[("base", 1.0), "is_baseline"]) and not bool(r.loc[("nextn", 1.0), "is_baseline"])


def pd_isna(x: object) -> bool:
    import pandas as pd

    return bool(pd.isna(x))


def test_baseline_override(root: str) -> None:
    df = compare_table(Results.open(root, "cmp"), baseline="nextn").set_index(["variant", "load_value"])
    assert df.loc[("base", 1.0), "speedup_output_tok_s"] == pytest.approx(105.0 / 220.0)
    with pytest.raises(QueryError, match="not a variant"):
        compare_table(Results.open(root, "cmp"), baseline="nope")


def test_views_and_free_sql(root: str) -> None:
    df = query(Results.open(root, "cmp"), "SELECT variant, count(*) AS n FROM requests GROUP BY variant ORDER BY variant")
    # base: repeats give 2 + 3 rows per load point → 10; nextn the same; the stray uncommitted run is invisible
    assert df.to_dict("records") == [{"variant": "base", "n": 10}, {"variant": "nextn", "n": 10}]
    con = connect(Results.open(root, "cmp"))
    try:
        assert con.execute("SELECT count(*) FROM runs").fetchone() == (8,)
        assert con.execute("SELECT DISTINCT schema_version FROM chunks").fetchall() == [(1,)]
    finally:
        con.close()


def test_errors(root: str, tmp_path: Path) -> None:
    with pytest.raises(QueryError, match="SQL error"):
        query(Results.open(root, "cmp"), "SELEC nonsense")
    with pytest.raises(ExperimentNotFound):
        compare_table(Results.open(str(tmp_path / "nowhere"), "cmp"))


def test_variants_view(root: str) -> None:
    df = query(Results.open(root, "cmp"), "SELECT * FROM variants ORDER BY first_order_index")
    assert list(df["variant"]) == ["base", "nextn"]
    r = df.set_index("variant")
    assert bool(r.loc["base", "is_baseline"]) and not bool(r.loc["nextn", "is_baseline"])
    assert r.loc["nextn", "spec_algorithm"] == "NEXTN" and r.loc["nextn", "spec_num_steps"] == 2
    assert pd_isna(r.loc["base", "spec_num_steps"])
    assert (r.loc["nextn", "n_runs"], r.loc["nextn", "n_ok"], r.loc["nextn", "n_failed"]) == (4, 3, 1)
    assert r.loc["base", "n_ok"] == 4 and r.loc["base", "n_invalid"] == 0
    assert r.loc["base", "engine"] == "sim" and r.loc["base", "tp"] == 1 and r.loc["nextn", "family"] == "nextn"


def test_extra_tables_get_views(root: str) -> None:
    store = DatasetStore(root, "cmp")
    plan = _plans()[("base", 1.0, 0)]
    store.write_table_rows("correctness", plan, pa.table({"prompt_id": ["p1", "p2"], "passed": [True, False]}))
    df = query(Results.open(root, "cmp"), "SELECT variant, sum(CAST(passed AS INT)) AS n FROM correctness GROUP BY variant")
    assert df.to_dict("records") == [{"variant": "base", "n": 1}]
    with pytest.raises(QueryError, match="server_metrics"):
        query(Results.open(root, "cmp"), "SELECT * FROM server_metrics")


def test_compare_from_requests(tmp_path: Path) -> None:
    store = DatasetStore(str(tmp_path), "req")
    plans = _plans()
    # request i: send 0, first chunk at (10 + i) ms, 5 tokens ending 8 ms later → TPOT 2 ms; window 2 s
    for (v, c, r), p in plans.items():
        speed = 2.0 if v == "nextn" else 1.0
        recs = [RequestRecord(request_index=i, intended_send_ns=0, actual_send_ns=0, prompt_tokens_sent=16,
                              max_tokens=8, chunk_arrival_ns=[int((10 + i) * 1e6), int((10 + i + 8 / speed) * 1e6)],
                              chunk_tokens=[1, 4], completion_tokens=5)
                for i in range(101)]
        recs.append(RequestRecord(request_index=101, intended_send_ns=0, actual_send_ns=0, prompt_tokens_sent=16,
                                  max_tokens=8, error="HTTP 500"))
        reqs, chunks = request_batches(recs)
        store.write_run(p, RunRow(status="ok", duration_s=2.0 / speed), reqs, chunks)
    df = compare_from_requests(Results.open(str(tmp_path), "req"))
    r = df.set_index(["variant", "load_value"])
    base, nx = r.loc[("base", 1.0)], r.loc[("nextn", 4.0)]
    assert base["ttft_ms_p50"] == pytest.approx(60.0) and base["ttft_ms_p99"] == pytest.approx(109.0)
    assert base["tpot_ms_mean"] == pytest.approx(2.0) and nx["tpot_ms_mean"] == pytest.approx(1.0)
    assert base["output_tok_s"] == pytest.approx(101 * 5 / 2.0)
    assert base["request_throughput_rps"] == pytest.approx(101 / 2.0)
    assert nx["speedup_output_tok_s"] == pytest.approx(2.0) and base["n_runs"] == 2
    assert list(df["variant"]) == ["base", "nextn", "base", "nextn"]


# ---------------------------------------------------------------- read-only queries (issue 13, case 8)

_REFUSED = [
    "COPY (SELECT 1) TO 'out.csv'",
    "COPY runs TO '{tmp}/runs_copy.parquet' (FORMAT parquet)",
    "DROP VIEW runs",
    "CREATE TABLE t AS SELECT 1",
    "CREATE VIEW v AS SELECT 1",
    "INSERT INTO runs SELECT * FROM runs",
    "ATTACH '{tmp}/other.db' AS other",
    "INSTALL httpfs",
    "LOAD httpfs",
    "PRAGMA enable_profiling",
    "SET enable_external_access = true",
    "SET lock_configuration = false",
    "EXPLAIN ANALYZE COPY (SELECT 1) TO 'out.csv'",
    "SELECT 1; DROP VIEW runs",
    "EXPORT DATABASE '{tmp}/export'",
]


@pytest.mark.parametrize("sql", _REFUSED)
def test_query_refuses_anything_but_one_select(root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               sql: str) -> None:
    out = tmp_path / "scratch"
    out.mkdir()
    monkeypatch.chdir(out)
    before = sorted(str(p) for p in Path(root).rglob("*"))
    with pytest.raises(QueryError, match="read-only|exactly one statement") as e:
        query(Results.open(root, "cmp"), sql.format(tmp=out))
    assert e.value.field == "sql" and "SELECT" in (e.value.expected or "")
    assert list(out.iterdir()) == []  # nothing written beside the query
    assert sorted(str(p) for p in Path(root).rglob("*")) == before  # nor into the dataset
    assert query(Results.open(root, "cmp"), "SELECT count(*) AS n FROM runs")["n"].iloc[0] == 8  # the views are intact


def test_query_cannot_read_files_outside_the_dataset(root: str, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.csv").write_text("a,b\n1,2\n")
    pa_parquet = pytest.importorskip("pyarrow.parquet")
    pa_parquet.write_table(pa.table({"a": [1]}), outside / "other.parquet")
    for sql in (f"SELECT * FROM read_csv('{outside}/secret.csv')", f"SELECT * FROM read_parquet('{outside}/other.parquet')",
                f"SELECT * FROM '{outside}/secret.csv'", f"SELECT * FROM glob('{outside}/*')",
                "SELECT * FROM read_text('/etc/hostname')"):
        with pytest.raises(QueryError, match="disabled by configuration"):
            query(Results.open(root, "cmp"), sql)
    # a file of the dataset itself stays readable by name (the views read exactly these)
    runs_file = DatasetStore(root, "cmp").table_files("runs")[0]
    assert len(query(Results.open(root, "cmp"), f"SELECT * FROM read_parquet('{runs_file}')")) == 1


def test_connection_guards_hold_without_the_statement_check(root: str, tmp_path: Path) -> None:
    # DuckDB's own settings are a second wall: even a statement that slipped past the parser check cannot write
    # a file or turn external access back on
    import duckdb

    con = connect(Results.open(root, "cmp"))
    try:
        with pytest.raises(duckdb.Error, match="disabled by configuration"):
            con.execute(f"COPY (SELECT 1) TO '{tmp_path}/x.csv'")
        with pytest.raises(duckdb.Error, match="locked"):
            con.execute("SET enable_external_access = true")
        with pytest.raises(duckdb.Error, match="locked"):
            con.execute("RESET enable_external_access")
    finally:
        con.close()
    assert not (tmp_path / "x.csv").exists()


def test_every_view_answers_a_select(root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cluster.analysis.query import VIEWS

    store = DatasetStore(root, "cmp")
    plan = _plans()[("base", 1.0, 0)]
    store.write_table_rows("correctness", plan, pa.table({"prompt_id": ["p1"], "passed": [True]}))
    store.write_table_rows("server_metrics", plan, pa.table({"t_s": [0.5], "running": [2]}))
    from cluster.telemetry.readings import GpuReading
    from cluster.telemetry.recorder import readings_table

    store.write_table_rows("gpu_metrics", plan, readings_table([(0, GpuReading(gpu="0", power_w=300.0))], "sim"))
    store.write_variant_table("kernel_profile", "base", "profile-x", pa.table({"kernel": ["fused_moe_kernel"]}))
    for view in VIEWS:
        assert query(Results.open(root, "cmp"), f"SELECT count(*) AS n FROM {view}")["n"].iloc[0] >= 1, view
    # a relative dataset root (the CLI's default is "results") works under the guards too
    monkeypatch.chdir(tmp_path)
    rel = str(Path(root).relative_to(tmp_path)) if Path(root).is_relative_to(tmp_path) else root
    assert query(Results.open(rel, "cmp"), "WITH r AS (SELECT * FROM requests) SELECT count(*) AS n FROM r")["n"].iloc[0] == 20
    assert query(Results.open(rel, "cmp"), "FROM variants SELECT count(*) AS n")["n"].iloc[0] == 2


def test_query_help_lists_every_view_the_readme_lists() -> None:
    import re

    from typer.testing import CliRunner

    from cluster.analysis.query import VIEWS
    from cluster.cli import app

    readme = (Path(__file__).parents[3] / "docs" / "guide.md").read_text()
    line = next(ln for ln in readme.splitlines() if "results list" in ln and "DuckDB views" in ln)
    listed = re.findall(r"`(\w+)`", line.split("DuckDB views", 1)[1])
    assert set(listed) == set(VIEWS)
    res = CliRunner().invoke(app, ["results", "query", "--help"], terminal_width=200)
    assert res.exit_code == 0
    text = " ".join(res.output.split())
    for view in VIEWS:
        assert view in text, view


def test_tables_read_by_names_every_table_a_statement_may_read() -> None:
    from cluster.analysis.query import tables_read_by

    tables = ["runs", "requests", "chunks", "correctness"]
    assert tables_read_by("SELECT * FROM runs", tables) == {"runs"}
    assert tables_read_by("SELECT * FROM variants", tables) == {"runs"}
    assert tables_read_by('SELECT * FROM "REQUEST_METRICS"', tables) == {"requests"}
    assert tables_read_by("FROM chunk_gaps", tables) == {"chunks", "requests"}
    assert tables_read_by("SELECT * FROM query_table('chu' || 'nks')", tables) == set(tables)


def test_a_corrupt_page_is_refused_by_every_statement_that_reads_it(root: str) -> None:
    from pathlib import Path

    import pyarrow.parquet as pq

    from cluster.dataset.store import StoreError

    f = sorted((Path(root) / "cmp" / "chunks").rglob("*.parquet"))[0]
    col = pq.ParquetFile(f).metadata.row_group(0).column(pq.ParquetFile(f).metadata.schema.names.index("arrival_ns"))
    data = bytearray(f.read_bytes())
    data[(col.dictionary_page_offset or col.data_page_offset) + col.total_compressed_size - 2] ^= 0x20
    f.write_bytes(bytes(data))
    assert len(query(Results.open(root, "cmp"), "SELECT * FROM runs")) == 8  # reads no chunk
    for sql in ("SELECT sum(arrival_ns) FROM chunks", "SELECT count(*) FROM chunk_gaps",
                "SELECT count(*) FROM query_table('chu' || 'nks')"):
        with pytest.raises(StoreError, match=f.name):
            query(Results.open(root, "cmp"), sql)


def test_a_name_value_directory_above_the_root_is_not_a_column(tmp_path: Path) -> None:
    # hive partitioning read /data/status=bogus/results as a `status` column: every run listed with status bogus
    from tests.fuzz.results_root import write_dataset

    root = tmp_path / "status=bogus" / "variant=x" / "results"
    write_dataset(root)
    df = query(Results.open(str(root), "exp1"), "SELECT status, variant FROM runs ORDER BY variant")
    assert df["status"].tolist() == ["ok", "ok"] and df["variant"].tolist() == ["base", "other"]
    assert len(query(Results.open(str(root), "exp1"), "SELECT * FROM requests WHERE variant = 'base'")) == 50


def test_views_over_an_object_store_root_carry_the_variant(monkeypatch: pytest.MonkeyPatch) -> None:
    # the pyarrow-dataset path (s3://, gs://, ...) read no partition: every row's variant was NULL
    import pyarrow.fs as pafs

    import cluster.dataset.reading as reading
    from tests.fuzz.results_root import write_dataset

    fs = pafs.FileSystem.from_uri("mock:///bucket")[0]
    monkeypatch.setattr(reading, "open_root", lambda root: (fs, "bucket/prefix"))
    write_dataset(Path("mock-root"))
    df = query(Results.open("s3://bucket/prefix", "exp1"), "SELECT variant, status, count(*) AS n FROM requests JOIN runs "
                                             "USING (run_key, variant) GROUP BY ALL ORDER BY variant")
    assert df.to_dict("records") == [{"variant": "base", "status": "ok", "n": 50},
                                     {"variant": "other", "status": "ok", "n": 50}]
    assert query(Results.open("s3://bucket/prefix", "exp1"), "SELECT variant, n_runs FROM variants ORDER BY 1")["n_runs"].tolist() \
        == [1, 1]
