"""What the live-server boundary's checks cost the load client, per event and per request, this tree against others.

On recorded SGLang 0.5.23 streams (tests/contract/fixtures/sglang-0.5.23-cpu/), each tree's own code:

- per event, through `framing.Response` as the pool feeds it: the framing's fast path (`event_frames`, whole chunk
  frames of one plain event, 1 and 8 a read) with each parser's mid-stream fast path (OpenAI text without usage,
  OpenAI continuous usage, SGLang native), and reads cut mid-frame (the state machine's SSE split);
- per request: a fresh parser's typed read of the finishing event(s), the answer invariants
  (`broken(stream_answer(meta, tokens))`, only in trees that have them), and a whole recorded request (framing,
  parser and `client._apply_meta`, which in a tree with the invariants checks them).

    python benchmarks/answer_checks.py                          # this tree
    git archive d2321c6 cluster | tar -x -C /tmp/old            # another tree: a `cluster/` package in a folder
    python benchmarks/answer_checks.py --tree /tmp/old          # A/B (repeatable)

Each figure is the minimum over `--rounds` x `--repeats` timings (the machine's noise only adds), measured side by
side: every measurement runs for each tree in turn before the next one, in every round, the order reversed every
other round. A timing is short (256 events, 50 requests) so that on a loaded machine some of them fall in a quiet
slice; the load average before and after is printed with the table.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import re
import sys
import timeit
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator, Optional, Sequence

HERE = Path(__file__).resolve().parents[1]
FIXTURES = HERE / "tests" / "contract" / "fixtures" / "sglang-0.5.23-cpu"
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
_CT = re.compile(rb'"completion_tokens":\d+')


@dataclass(frozen=True)
class Tree:
    """One tree's functions, resolved by what the tree has (the differences are named where each is resolved)."""

    root: Path
    Response: Any
    RequestRecord: Any
    NativeParser: Any
    OpenAIParser: Any
    apply_meta: Callable[[Any, Any], None]
    invariants: Optional[Callable[[Any, Sequence[int]], list[Any]]]


@contextmanager
def _own_cluster(root: Path) -> Iterator[None]:
    """`import cluster...` resolves in `root` inside; the caller's own `cluster` modules are back after."""
    saved = {m: sys.modules.pop(m) for m in [m for m in sys.modules if m == "cluster" or m.startswith("cluster.")]}
    sys.path.insert(0, str(root))
    try:
        yield
    finally:
        sys.path.remove(str(root))
        for m in [m for m in sys.modules if m == "cluster" or m.startswith("cluster.")]:
            del sys.modules[m]
        sys.modules.update(saved)


def load_tree(root: Path) -> Tree:
    """`root`'s own framing, parsers, records and client. The timed paths import nothing lazily, so the module
    objects keep working after `_own_cluster` has put the caller's `cluster` back."""
    root = root.resolve()
    with _own_cluster(root):
        def mod(name: str) -> ModuleType:
            m = importlib.import_module(f"cluster.{name}")
            if not Path(m.__file__ or "").resolve().is_relative_to(root / "cluster"):
                raise SystemExit(f"error: cluster.{name} came from {m.__file__}, not from --tree {root}")
            return m

        framing, streams, client = mod("loadgen.framing"), mod("engines.streams"), mod("loadgen.client")
        # RequestRecord: cluster/kernel/records.py since 14bb50f (d2321c6 has it there); before, dataset/records.py
        records = mod("kernel.records" if (root / "cluster/kernel/records.py").exists() else "dataset.records")
        # The answer invariants (issue 37): broken() in engines/answer_invariants.py, stream_answer() in
        # engines/streams.py since ea3faa3 (in answer_invariants.py before); d2321c6 has neither: no such line
        invariants: Optional[Callable[[Any, Sequence[int]], list[Any]]] = None
        if (root / "cluster/engines/answer_invariants.py").exists():
            inv = mod("engines.answer_invariants")
            stream_answer = getattr(streams, "stream_answer", None) or inv.stream_answer
            broken = inv.broken
            invariants = lambda meta, tokens: broken(stream_answer(meta, tokens))  # noqa: E731
    # Same in every tree measured so far: Response(rec, parser, t0_ns, fut) with event_frames/feed(data, now_ns),
    # the parsers' feed(payload) -> tokens and meta(), client._apply_meta(parser, rec)
    return Tree(root, framing.Response, records.RequestRecord, streams.SGLangNativeParser,
                streams.OpenAIStreamParser, client._apply_meta, invariants)


def _payloads(fixture: str, name: str) -> list[bytes]:
    """The data of each SSE event of a recorded stream, [DONE] included."""
    ex = {e["name"]: e for e in json.loads((FIXTURES / f"{fixture}.json").read_text())["exchanges"]}
    events = [e for e in ex[name]["sse"].split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events), name
    return [e[6:].encode() for e in events]


def _frame(payload: bytes) -> bytes:
    ev = b"data: " + payload + b"\n\n"
    return b"%x\r\n" % len(ev) + ev + b"\r\n"


def _mid_stream(kind: str, n: int) -> list[bytes]:
    """`n` mid-stream events of one kind, each one token on (a recorded mid event, its count rewritten)."""
    if kind == "openai-text":  # SGLang's completions chunk without continuous usage: one token an event by its text
        doc = json.loads(_payloads("baseline", "completions_stream_adapter")[0])
        doc["usage"] = None
        text = json.dumps(doc, separators=(",", ":")).encode()
        return [text] * n
    tpl = _payloads("baseline", "completions_stream_adapter" if kind == "openai-usage" else "generate_stream")[0]
    assert len(_CT.findall(tpl)) == 1, kind
    return [_CT.sub(b'"completion_tokens":%d' % (i + 1), tpl) for i in range(n)]


def _reads(kind: str, n: int, per_read: int, cut: int) -> list[bytes]:
    frames = [_frame(p) for p in _mid_stream(kind, n)]
    if cut:  # the same bytes in reads of `cut` bytes: frames split across reads, the state machine's path
        body = b"".join(frames)
        return [body[i : i + cut] for i in range(0, len(body), cut)]
    return [b"".join(frames[i : i + per_read]) for i in range(0, n, per_read)]


def _stream_us(t: Tree, reads: list[bytes], native: bool, tokens: int, number: int, repeats: int, whole: bool
               ) -> tuple[float, Any]:
    """Microseconds per stream fed read by read to a fresh `Response` (and its record finished by `_apply_meta` when
    `whole`), with the first stream's record."""
    make = t.NativeParser if native else t.OpenAIParser
    loop = asyncio.new_event_loop()
    recs: list[Any] = []

    def run() -> None:
        rec = t.RequestRecord(request_index=0, intended_send_ns=0, actual_send_ns=0, prompt_tokens_sent=3,
                              max_tokens=tokens)
        parser = make()
        r = t.Response(rec, parser, 0, loop.create_future())
        r.feed(HEAD, 0)
        for i, data in enumerate(reads):
            r.event_frames(data, i)
        if whole:
            t.apply_meta(parser, rec)
        if not recs:
            recs.append(rec)

    try:
        return min(timeit.repeat(run, number=number, repeat=repeats)) / number * 1e6, recs[0]
    finally:
        loop.close()


def per_event_us(t: Tree, kind: str, n: int, per_read: int, cut: int, repeats: int) -> float:
    us, rec = _stream_us(t, _reads(kind, n, per_read, cut), kind == "native", n, 1, repeats, whole=False)
    # what was timed read every event as one token: no error, no event lost to a slower path
    if rec.error is not None or rec.chunk_tokens != [1] * n:
        raise SystemExit(f"error: {t.root} {kind}: the events were not read as {n} one-token events "
                         f"({rec.error or rec.chunk_tokens[:5]})")
    return us / n


def _request(kind: str) -> list[bytes]:
    return _payloads("nextn3", "generate_stream" if kind == "native" else "completions_stream_adapter")


def _finishing(payloads: list[bytes]) -> list[bytes]:
    """The finishing event and what follows it before [DONE] (the OpenAI sglext and usage events)."""
    first = next(i for i, p in enumerate(payloads) if b'"finish_reason":null' not in p)
    return payloads[first:-1]


def finishing_read_us(t: Tree, kind: str, repeats: int, number: int) -> float:
    tail = _finishing(_request(kind))
    make = t.NativeParser if kind == "native" else t.OpenAIParser

    def run() -> None:
        p = make()
        for payload in tail:
            p.feed(payload)

    return min(timeit.repeat(run, number=number, repeat=repeats)) / number * 1e6


def invariants_us(t: Tree, kind: str, repeats: int, number: int) -> Optional[float]:
    check = t.invariants
    if check is None:
        return None
    p = t.NativeParser() if kind == "native" else t.OpenAIParser()
    tokens = [k for k in (p.feed(x) for x in _request(kind)[:-1]) if k > 0]
    meta = p.meta()
    if check(meta, tokens):
        raise SystemExit(f"error: {t.root} {kind}: the recorded answer breaks {check(meta, tokens)}")
    return min(timeit.repeat(lambda: check(meta, tokens), number=number, repeat=repeats)) / number * 1e6


def whole_request_us(t: Tree, kind: str, repeats: int, number: int) -> float:
    reads = [_frame(p) for p in _request(kind)] + [b"0\r\n\r\n"]
    us, rec = _stream_us(t, reads, kind == "native", 12, number, repeats, whole=True)
    if rec.error is not None or rec.completion_tokens != 12 or sum(rec.chunk_tokens) != 12:
        raise SystemExit(f"error: {t.root} {kind}: the recorded request was not read whole ({rec.error})")
    return us


Measure = Callable[[Tree], Optional[float]]


def measures(events: int, repeats: int, number: int) -> list[tuple[str, str, Measure]]:
    """(name, unit, measure) in the order they are printed."""
    ev = [("openai-text", 1, 0), ("openai-text", 8, 0), ("openai-usage", 1, 0), ("native", 1, 0),
          ("native", 8, 0), ("openai-usage", 0, 509), ("native", 0, 509)]
    out: list[tuple[str, str, Measure]] = [
        (f"{k}, {f'{n} frame(s) a read' if n else f'{c}-byte reads'}", "us/event",
         lambda t, k=k, n=n, c=c: per_event_us(t, k, events, n, c, repeats)) for k, n, c in ev]
    for k in ("native", "openai"):
        out.append((f"{k}: finishing event(s), typed read", "us/request",
                    lambda t, k=k: finishing_read_us(t, k, repeats, number)))
        out.append((f"{k}: answer invariants", "us/request", lambda t, k=k: invariants_us(t, k, repeats, number)))
        out.append((f"{k}: whole recorded request", "us/request",
                    lambda t, k=k: whole_request_us(t, k, repeats, number)))
    return out


def measure(trees: Sequence[Tree], events: int, repeats: int, rounds: int, number: int
            ) -> list[tuple[str, str, list[Optional[float]]]]:
    """Each measurement's best figure per tree: in each round, each measurement runs for every tree in turn, the
    trees in reverse order every other round (no tree always first after another measurement)."""
    ms = measures(events, repeats, number)
    best: list[list[Optional[float]]] = [[None] * len(trees) for _ in ms]
    for r in range(rounds):
        order = list(enumerate(trees))
        for row, (_, _, m) in zip(best, ms):
            for i, t in (order if r % 2 == 0 else order[::-1]):
                v = m(t)
                row[i] = v if row[i] is None or (v is not None and v < row[i]) else row[i]  # type: ignore[operator]
    return [(name, unit, row) for (name, unit, _), row in zip(ms, best)]


def table(trees: Sequence[Tree], rows: list[tuple[str, str, list[Optional[float]]]]) -> str:
    """The figures by tree (A is this tree), and A's over each other tree's (a ratio above 1: A costs more)."""
    tags = [chr(ord("A") + i) for i in range(len(trees))]
    lines = [f"{tag}: {t.root}" for tag, t in zip(tags, trees)]
    lines.append(f"{'measure':<46} {'unit':<10}" + "".join(f" {tag:>9}" for tag in tags)
                 + "".join(f" {'A/' + tag:>7}" for tag in tags[1:]))
    for name, unit, vals in rows:
        line = f"{name:<46} {unit:<10}" + "".join(f" {'-' if v is None else f'{v:.2f}':>9}" for v in vals)
        for v in vals[1:]:
            line += f" {'-' if v is None or vals[0] is None else f'{vals[0] / v:.2f}':>7}"
        lines.append(line)
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> str:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--tree", type=Path, action="append", default=[],
                    help="a folder holding another tree's cluster/ package, to compare (repeatable)")
    ap.add_argument("--repeats", type=int, default=9, help="timings per measurement, tree and round (min taken)")
    ap.add_argument("--rounds", type=int, default=4, help="rounds of every measurement over every tree")
    ap.add_argument("--events", type=int, default=256, help="events of one stream in a per-event timing")
    ap.add_argument("--number", type=int, default=50, help="requests in a per-request timing")
    args = ap.parse_args(argv)
    for root in args.tree:
        if not (root / "cluster" / "__init__.py").is_file():
            raise SystemExit(f"error: --tree {root}: expected a folder holding a cluster/ package "
                             "(cluster/__init__.py)")
    trees = [load_tree(HERE), *(load_tree(r) for r in args.tree)]
    before = os.getloadavg()
    rows = measure(trees, args.events, args.repeats, args.rounds, args.number)
    after = os.getloadavg()
    out = (f"{table(trees, rows)}\nload average (1, 5, 15 min) before {before[0]:.1f} {before[1]:.1f} "
           f"{before[2]:.1f}, after {after[0]:.1f} {after[1]:.1f} {after[2]:.1f}; {os.cpu_count()} CPUs")
    print(out)
    return out


if __name__ == "__main__":
    main()
