"""The per-request derived quantities (TTFT, TPOT, E2E, ITL, acceptance, client lag), each declared once with its SQL.

Each `Quantity` names its unit, its formula in words, the stored columns it depends on, its numpy formula and its
SQL expression: metrics.summarize_run evaluates the numpy side, the DuckDB views `request_metrics` and `chunk_gaps`
(analysis/query.py) are generated from the SQL side, and comparison/report read those views, so every consumer
gets the same numbers (tests/unit/analysis/test_metrics.py checks numpy and SQL agree exactly). Both sides apply
the same operations in the same order (int64 differences, then float64 division by 1e6, then by the token count).

Stored columns (cluster.kernel.records): times are int64 ns from the window start; `first_chunk_ns` is the first
token-bearing chunk (the client drops token-less chunks; the record sink keeps that true for hand-built records).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import pyarrow.compute as pc

from cluster.kernel.records import Records
from cluster.kernel.window_figures import ClientLag, client_lag

NS_PER_MS = 1e6


@dataclass(frozen=True)
class RequestColumns:
    """The stored per-request columns the quantities depend on, nulls filled (validity in the `*_ok` masks)."""

    actual_send_ns: np.ndarray
    intended_send_ns: np.ndarray
    first_chunk_ns: np.ndarray
    last_chunk_ns: np.ndarray
    completion_tokens: np.ndarray
    completion_tokens_ok: np.ndarray
    client_tokens: np.ndarray
    spec_verify_ct: np.ndarray
    spec_verify_ct_ok: np.ndarray
    ok: np.ndarray
    """error is null and a chunk arrived (first and last chunk set): the requests every latency is over."""


def int_column(t: Records, name: str, fill: int) -> tuple[np.ndarray, np.ndarray]:
    """(values with nulls → fill as int64, validity mask); an absent column is all-null."""
    n = t.num_rows
    if name not in t.schema.names:
        return np.full(n, fill, dtype=np.int64), np.zeros(n, dtype=bool)
    col = t.column(name)
    valid = np.asarray(pc.is_valid(col).to_numpy(zero_copy_only=False), dtype=bool)
    vals = np.asarray(pc.fill_null(col, fill).to_numpy(zero_copy_only=False), dtype=np.int64)
    return vals, valid


def request_columns(requests: Records) -> RequestColumns:
    """The columns of a `requests` table (or batch) that the quantities read; an absent column reads as null."""
    send, _ = int_column(requests, "actual_send_ns", 0)
    intended, _ = int_column(requests, "intended_send_ns", 0)
    first, first_ok = int_column(requests, "first_chunk_ns", 0)
    last, last_ok = int_column(requests, "last_chunk_ns", 0)
    ctok, ctok_ok = int_column(requests, "completion_tokens", 0)
    client_tok, _ = int_column(requests, "client_tokens", 0)
    svc, svc_ok = int_column(requests, "spec_verify_ct", 0)
    if "error" in requests.schema.names:
        no_error = np.asarray(pc.is_null(requests.column("error")).to_numpy(zero_copy_only=False), dtype=bool)
    else:
        no_error = np.ones(requests.num_rows, dtype=bool)
    return RequestColumns(send, intended, first, last, ctok, ctok_ok, client_tok, svc, svc_ok,
                          no_error & first_ok & last_ok)


@dataclass(frozen=True)
class Quantity:
    """One derived quantity: `numpy` gives one float64 per request (NaN where undefined), `sql` the same per row
    of `requests` (NULL where undefined). Chunk-level quantities have no per-request numpy side (chunk_gaps())."""

    name: str
    unit: str
    formula: str
    depends: tuple[str, ...]
    numpy: Optional[Callable[[RequestColumns], np.ndarray]]
    sql: str
    peer: str = ""

    def values(self, c: RequestColumns) -> np.ndarray:
        """The numpy side over every request (NaN where undefined)."""
        if self.numpy is None:
            raise TypeError(f"{self.name} is a chunk-level quantity: see chunk_gaps()")
        return self.numpy(c)

    def describe(self) -> str:
        return f"{self.formula} [{self.unit}]" + (f" ({self.peer})" if self.peer else "")


def ok_sql(alias: str = "") -> str:
    """An ok request: no error and at least one chunk; every latency, throughput and acceptance is over these."""
    a = f"{alias}." if alias else ""
    return f"({a}error IS NULL AND {a}first_chunk_ns IS NOT NULL AND {a}last_chunk_ns IS NOT NULL)"


OK_SQL = ok_sql()

_OUT_TOK_SQL = "coalesce(completion_tokens, client_tokens)"


def _where(cond: np.ndarray, x: np.ndarray) -> np.ndarray:
    return np.where(cond, x, np.nan)


def _output_tokens(c: RequestColumns) -> np.ndarray:
    return np.where(c.completion_tokens_ok, c.completion_tokens, c.client_tokens).astype(np.float64)


def _tpot(c: RequestColumns) -> np.ndarray:
    n = np.where(c.completion_tokens_ok, c.completion_tokens, c.client_tokens)
    multi = c.ok & (n > 1)
    return _where(multi, (c.last_chunk_ns - c.first_chunk_ns) / NS_PER_MS / np.where(multi, n - 1, 1))


def _accept(c: RequestColumns) -> np.ndarray:
    n = np.where(c.completion_tokens_ok, c.completion_tokens, c.client_tokens)
    spec = c.ok & c.spec_verify_ct_ok & (c.spec_verify_ct > 0)
    return _where(spec, (n - 1) / np.where(spec, c.spec_verify_ct, 1))


OUTPUT_TOKENS = Quantity(
    "output_tokens", "tokens", "the server's completion_tokens, else the client's count of streamed tokens",
    ("completion_tokens", "client_tokens"), lambda c: _where(c.ok, _output_tokens(c)),
    f"CASE WHEN {OK_SQL} THEN {_OUT_TOK_SQL} END")
TTFT = Quantity(
    "ttft_ms", "ms", "TTFT: first token-bearing chunk - actual send", ("first_chunk_ns", "actual_send_ns"),
    lambda c: _where(c.ok, (c.first_chunk_ns - c.actual_send_ns) / NS_PER_MS),
    f"CASE WHEN {OK_SQL} THEN (first_chunk_ns - actual_send_ns) / 1e6 END", "SGLang/vLLM TTFT")
E2E = Quantity(
    "e2e_ms", "ms", "E2E: last chunk - actual send", ("last_chunk_ns", "actual_send_ns"),
    lambda c: _where(c.ok, (c.last_chunk_ns - c.actual_send_ns) / NS_PER_MS),
    f"CASE WHEN {OK_SQL} THEN (last_chunk_ns - actual_send_ns) / 1e6 END", "SGLang/vLLM E2E latency")
TPOT = Quantity(
    "tpot_ms", "ms", "TPOT: (E2E - TTFT)/(output_tokens - 1) = (last - first chunk)/(output_tokens - 1), requests "
    "with > 1 output token", ("last_chunk_ns", "first_chunk_ns", "completion_tokens", "client_tokens"), _tpot,
    f"CASE WHEN {OK_SQL} AND {_OUT_TOK_SQL} > 1 THEN "
    f"(last_chunk_ns - first_chunk_ns) / 1e6 / ({_OUT_TOK_SQL} - 1) END",
    "SGLang/vLLM TPOT; GuideLLM/AIPerf 'ITL'")
ACCEPT = Quantity(
    "accept_length", "tokens/verify step", "per request (output_tokens - 1)/spec_verify_ct, requests with "
    "spec_verify_ct > 0", ("completion_tokens", "client_tokens", "spec_verify_ct"), _accept,
    f"CASE WHEN {OK_SQL} AND spec_verify_ct > 0 THEN ({_OUT_TOK_SQL} - 1) / spec_verify_ct END",
    "sglbench, all engines")
LAG = Quantity(
    "lag_ms", "ms", "client send lag: actual send - intended send, every request", ("actual_send_ns", "intended_send_ns"),
    lambda c: (c.actual_send_ns - c.intended_send_ns) / NS_PER_MS, "(actual_send_ns - intended_send_ns) / 1e6",
    "sglbench self-check")

REQUEST_QUANTITIES: tuple[Quantity, ...] = (OUTPUT_TOKENS, TTFT, E2E, TPOT, ACCEPT, LAG)
"""The columns of the `request_metrics` view, in order."""

ITL_CHUNK = Quantity(
    "itl_chunk_ms", "ms", "ITL per chunk: gap between consecutive token-bearing chunks of an ok request",
    ("arrival_ns", "chunk_index", "tokens"), None, "gap_ns / 1e6",
    "vLLM/SGLang-OAI ITL; AIPerf inter_chunk_latency")
ITL_TOKEN = Quantity(
    "itl_token_ms", "ms", "ITL per token: each chunk gap split evenly over the N tokens of the later chunk (N entries)",
    ("arrival_ns", "chunk_index", "tokens"), None, "gap_ns / 1e6 / tokens",
    "SGLang native-backend ITL")
"""Chunk-level quantities: rows of the `chunk_gaps` view (chunk_gaps() is their numpy side)."""


OPTIONAL_REQUEST_COLUMNS = {"category": "VARCHAR", "session_index": "INTEGER", "turn": "INTEGER"}
"""Columns of `requests` that datasets written before them lack (NULL in request_metrics there)."""


def request_metrics_view_sql(present: frozenset[str] = frozenset(OPTIONAL_REQUEST_COLUMNS)) -> str:
    """CREATE VIEW request_metrics: one row per request, its key columns, category, session and turn, ok,
    spec_verify_ct, cached and prompt tokens and every quantity. `present`: the optional columns the requests table
    has (a dataset written before one gets NULL there)."""
    cols = ",\n       ".join(f"{q.sql} AS {q.name}" for q in REQUEST_QUANTITIES)
    opt = ", ".join(c if c in present else f"CAST(NULL AS {t}) AS {c}" for c, t in OPTIONAL_REQUEST_COLUMNS.items())
    return (f"CREATE VIEW request_metrics AS\n"
            f"SELECT run_key, variant, workload, load_kind, load_value, repeat, request_index, {opt},\n"
            f"       {OK_SQL} AS ok, spec_verify_ct, cached_tokens, prompt_tokens,\n       {cols}\nFROM requests")


def chunk_gaps_view_sql() -> str:
    """CREATE VIEW chunk_gaps: one row per gap between token-bearing chunks of an ok request (per-chunk ITL), with
    the later chunk's tokens; per-token ITL repeats each row `tokens` times (weight by tokens in SQL)."""
    return (
        "CREATE VIEW chunk_gaps AS\n"
        f"SELECT run_key, request_index, chunk_index, tokens, {ITL_CHUNK.sql} AS {ITL_CHUNK.name}, "
        f"{ITL_TOKEN.sql} AS {ITL_TOKEN.name}\n"
        "FROM (SELECT c.run_key, c.request_index, c.chunk_index, c.tokens,\n"
        "             c.arrival_ns - lag(c.arrival_ns) OVER (PARTITION BY c.run_key, c.request_index "
        "ORDER BY c.chunk_index) AS gap_ns\n"
        "      FROM chunks c SEMI JOIN requests r\n"
        f"        ON r.run_key = c.run_key AND r.request_index = c.request_index AND {ok_sql('r')}\n"
        "      WHERE c.tokens >= 1)\n"
        "WHERE gap_ns IS NOT NULL")


def chunk_gaps(c_req: np.ndarray, c_t: np.ndarray, c_tok: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The numpy side of ITL_CHUNK / ITL_TOKEN over token-bearing chunks of ok requests sorted by (request, chunk):
    (itl_chunk_ms per gap, tokens of the later chunk, itl_token_ms with each gap's value repeated tokens times)."""
    same = c_req[1:] == c_req[:-1]
    gap_ns = (c_t[1:] - c_t[:-1])[same]
    gap_tok = c_tok[1:][same]
    itl_chunk_ms = gap_ns / NS_PER_MS
    return itl_chunk_ms, gap_tok, np.repeat(itl_chunk_ms / gap_tok, gap_tok)


ACCEPT_LENGTH_SQL = ("sum(output_tokens - 1) FILTER (WHERE accept_length IS NOT NULL) / "
                     "sum(spec_verify_ct) FILTER (WHERE accept_length IS NOT NULL)")
"""Run-scoped accept_length as an aggregate over `request_metrics` rows (GROUP BY run_key)."""


def requests_lag(requests: Records) -> Optional[ClientLag]:
    """client_lag over the rows of a `requests` table: what the runs row stores and validity is judged on."""
    send, _ = int_column(requests, "actual_send_ns", 0)
    intended, _ = int_column(requests, "intended_send_ns", 0)
    return client_lag(send - intended)
