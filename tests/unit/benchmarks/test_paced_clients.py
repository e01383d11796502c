"""benchmarks/paced_clients.py: its client names (the sglbench variants an A/B run compares) and its sglbench worker
against the paced stub, keeping its records (timing) or handing every batch out once (memory)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Iterator

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def stub(ps: ModuleType, binary: Path) -> Iterator[object]:
    with ps.PacedStub(binary, ttft_ms=2.0, itl_ms=1.0, chunks=5, realtime=False) as s:
        yield s


def test_sglbench_client_names(pc: ModuleType) -> None:
    (plain, frozen, other) = pc.clients_for(["sglbench", "sglbench+gcfreeze+shards4", "sglbench@/tmp/old-checkout"])
    assert (plain.name, plain.loop, plain.gc, plain.root, plain.shards) == ("sglbench", "asyncio", "on", str(ROOT), 1)
    assert (frozen.name, frozen.gc, frozen.shards) == ("sglbench+gcfreeze+shards4", "freeze", 4)
    assert (other.name, other.root) == ("sglbench@old-checkout", "/tmp/old-checkout")
    for bad in ("sglbench+fast", "sglbench+shards0", "sglbench+shards2+shards4"):
        with pytest.raises(SystemExit, match="expected sglbench"):
            pc.clients_for([bad])


def test_a_per_shard_budget_grows_with_the_load_processes_and_stays_within_the_client_core(pc: ModuleType) -> None:
    one, four = pc.clients_for(["sglbench", "sglbench+shards4"])
    peer = pc.peers.PEERS["sglang"]
    assert pc.client_share(four, 0.2, per_shard=False) == 0.2  # the default: one budget for the whole tree
    assert pc.client_share(four, 0.2, per_shard=True) == pytest.approx(0.8)
    assert pc.client_share(one, 0.2, per_shard=True) == pc.client_share(peer, 0.2, per_shard=True) == 0.2
    with pytest.raises(SystemExit, match="one client core"):
        pc.client_share(four, 0.3, per_shard=True)


def _run_worker(pc: ModuleType, stub: object, tmp: Path, **kw: object) -> dict[str, object]:
    c = pc.Sglbench(**kw)
    argv = c.argv(stub.base_url, "native", 4, 12, 8, 5, tmp, tmp)  # type: ignore[attr-defined]
    subprocess.run(argv, env=dict(os.environ, **c.env()), check=True, timeout=120, capture_output=True)
    return json.loads((tmp / "sglbench.json").read_text())  # type: ignore[no-any-return]


def test_worker_keeps_records_for_timing(pc: ModuleType, stub: object, tmp_path: Path) -> None:
    d = _run_worker(pc, stub, tmp_path, gc="freeze")
    # 12 requests of 5 one-token chunks: 12 TTFTs, 12 × 4 gaps
    assert (d["completed"], d["output_tokens"], d["every_row_once"]) == (12, 60, True)
    arr = np.load(tmp_path / "sglbench.npz")
    assert len(arr["ttft_ms"]) == 12 and len(arr["itl_ms"]) == 48
    # the stub's schedule: TTFT 2 ms, ITL 1 ms (loopback adds tens of µs, the client's wake-ups less than a few ms)
    assert 2.0 <= float(np.median(arr["ttft_ms"])) < 6.0
    assert 0.5 < float(np.median(arr["itl_ms"])) < 2.0


def test_worker_hands_every_batch_out_once(pc: ModuleType, stub: object, tmp_path: Path) -> None:
    d = _run_worker(pc, stub, tmp_path, drop=True)
    assert (d["completed"], d["output_tokens"], d["chunk_rows"]) == (12, 60, 60)
    assert d["every_row_once"] is True and d["batches"] == 1
    assert len(np.load(tmp_path / "sglbench.npz")["ttft_ms"]) == 0  # nothing kept in the process


def test_sharded_worker_splits_the_window_and_merges(pc: ModuleType, stub: object, tmp_path: Path) -> None:
    # load.actors_per_server: 2 processes, shard i sends requests i, i + 2, ...; together one client's 12 requests
    d = _run_worker(pc, stub, tmp_path, shards=2, drop=True)
    assert (d["completed"], d["output_tokens"], d["requests"], d["batches"]) == (12, 60, 12, 2)
    assert d["every_row_once"] is True
    assert [json.loads((tmp_path / f"shard{i}" / "sglbench.json").read_text())["requests"] for i in (0, 1)] == [6, 6]
