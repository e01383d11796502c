"""A chat template's render is bounded: a template that would loop for hours, build a value past the output bound or
render nothing is refused naming its file and the cause; named templates without a `default` and a template kwarg
that collides with a variable the renderer sets are each refused for what they are."""

from __future__ import annotations

import json
import pathlib
import time

import pytest

from cluster.engines.base import ChatTurn
from cluster.kernel.deadlines import TEMPLATE_RENDER
from cluster.loadgen.chat_template import ChatTemplate, ChatTemplateError, RENDER_LIMIT_CHARS, load_chat_template

TURNS = (ChatTurn("user", "hi"),)
SHORT_S = 0.3
"""A deadline small enough to keep these tests fast; a real template renders a prompt in milliseconds."""
SLACK_S = 5.0
"""What a loaded machine may add past the deadline (one loop step, the error's construction)."""

RUNS_ON = {  # each renders for hours without a deadline (2 s alone on this machine would not end them)
    "nested_ranges": "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}x",
    "nested_list_loops": "{% set xs = range(100000)|list %}{% for a in xs %}{% for b in xs %}{% endfor %}"
                         "{% endfor %}x",
    "macro_fan_out": "{% macro f(n) %}{% if n < 40 %}{{ f(n + 1) }}{{ f(n + 1) }}{% endif %}{% endmacro %}{{ f(0) }}",
    "recursive_loop_fan_out": "{% for m in range(10) recursive %}{% if loop.depth < 12 %}{{ loop(range(10)) }}"
                              "{% endif %}{% endfor %}x",
}


def _template(tmp: pathlib.Path, source: str) -> ChatTemplate:
    path = tmp / "chat_template.jinja"
    path.write_text(source)
    return ChatTemplate(path, source, "<s>", "</s>")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(RUNS_ON))
def test_a_template_that_runs_on_is_refused_at_its_deadline(name: str, tmp_path: pathlib.Path) -> None:
    t = _template(tmp_path, RUNS_ON[name])
    start = time.monotonic()
    with pytest.raises(ChatTemplateError) as e:
        t.render(TURNS, {}, deadline_s=SHORT_S)
    took = time.monotonic() - start
    assert SHORT_S <= took < SHORT_S + SLACK_S, took
    assert str(t.source) in str(e.value) and e.value.file == str(t.source)
    assert f"did not finish rendering within its {SHORT_S:g} s deadline ({TEMPLATE_RENDER.env})" in str(e.value)


@pytest.mark.timeout(60)
def test_the_declared_override_sets_the_deadline(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TEMPLATE_RENDER.env, "0.2")
    t = _template(tmp_path, RUNS_ON["nested_ranges"])
    start = time.monotonic()
    with pytest.raises(ChatTemplateError, match="within its 0.2 s deadline"):
        t.render(TURNS, {})
    assert time.monotonic() - start < 0.2 + SLACK_S
    monkeypatch.setenv(TEMPLATE_RENDER.env, "-1")
    with pytest.raises(ValueError, match=f"{TEMPLATE_RENDER.env}='-1' is not a deadline"):
        t.render(TURNS, {})


@pytest.mark.timeout(60)
@pytest.mark.parametrize("source,said", [
    ("{{ 'x' * 10 ** 10 }}", "builds a 10000000000-item value with `*`"),
    ("{{ messages * 10 ** 9 }}", "builds a 1000000000-item value with `*`"),
    ("{% set ns = namespace(s='xx') %}{% for i in range(60) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s }}",
     "value with `+`"),
    ("{{ 7 ** (10 ** 9) }}", "computes 7 ** 1000000000, a number of more than"),
    ("{% for a in range(100000) %}{% for b in range(1000) %}" + "x" * 400 + "{% endfor %}{% endfor %}",
     f"its render passed {RENDER_LIMIT_CHARS} characters"),
])
def test_a_render_past_the_output_bound_is_refused_before_it_is_built(source: str, said: str,
                                                                      tmp_path: pathlib.Path) -> None:
    with pytest.raises(ChatTemplateError) as e:
        _template(tmp_path, source).render(TURNS, {}, deadline_s=60.0)
    assert said in str(e.value) and "chat_template.jinja: the chat template is refused" in str(e.value)


def test_a_bounded_template_renders_as_before(tmp_path: pathlib.Path) -> None:
    t = _template(tmp_path, "{{ bos_token }}{% for m in messages recursive %}<{{ m.role }}>{{ m.content }}"
                            "{% endfor %}{{ '-' * 3 }}{{ 2 ** 10 }}{% if add_generation_prompt %}<a>{% endif %}")
    assert t.render(TURNS, {}, deadline_s=SHORT_S) == "<s><user>hi---1024<a>"
    assert t.render(TURNS, {"bos_token": "[B]"}) == "[B]<user>hi---1024<a>"  # as Hugging Face: kwargs win


@pytest.mark.parametrize("source", ["", "{% for m in messages %}{% endfor %}", "{{ '  ' }}\n"])
def test_an_empty_render_is_refused_as_empty(source: str, tmp_path: pathlib.Path) -> None:
    with pytest.raises(ChatTemplateError, match=r"chat_template.jinja: the chat template renders an empty prompt "
                                                r"for 1 message\(s\)"):
        _template(tmp_path, source).render(TURNS, {})


@pytest.mark.parametrize("named", [
    [{"name": "tool_use", "template": "{{ messages[0].content }}"}, {"name": "rag", "template": "r"}],
    {"tool_use": "{{ messages[0].content }}", "rag": "r"},
])
def test_named_templates_without_a_default_are_refused_as_such(named: object, tmp_path: pathlib.Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": named}))
    with pytest.raises(ChatTemplateError) as e:
        load_chat_template(tmp_path)
    assert "`chat_template` holds named templates ('rag', 'tool_use') but none named 'default'" in str(e.value)
    assert e.value.file == str(tmp_path / "tokenizer_config.json") and e.value.field == "chat_template"
    with_default = {"default": "[{{ messages[0].content }}]", **named} if isinstance(named, dict) \
        else [*named, {"name": "default", "template": "[{{ messages[0].content }}]"}]
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": with_default}))
    assert load_chat_template(tmp_path).render(TURNS, {}) == "[hi]"


@pytest.mark.parametrize("name", ["add_generation_prompt", "messages"])
def test_a_kwarg_the_renderer_sets_itself_is_refused_naming_it(name: str, tmp_path: pathlib.Path) -> None:
    from cluster.config.loader import parse_spec_text
    from tests.unit.config.test_bad_inputs import VALID

    spec = VALID.replace("workloads:\n", "workloads:\n  - name: chats\n    input_tokens: dataset\n"
                         "    output_tokens: 8\n    num_requests: 2\n    api: chat\n    prompts:\n"
                         "      source: sharegpt\n      path: chats.json\n"
                         f"      chat_template_kwargs:\n        {name}: false\n", 1)
    with pytest.raises(ValueError) as e:
        parse_spec_text(spec)
    assert f"workloads.0.prompts.chat_template_kwargs.{name}" in str(e.value), str(e.value)
    assert "a variable the chat template's renderer sets itself" in str(e.value)
    with pytest.raises(ChatTemplateError, match=f"chat_template_kwargs sets '{name}', which the renderer sets"):
        _template(tmp_path, "{{ messages }}").render(TURNS, {name: False})
