"""A byte-order mark past a file's start (two files joined with their BOMs) is refused as what it is, naming the file
and line, in every input format; before, each parser blamed something else (invalid JSON, a missing YAML key, a
timestamp that is not a number) or took it as text. A leading BOM is still dropped, one inside a JSON string is data."""

from __future__ import annotations

import json
import pathlib
from typing import Callable

import pytest

from cluster.config.fields import SpecError
from cluster.config.loader import load_spec
from cluster.config.prompts import ConversationPrompts
from cluster.errors import UserError
from cluster.input_files import MID_FILE_BOM
from cluster.loadgen.conversations import load_conversations
from cluster.loadgen.datasets import load_jsonl_rows
from cluster.loadgen.text_prompts import corpus_text
from cluster.loadgen.traces import load_trace
from cluster.probe.checkpoint import probe_checkpoint
from tests import checkpoints as ck

BOM = "\ufeff"
SHAREGPT_ROW = {"id": "a", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}
CASES: dict[str, tuple[str, str, Callable[[pathlib.Path], object], int]] = {
    # name: (file name, text with a BOM past the start, reader, the BOM's line)
    "jsonl-row": ("p.jsonl", f'{BOM}{{"prompt": "a"}}\n{BOM}{{"prompt": "b"}}\n', load_jsonl_rows, 2),
    "trace-csv": ("t.csv", f"timestamp_s,input_tokens,output_tokens\n0,10,5\n{BOM}1,10,5\n", load_trace, 3),
    "corpus": ("c.txt", f"some text\n{BOM}more text\n", corpus_text, 2),
    "sharegpt-mid-line": ("s.json", f"[{json.dumps(SHAREGPT_ROW)},{BOM}{json.dumps(SHAREGPT_ROW)}]",
                          lambda p: load_conversations(p, ConversationPrompts(source="sharegpt", path=str(p))), 1),
    "crlf-jsonl": ("p.jsonl", f'{{"prompt": "a"}}\r\n{BOM}{{"prompt": "b"}}\r\n', load_jsonl_rows, 2),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bom_past_the_start_is_named_with_its_file_and_line(tmp_path: pathlib.Path, case: str) -> None:
    name, text, read, line = CASES[case]
    path = tmp_path / name
    path.write_bytes(text.encode())
    with pytest.raises(UserError) as e:
        read(path)
    msg = str(e.value)
    assert MID_FILE_BOM in msg and str(path) in msg and f"{line}" in msg, msg
    assert "invalid JSON" not in msg and "not a number" not in msg, msg


def test_the_experiment_file_names_the_bom_not_a_missing_field(tmp_path: pathlib.Path) -> None:
    """Before: `load: required field is missing` (YAML read the BOM as part of the key `\\ufeffload`)."""
    good = pathlib.Path(__file__).resolve().parents[3] / "experiments"
    src = next(p for p in sorted(good.glob("*.yaml")) if "\nload:" in p.read_text())
    path = tmp_path / "x.yaml"
    path.write_bytes(src.read_text().replace("\nload:", f"\n{BOM}load:").encode())
    line = src.read_text().split("\nload:")[0].count("\n") + 2
    with pytest.raises(SpecError) as e:
        load_spec(path)
    assert e.value.line == line and MID_FILE_BOM in e.value.message, e.value


def test_a_checkpoint_config_names_the_bom(tmp_path: pathlib.Path) -> None:
    model = ck.single_file_model(tmp_path / "m")
    cfg = (model / "config.json").read_text()
    (model / "config.json").write_bytes((BOM + cfg.replace('\n "vocab_size"', f'\n{BOM} "vocab_size"')).encode())
    with pytest.raises(UserError) as e:
        probe_checkpoint(str(model))
    assert MID_FILE_BOM in str(e.value) and "config.json" in str(e.value), e.value


def test_a_leading_bom_and_one_inside_a_string_are_still_read(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_bytes(f'{BOM}{{"prompt": "a"}}\n{{"prompt": "{BOM}b"}}\n'.encode())
    assert len(load_jsonl_rows(path)) == 2
    corpus = tmp_path / "c.txt"
    corpus.write_bytes(f"{BOM}text with a{BOM} zero-width no-break space inside\n".encode())
    assert corpus_text(corpus).startswith("text with a\ufeff")
