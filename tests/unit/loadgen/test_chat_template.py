"""Chat templates: the model's own template (built here, ChatML-like with a Qwen3-style `enable_thinking` switch)
rendered over a conversation's turns, tokenized with a tokenizer built here; lengths are counted on what is sent,
the chat API carries the same template variables, and a missing or broken template is an error naming the file."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from cluster.engines.base import ChatTurn, StreamRequest
from cluster.engines.sglang_dialect import sglang_request_body
from cluster.loadgen.chat_template import ChatTemplateError, load_chat_template
from cluster.loadgen.prompt_sources import build_prompts
from cluster.config.workload import WorkloadSpec

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}")


def _model_dir(tmp: pathlib.Path, config: dict[str, Any]) -> pathlib.Path:
    """tokenizer.json (one token per whitespace word, the template's markers as special tokens) and a config."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers

    words = "user assistant system hello world write code please be brief".split()
    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(words)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens([AddedToken(t, special=True) for t in ("<|im_start|>", "<|im_end|>", "<think>",
                                                                   "</think>")])
    d = tmp / "model"
    d.mkdir()
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps(config))
    return d


def _workload(data: pathlib.Path, model: pathlib.Path, **prompts: Any) -> WorkloadSpec:
    return WorkloadSpec.model_validate({
        "name": "w", "input_tokens": "dataset", "output_tokens": 8, "num_requests": 2, "api": "native",
        "prompts": {"source": "sharegpt", "path": str(data), "tokenizer": str(model), **prompts}})


def _data(tmp: pathlib.Path) -> pathlib.Path:
    p = tmp / "d.jsonl"
    p.write_text(json.dumps({"conversations": [{"from": "system", "value": "be brief"},
                                               {"from": "human", "value": "write code please"},
                                               {"from": "gpt", "value": "hello"}]}) + "\n")
    return p


def test_the_template_is_rendered_and_its_tokens_sent(tmp_path: pathlib.Path) -> None:
    model = _model_dir(tmp_path, {"chat_template": CHATML, "eos_token": "<|im_end|>"})
    w = _workload(_data(tmp_path), model, chat_template=True, chat_template_kwargs={"enable_thinking": False})
    (p,) = build_prompts(w, 1, seed=0, base_dir=tmp_path)
    assert p.text == ("<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nwrite code please<|im_end|>\n"
                      "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    # 3 markers + 'system be brief' (3) + 3 markers... : im_start system be brief im_end | im_start user write code
    # please im_end | im_start assistant think /think = 5 + 6 + 4 = 15 tokens, the markers as single special tokens
    assert p.input_ids is not None and len(p.input_ids) == 15
    # the chat API sends the turns and the same template variables, for the server to render the same prompt
    path, body = sglang_request_body(StreamRequest("chat", p, 8, True, 0.0, "m"))
    assert path == "/v1/chat/completions" and body["chat_template_kwargs"] == {"enable_thinking": False}
    assert body["messages"][0] == {"role": "system", "content": "be brief"}
    # without the template the turns' contents are joined: what the server would tokenize, no markers
    (plain,) = build_prompts(_workload(_data(tmp_path), model), 1, seed=0, base_dir=tmp_path)
    assert plain.text == "be brief\n\nwrite code please" and plain.input_ids is None
    assert "chat_template_kwargs" not in sglang_request_body(StreamRequest("chat", plain, 8, True, 0.0, "m"))[1]


def test_lengths_are_counted_on_the_rendered_prompt(tmp_path: pathlib.Path) -> None:
    model = _model_dir(tmp_path, {"chat_template": CHATML})
    # 15 tokens rendered without the thinking switch would be 13; 5 words untemplated: a 12-token cap keeps the
    # row only if it counts the joined text, and drops it when it counts what is sent
    from cluster.loadgen.conversations import load_selection

    sel, _ = load_selection(_workload(_data(tmp_path), model, max_input_tokens=12), tmp_path, "")
    assert len(sel.rows) == 1
    sel, _ = load_selection(_workload(_data(tmp_path), model, max_input_tokens=12, chat_template=True),
                            tmp_path, "")
    assert sel.rows == [] and sum(sel.filtered.values()) == 1


def test_template_sources_and_tokens(tmp_path: pathlib.Path) -> None:
    d = tmp_path / "t"
    d.mkdir()
    (d / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": {"content": "<s>", "special": True}, "eos_token": "</s>",
        "chat_template": [{"name": "tool_use", "template": "no"}, {"name": "default", "template": "{{ bos_token }}"
                                                                    "{{ messages[0]['content'] }}{{ eos_token }}"}]}))
    turns = (ChatTurn("user", "hi"),)
    assert load_chat_template(d).render(turns, {}) == "<s>hi</s>"
    (d / "chat_template.jinja").write_text("[{{ messages | length }}]")  # the separate file wins, as in HF
    assert load_chat_template(d).render(turns, {}) == "[1]"


def test_missing_or_broken_templates_name_the_file(tmp_path: pathlib.Path) -> None:
    model = _model_dir(tmp_path, {"eos_token": "</s>"})
    with pytest.raises(ChatTemplateError) as e:
        build_prompts(_workload(_data(tmp_path), model, chat_template=True), 1, seed=0, base_dir=tmp_path)
    assert "no chat template" in str(e.value) and str(model) in str(e.value)
    (model / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ raise_exception('no system') }}"}))
    with pytest.raises(ChatTemplateError) as e:
        build_prompts(_workload(_data(tmp_path), model, chat_template=True), 1, seed=0, base_dir=tmp_path)
    assert "fails to render a prompt: no system" in str(e.value)


def test_template_variables_without_a_template_are_refused(tmp_path: pathlib.Path) -> None:
    with pytest.raises(Exception) as e:
        _workload(tmp_path / "d.jsonl", tmp_path, chat_template_kwargs={"enable_thinking": False})
    assert "template variables need a template: set prompts.chat_template: true" in str(e.value)
    ok = WorkloadSpec.model_validate({  # the chat API renders them server-side: fine without a local template
        "name": "w", "input_tokens": "dataset", "output_tokens": 8, "num_requests": 2, "api": "chat",
        "prompts": {"source": "sharegpt", "path": "d.jsonl", "chat_template_kwargs": {"enable_thinking": False}}})
    assert ok.identity()["prompts"]["chat_template_kwargs"] == {"enable_thinking": False}  # type: ignore[index]
    plain = WorkloadSpec.model_validate({
        "name": "w", "input_tokens": "dataset", "output_tokens": 8, "num_requests": 2,
        "prompts": {"source": "sharegpt", "path": "d.jsonl"}})
    assert "chat_template" not in plain.identity()["prompts"]  # type: ignore[operator]  # earlier run keys kept


def test_a_session_turn_is_the_whole_conversation_rendered_again(tmp_path: pathlib.Path) -> None:
    from cluster.loadgen.prompt_sources import build_session_plan
    from cluster.loadgen.sessions import Answer, next_turn

    model = _model_dir(tmp_path, {"chat_template": CHATML})
    data = tmp_path / "s.jsonl"
    data.write_text(json.dumps({"conversations": [{"from": "human", "value": "write code"},
                                                  {"from": "gpt", "value": "hello"},
                                                  {"from": "human", "value": "please"}]}) + "\n")
    w = WorkloadSpec.model_validate({
        "name": "w", "input_tokens": "dataset", "output_tokens": 8, "num_requests": 2, "sessions": {"turns": 2},
        "prompts": {"source": "sharegpt", "path": str(data), "tokenizer": str(model), "chat_template": True}})
    first, later = build_prompts(w, 2, seed=0, base_dir=tmp_path)
    plan = build_session_plan(w, 2, 0, tmp_path)
    assert plan is not None and plan.render is not None
    # the model's answer ("world"), not the dataset's ("hello"), goes into the history
    p = next_turn(first, Answer("world", None), later, plan.render)
    assert p.text == ("<|im_start|>user\nwrite code<|im_end|>\n<|im_start|>assistant\nworld<|im_end|>\n"
                      "<|im_start|>user\nplease<|im_end|>\n<|im_start|>assistant\n")
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model / "tokenizer.json"))
    assert p.input_ids == tuple(tok.encode(p.text, add_special_tokens=False).ids)
    assert first.input_ids is not None and p.input_ids[:len(first.input_ids)] == first.input_ids  # a cacheable prefix


def test_a_tokenizer_config_with_nan_is_refused(tmp_path: pathlib.Path) -> None:
    d = tmp_path / "tok"
    d.mkdir()
    (d / "tokenizer_config.json").write_text('{"chat_template": "{{ messages }}", "model_max_length": NaN}')
    with pytest.raises(ChatTemplateError, match="tokenizer_config.json: invalid JSON \\(NaN is not JSON"):
        load_chat_template(d)
