"""Real-text prompt source: exact input lengths from a locally trained tokenizer, deterministic, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster.loadgen.text_prompts import TextPromptError, build_text_prompts
from cluster.config.workload import WorkloadSpec

SENTENCES = [f"The {a} {b} jumps over the {c} fence number {i}." for i, (a, b, c) in
             enumerate(zip(["quick", "slow", "red", "blue"] * 25, ["fox", "dog", "cat", "cow"] * 25,
                           ["tall", "short", "old", "new"] * 25))]


@pytest.fixture()
def model_dir(tmp_path: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(SENTENCES, trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>"]))
    d = tmp_path / "model"
    d.mkdir()
    tok.save(str(d / "tokenizer.json"))
    (tmp_path / "corpus.txt").write_text("\n".join(SENTENCES * 3), encoding="utf-8")
    return d


def workload(n_in: int = 24) -> WorkloadSpec:
    return WorkloadSpec.model_validate({"name": "t", "input_tokens": n_in, "output_tokens": 8, "num_requests": 5,
                                        "prompts": {"source": "text", "path": "corpus.txt"}})


def test_exact_lengths_deterministic_and_decodable(model_dir: Path, tmp_path: Path) -> None:
    a = build_text_prompts(workload(), 5, 7, tmp_path, str(model_dir))
    b = build_text_prompts(workload(), 5, 7, tmp_path, str(model_dir))
    c = build_text_prompts(workload(), 5, 8, tmp_path, str(model_dir))
    assert a == b and a != c
    assert all(len(p.input_ids or ()) == 24 for p in a)
    assert all(p.text and any(w in p.text for w in ("fox", "dog", "cat", "cow", "fence", "jumps")) for p in a)


def test_errors_name_the_file(model_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(TextPromptError, match="fewer than input_tokens=100000"):
        build_text_prompts(workload(100000), 2, 0, tmp_path, str(model_dir))
    with pytest.raises(TextPromptError, match="no tokenizer.json"):
        build_text_prompts(workload(), 2, 0, tmp_path, str(tmp_path / "nowhere"))
    bad = WorkloadSpec.model_validate({"name": "t", "input_tokens": 4, "output_tokens": 8, "num_requests": 1,
                                       "prompts": {"source": "text", "path": "missing.txt"}})
    with pytest.raises(TextPromptError, match="missing.txt: corpus not found"):
        build_text_prompts(bad, 1, 0, tmp_path, str(model_dir))
