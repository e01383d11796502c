"""Fuzz the checkpoint boundary: a valid tiny checkpoint (tests/checkpoints.py) with its config.json, index, shard
headers, quantization and hub metadata mutated (bytes, structure, numbers, encodings, offsets, shapes, dtypes, file
types). The probe must return a report or raise CheckpointError, nothing else, within a deadline; a report's
tensors must satisfy the header invariant and the report must print on a UTF-8 stream; the same files in another
JSON encoding (compact, indented, BOM, CRLF) must give the same report."""

from __future__ import annotations

import io
import json
import os
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/ is not a package: reach tests/checkpoints.py

from tests import checkpoints as ck  # noqa: E402
from tests.fuzz.fuzzing import FUZZ, budget  # noqa: E402

from cluster.commands.probe import render  # noqa: E402
from cluster.probe.checkpoint import ProbeReport, probe_checkpoint  # noqa: E402
from cluster.probe.safetensors_header import DTYPE_BITS, CheckpointError  # noqa: E402

DEADLINE_S = 5.0
"""One probe of a tiny checkpoint takes milliseconds; past this it is reading what it should not."""
INDEX = "model.safetensors.index.json"
HUB_META = ".cache/huggingface/download/config.json.metadata"


def _base() -> dict[str, bytes]:
    """The files of a valid two-shard DeepSeek-style checkpoint with an MTP head, quantization and hub metadata."""
    with tempfile.TemporaryDirectory() as tmp:
        d = ck.deepseek_nextn(Path(tmp) / "m", layers=1, experts=2, hidden=16, vocab=32)
        ck.write_json(d / "hf_quant_config.json", {"producer": {"name": "modelopt", "version": "0.1"},
                                                   "quantization": {"quant_algo": "FP8", "exclude_modules": ["lm_head"]}})
        (d / HUB_META).parent.mkdir(parents=True)
        (d / HUB_META).write_text("0123456789abcdef0123456789abcdef01234567\netag\n1700000000.0\n")
        return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def _base_single_file() -> dict[str, bytes]:
    """An unsharded checkpoint: no index, so every name in its header reaches the tensor analysis."""
    with tempfile.TemporaryDirectory() as tmp:
        d = ck.single_file_model(Path(tmp) / "m", layers=1, hidden=16, vocab=32)
        return {p.name: p.read_bytes() for p in d.iterdir()}


BASE = _base()
BASE_SINGLE = _base_single_file()
SHARDS = sorted(n for n in BASE if n.endswith(".safetensors"))
JSON_FILES = ["config.json", INDEX, "hf_quant_config.json"]


def _split_shard(data: bytes) -> tuple[dict[str, Any], bytes]:
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n]), data[8 + n:]


def _join_shard(header: Any, body: bytes, length_delta: int = 0) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", max(0, len(raw) + length_delta)) + raw + body


def _materialise(root: Path, files: dict[str, bytes | str]) -> Path:
    d = root / "m"
    for name, content in files.items():
        p = d / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if content == "fifo":
            os.mkfifo(p)
        elif content == "dir":
            p.mkdir()
        elif content == "loop":
            p.symlink_to(p)
        elif content == "dangling":
            p.symlink_to(d / "gone")
        else:
            assert isinstance(content, bytes)
            p.write_bytes(content)
    return d


def _check(d: Path) -> ProbeReport | None:
    """The property: a report satisfying the invariant and printable as UTF-8, or a CheckpointError; in time."""
    t0 = time.monotonic()
    try:
        report = probe_checkpoint(str(d))
    except CheckpointError as e:
        assert str(e).isprintable() and e.file, str(e)  # one line, whatever the file holds
        str(e).encode("utf-8")
        report = None
    assert time.monotonic() - t0 < DEADLINE_S
    if report is not None:
        for header in report.headers:
            ck.assert_header_invariant(header)
        json.dumps(report.to_json()).encode("utf-8")
        out = io.StringIO()
        render(report, Console(file=out, width=200, highlight=False, soft_wrap=True))
        out.getvalue().encode("utf-8")
    return report


# ------------------------------------------------------------------------------------------ value strategies
LONG_INDEX_NAME = "mtp.layers." + "9" * 5000 + ".w.weight"
INTS = st.one_of(st.integers(-3, 300), st.sampled_from([2**31, 2**40, 2**40 + 1, 2**63, 2**64, -2**63, 10**30]),
                 st.integers(min_value=1, max_value=10**200))
STRINGS = st.one_of(st.text(max_size=12), st.sampled_from(["", "\x00", "../x.safetensors", "/etc/passwd", "a\nb",
                                                          "\ud800", "model\x00.safetensors", "BF16", "U8", "F4",
                                                          "[/x]", "[bold]", LONG_INDEX_NAME]))
INDEXED_NAMES = st.builds(lambda prefix, digits, leaf: f"{prefix}.{digits}.{leaf}",
                          st.sampled_from(["mtp.layers", "model.layers", "model.mtp_layers", "mtp", "model.mtp_block"]),
                          st.sampled_from([1, 2, 19, 4301, 6000]).map(lambda n: "9" * n) | st.text("0123456789٣", max_size=3),
                          st.sampled_from(["weight", "eh_proj.weight", "mlp.experts.0.up_proj.weight_scale"]))
NAMES = INDEXED_NAMES | st.sampled_from(["mtp.fc.weight", "model.layers.[/x].weight", "mtp.\ud800.weight", "a\x00b",
                                         "", "__metadata__"]) | STRINGS
"""Tensor names a header may be renamed to: MTP/NextN-shaped names with indices of every length (past Python's
4,300-digit int() limit too), markup, surrogates, NUL, the metadata key."""
LEAVES = st.one_of(st.none(), st.booleans(), INTS, st.floats(allow_nan=True), STRINGS)
VALUES = st.recursive(LEAVES, lambda c: st.lists(c, max_size=3) | st.dictionaries(STRINGS, c, max_size=3),
                      max_leaves=8)
DEEP = st.integers(1, 200).map(lambda n: "[" * n + "]" * n)


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, prefix + (i,))
    return out


def _set(obj: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    parent = obj
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return obj


@st.composite
def _mutated_json(draw: st.DrawFn, original: bytes) -> bytes:
    """Replace, delete or add one value anywhere in the document, then encode it one of several ways."""
    doc = json.loads(original)
    paths = _paths(doc)
    path = draw(st.sampled_from(paths))
    op = draw(st.sampled_from(["replace", "delete", "add", "deep"]))
    if op == "replace" or (op == "delete" and not path):
        doc = _set(doc, path, draw(VALUES))
    elif op == "delete":
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        del parent[path[-1]]
    elif op == "add":
        target = doc
        for key in path:
            target = target[key]
        if isinstance(target, dict):
            target[draw(STRINGS)] = draw(VALUES)
        elif isinstance(target, list):
            target.append(draw(VALUES))
    text = json.dumps(doc, ensure_ascii=draw(st.booleans()))
    if op == "deep":
        text = text[:-1] + ', "deep": ' + draw(DEEP) + "}" if text.endswith("}") else draw(DEEP)
    return _encode(text, draw(st.sampled_from(ENCODINGS)))


ENCODINGS = ["compact", "indented", "bom", "crlf", "utf16", "latin1"]


def _encode(text: str, how: str) -> bytes:
    if how in ("indented", "crlf"):
        try:
            json.loads(text)
        except ValueError:
            how = "compact"  # a deliberately broken document is written as it is
    if how == "indented":
        text = json.dumps(json.loads(text), indent=2)
    if how == "crlf":
        text = json.dumps(json.loads(text), indent=1).replace("\n", "\r\n")
    raw = text.encode("utf-8", "surrogatepass")
    if how == "bom":
        return b"\xef\xbb\xbf" + raw
    if how == "utf16":
        return text.encode("utf-16", "surrogatepass")
    if how == "latin1":
        return text.encode("latin-1", "replace")
    return raw


@st.composite
def _mutated_bytes(draw: st.DrawFn, original: bytes) -> bytes:
    """Flip, insert, delete or truncate bytes (for a shard: mostly in its length prefix and header)."""
    data = bytearray(original)
    hot = min(len(data), 8 + struct.unpack("<Q", original[:8])[0]) if len(original) >= 8 else len(data)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        i = draw(st.integers(0, max(0, min(hot, len(data)) - 1)))
        if op == "flip" and data:
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=4))
        elif op == "delete" and data:
            del data[i]
        elif op == "truncate":
            del data[i:]
    return bytes(data)


@st.composite
def _mutated_header(draw: st.DrawFn, original: bytes) -> bytes:
    """Maybe one tensor renamed (NAMES), then one tensor's offsets, shape or dtype changed (or its entry, or
    __metadata__), the length prefix kept right or shifted, the data region grown or shrunk."""
    header, body = _split_shard(original)
    names = [n for n in header if n != "__metadata__"]
    name = draw(st.sampled_from(names))
    entry = header[name]
    if draw(st.booleans()):
        header[draw(NAMES)] = header.pop(draw(st.sampled_from(names)))
    what = draw(st.sampled_from(["offsets", "shape", "dtype", "entry", "metadata", "swap", "none"]))
    if what == "offsets":
        begin, end = entry["data_offsets"]
        delta = st.integers(-64, 64) | INTS
        entry["data_offsets"] = draw(st.sampled_from([[begin + draw(delta), end], [begin, end + draw(delta)],
                                                      [begin + draw(delta), end + draw(delta)], [end, begin],
                                                      [0, end - begin], draw(VALUES)]))
    elif what == "shape":
        shape = list(entry["shape"])
        entry["shape"] = draw(st.sampled_from([
            shape + [draw(INTS)], shape[:-1], [draw(INTS) for _ in shape], [0] + [draw(INTS)] * len(shape),
            [1] * draw(st.integers(60, 70)), draw(VALUES)]))
    elif what == "dtype":
        entry["dtype"] = draw(st.sampled_from(sorted(DTYPE_BITS)) | STRINGS | VALUES)
    elif what == "entry":
        header[name] = draw(VALUES)
    elif what == "metadata":
        header["__metadata__"] = draw(VALUES)
    elif what == "swap":  # two tensors' offsets made equal: sizes or overlaps
        other = draw(st.sampled_from(list(header.values())))
        if isinstance(other, dict) and "data_offsets" in other:
            entry["data_offsets"] = list(other["data_offsets"])
    body_delta = draw(st.sampled_from([0, 0, 0, -1, 1, -len(body)]))
    body = body[:len(body) + body_delta] if body_delta < 0 else body + b"\0" * body_delta
    return _join_shard(header, body, draw(st.sampled_from([0, 0, 0, 1, -1, 10**6])))


FILE_TYPES = st.sampled_from(["fifo", "dir", "loop", "dangling"])


@st.composite
def _checkpoint(draw: st.DrawFn) -> dict[str, bytes | str]:
    files: dict[str, bytes | str] = dict(BASE)
    targets = st.sampled_from(JSON_FILES + SHARDS + [HUB_META, "generation_config.json"])
    for target in draw(st.lists(targets, min_size=1, max_size=2, unique=True)):
        kind = draw(st.sampled_from(["structure", "bytes", "type", "header"]))
        original = BASE.get(target)
        if kind == "type":
            files[target] = draw(FILE_TYPES)
        elif not isinstance(original, bytes):
            files[target] = draw(st.binary(max_size=64))
        elif kind == "header" and target in SHARDS:
            files[target] = draw(_mutated_header(original))
        elif kind == "structure" and target in JSON_FILES:
            files[target] = draw(_mutated_json(original))
        else:
            files[target] = draw(_mutated_bytes(original))
    return files


@FUZZ
@given(files=_checkpoint())
def test_fuzz_mutated_checkpoint_is_a_report_or_a_checkpoint_error(files: dict[str, bytes | str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        _check(_materialise(Path(tmp), files))


@settings(FUZZ, max_examples=budget(300))
@given(shard=st.sampled_from(SHARDS + ["model.safetensors"]), data=st.data())
def test_fuzz_shard_header_fields(shard: str, data: st.DataObject) -> None:
    base = BASE_SINGLE if shard == "model.safetensors" else BASE
    files: dict[str, bytes | str] = dict(base)
    files[shard] = data.draw(_mutated_header(base[shard]))
    with tempfile.TemporaryDirectory() as tmp:
        _check(_materialise(Path(tmp), files))


@settings(FUZZ, max_examples=budget(100))
@given(renames=st.lists(NAMES, min_size=1, max_size=3), data=st.data())
def test_fuzz_tensor_names(renames: list[str], data: st.DataObject) -> None:
    """Tensors of an otherwise valid unsharded header renamed: every name reaches the tensor analysis."""
    header, body = _split_shard(BASE_SINGLE["model.safetensors"])
    for new in renames:
        old = data.draw(st.sampled_from([n for n in header if n != "__metadata__"]))
        header[new] = header.pop(old)
    files: dict[str, bytes | str] = dict(BASE_SINGLE)
    files["model.safetensors"] = _join_shard(header, body)
    with tempfile.TemporaryDirectory() as tmp:
        _check(_materialise(Path(tmp), files))


def _comparable(report: ProbeReport) -> dict[str, Any]:
    out = report.to_json()
    out.pop("model_dir")
    out["identity"].pop("fingerprint")  # hashes the bytes as written, by design
    return out


@settings(FUZZ, max_examples=budget(40))
@given(target=st.sampled_from(JSON_FILES), how=st.sampled_from(["compact", "indented", "bom", "crlf"]))
def test_fuzz_same_checkpoint_in_another_json_encoding_reads_the_same(target: str, how: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        want = _check(_materialise(Path(tmp) / "a", dict(BASE)))
        files: dict[str, bytes | str] = dict(BASE)
        files[target] = _encode(BASE[target].decode(), how)
        got = _check(_materialise(Path(tmp) / "b", files))
    assert want is not None and got is not None
    assert _comparable(got) == _comparable(want)


_BRACKETY = st.text(alphabet='[]{}"\\a', max_size=5)
JSONISH = st.recursive(_BRACKETY | st.integers(),
                       lambda c: st.lists(c, max_size=3) | st.dictionaries(_BRACKETY, c, max_size=3),
                       max_leaves=30).map(json.dumps)


@FUZZ
@given(text=JSONISH | DEEP, limit=st.integers(1, 8))
def test_fuzz_fast_depth_check_agrees_with_input_files(text: str, limit: int) -> None:
    """The depth check the probe uses (input_files.json_depth_exceeds, C-speed in the common case) refuses what the
    exact scan (json_depth_offset) refuses, on every text, decodable or not."""
    from cluster.input_files import json_depth_exceeds, json_depth_offset

    assert json_depth_exceeds(text, limit) == (json_depth_offset(text, limit) is not None)
