"""What the live-server boundary's checks cost the load client: per event on the framing's fast path, per request on
a stream's finishing chunk (its typed read), on recorded SGLang 0.5.23 streams (tests/contract/fixtures).

    python benchmarks/answer_checks.py                 # this tree
    python benchmarks/answer_checks.py --tree /tmp/old # another checkout's cluster/ (e.g. `git archive REV`), A/B

Each figure is the minimum over `--repeats` timings (the machine's noise only adds), interleaved between the trees.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import sys
import timeit
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

HERE = Path(__file__).resolve().parents[1]
FIXTURE = HERE / "tests" / "contract" / "fixtures" / "sglang-0.5.23-cpu" / "baseline.json"


def _load(tree: Path) -> dict[str, ModuleType]:
    """The framing, streams and records modules of `tree`, imported fresh (each tree its own `cluster`)."""
    for name in [m for m in sys.modules if m == "cluster" or m.startswith("cluster.")]:
        del sys.modules[name]
    sys.path.insert(0, str(tree))
    try:
        return {m: importlib.import_module(f"cluster.{m}") for m in ("loadgen.framing", "engines.streams",
                                                                     "dataset.records")}
    finally:
        sys.path.remove(str(tree))


def _events(name: str) -> list[bytes]:
    ex = {e["name"]: e for e in json.loads(FIXTURE.read_text())["exchanges"]}
    return [x.encode() + b"\n\n" for x in ex[name]["sse"].split("\n\n") if x]


def _per_event_us(mods: dict[str, ModuleType], per_read: int, repeats: int) -> float:
    framing, streams, records = mods["loadgen.framing"], mods["engines.streams"], mods["dataset.records"]
    doc = json.loads(_events("completions_stream_adapter")[0][6:])
    doc["usage"] = None  # SGLang's chunk without continuous usage: each one is a token by the text fast path
    ev = b"data: " + json.dumps(doc, separators=(",", ":")).encode() + b"\n\n"
    frame = b"%x\r\n" % len(ev) + ev + b"\r\n"
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    data, reads = frame * per_read, 20_000 // per_read

    def run() -> None:
        loop = asyncio.new_event_loop()
        rec = records.RequestRecord(request_index=0, intended_send_ns=0, actual_send_ns=0, prompt_tokens_sent=1,
                                    max_tokens=1)
        r = framing.Response(rec, streams.OpenAIStreamParser(), 0, loop.create_future())
        r.feed(head, 0)
        for i in range(reads):
            r.event_frames(data, i)
        loop.close()

    return min(timeit.repeat(run, number=1, repeat=repeats)) / (reads * per_read) * 1e6


def _final_chunk_us(mods: dict[str, ModuleType], repeats: int) -> tuple[float, float]:
    streams = mods["engines.streams"]
    native = [e for e in _events("generate_stream") if b"[DONE]" not in e][-1][6:-2]
    usage = [e for e in _events("completions_stream_adapter") if b"[DONE]" not in e][-1][6:-2]

    def timed(make: Callable[[], Any], payload: bytes) -> float:
        return min(timeit.repeat(lambda: make().feed(payload), number=2000, repeat=repeats)) / 2000 * 1e6

    return timed(streams.SGLangNativeParser, native), timed(streams.OpenAIStreamParser, usage)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tree", type=Path, action="append", default=[], help="another tree to compare (repeatable)")
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args()
    trees = [HERE, *args.tree]
    rows: dict[Path, list[tuple[float, float, float, float]]] = {t: [] for t in trees}
    for _ in range(3):  # interleaved: a noisy stretch hits every tree alike
        for t in trees:
            mods = _load(t)
            rows[t].append((_per_event_us(mods, 1, args.repeats), _per_event_us(mods, 8, args.repeats),
                            *_final_chunk_us(mods, args.repeats)))
    print(f"{'tree':<40} {'us/event 1/read':>16} {'us/event 8/read':>16} {'native final':>13} {'usage chunk':>12}")
    for t, r in rows.items():
        best = [min(x[i] for x in r) for i in range(4)]
        print(f"{str(t):<40} {best[0]:>16.3f} {best[1]:>16.3f} {best[2]:>13.2f} {best[3]:>12.2f}")


if __name__ == "__main__":
    main()
