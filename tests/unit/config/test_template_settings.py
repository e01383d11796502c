"""Chat template settings as an axis: `chat_template_kwargs: {enable_thinking: [true, false]}` expands a workload into
NAME-thinking and NAME-no-thinking (cluster/config/template_settings.py), each with its own run keys, the same rows
(one seed), prompts really rendered with its setting (a tiny template built here branches on enable_thinking), its
setting named to the engine (the simulator's template_accept_probs), and strict refusals."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from cluster.config.fields import SpecError
from cluster.config.loader import load_spec, parse_spec_text
from cluster.config.template_settings import expand_workload, expanded_workload_names, setting_label
from cluster.config.workload import WorkloadSpec
from cluster.engines.base import TEMPLATE_SETTING_HEADER, Prompt, category_headers
from cluster.loadgen.prompt_sources import build_prompts
from cluster.plan.runs import make_plan

REPO = pathlib.Path(__file__).resolve().parents[3]

THINKING = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking %}<think>\n{% else %}<think>\n\n</think>\n\n{% endif %}{% endif %}")

SPEC = """\
version: 1
name: t
model: {path: "sim://m", engine: sim, tp: 1}
variants:
  - name: base
  - name: nextn
    speculative: {num_steps: [1, 2]}
workloads:
  - name: chat
    input_tokens: dataset
    output_tokens: 8
    num_requests: 4
    prompts:
      source: sharegpt
      path: d.jsonl
      tokenizer: tok            # a sim:// model has no tokenizer to count the rendered template with
      chat_template: true
      chat_template_kwargs: KWARGS
load: {concurrency: [1, 4]}
"""


def _spec(kwargs: str, extra: str = "") -> Any:
    return parse_spec_text(SPEC.replace("KWARGS", kwargs) + extra, "t.yaml")


def test_a_list_of_values_expands_the_workload_with_deterministic_sanitised_names() -> None:
    spec = _spec("{enable_thinking: [true, false]}")
    runs = make_plan(spec)
    assert [w.name for w in expand_workload(spec.workloads[0])] == ["chat-thinking", "chat-no-thinking"]
    assert {r.workload.name for r in runs} == {"chat-thinking", "chat-no-thinking"}
    assert len(runs) == 3 * 2 * 2 and len({r.run_key for r in runs}) == len(runs)  # variants x settings x loads
    kw = {r.workload.name: r.workload.prompts.chat_template_kwargs for r in runs}  # type: ignore[union-attr]
    assert kw == {"chat-thinking": {"enable_thinking": True}, "chat-no-thinking": {"enable_thinking": False}}
    # the same rows for both settings: prompts are seeded by the declared workload
    assert len({r.seed for r in runs if r.repeat == 0}) == 1
    # general: any variable, in declared order, over several lists their combinations; plain values kept unnamed
    two = _spec("{enable_thinking: [true, false], reasoning_effort: [low, 'very high'], lang: en}")
    assert expanded_workload_names(two.workloads[0]) == [
        "chat-thinking-reasoning-effort-low", "chat-thinking-reasoning-effort-very-high",
        "chat-no-thinking-reasoning-effort-low", "chat-no-thinking-reasoning-effort-very-high"]
    assert all(x.prompts.chat_template_kwargs["lang"] == "en"  # type: ignore[union-attr]
               for x in expand_workload(two.workloads[0]))
    assert setting_label("temperature_hint", 0.5) == "temperature-hint-0.5"
    long = _spec("{enable_" + "x" * 70 + ": [true, false]}")
    names = expanded_workload_names(long.workloads[0])
    assert len(set(names)) == 2 and all(len(n) <= 64 for n in names)


def test_without_a_list_the_workload_and_its_run_keys_are_unchanged() -> None:
    plain = make_plan(_spec("{enable_thinking: false}"))
    assert {r.workload.name for r in plain} == {"chat"}
    expanded = make_plan(_spec("{enable_thinking: [false, true]}"))
    # a setting is a different workload: none of its run keys is the plain workload's
    assert not {r.run_key for r in plain} & {r.run_key for r in expanded}
    assert plain[0].workload.identity()["name"] == "chat"


@pytest.mark.parametrize("kwargs, message", [
    ("{enable_thinking: [true, true]}", "repeat true"),
    ("{enable_thinking: []}", "an empty list expands the workload into nothing"),
    ("{enable_thinking: [[true]]}", "chat_template_kwargs.enable_thinking"),
    ("{mode: ['a b', 'a/b']}", "both named 'mode-a-b' once sanitised"),
    ("{add_generation_prompt: [true, false]}", "renderer sets itself"),
])
def test_bad_axes_are_refused_naming_the_field(kwargs: str, message: str) -> None:
    with pytest.raises(SpecError) as e:
        _spec(kwargs)
    assert message in str(e.value) and "chat_template_kwargs" in str(e.value), str(e.value)


def test_an_expanded_name_another_workload_has_is_refused() -> None:
    text = SPEC.replace("KWARGS", "{enable_thinking: [true, false]}")
    other = text.split("workloads:\n")[1].split("load:")[0].replace("name: chat\n", "name: chat-thinking\n")
    text = text.replace("load: {", other.replace("[true, false]", "false") + "load: {")
    with pytest.raises(SpecError) as e:
        parse_spec_text(text, "t.yaml")
    assert "expands into 'chat-thinking', a name workloads.1 ('chat-thinking') has" in str(e.value), str(e.value)


def _build_script(out: pathlib.Path) -> None:
    """Run scripts/thinking_tokenizer.py's build into `out`."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("thinking_tokenizer", REPO / "scripts" / "thinking_tokenizer.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.build(out)


def _tokenizer_dir(tmp: pathlib.Path) -> pathlib.Path:
    """scripts/thinking_tokenizer.py's word-level tokenizer (the shipped one's recipe), with the template above."""
    d = tmp / "tok"
    _build_script(d)
    (d / "chat_template.jinja").write_text(THINKING)
    return d


def test_each_setting_renders_its_own_prompts_from_the_same_rows(tmp_path: pathlib.Path) -> None:
    tok = _tokenizer_dir(tmp_path)
    rows = [{"conversations": [{"from": "human", "value": f"write code please {'hello ' * i}"},
                               {"from": "gpt", "value": "hello"}]} for i in range(6)]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    w = WorkloadSpec.model_validate({
        "name": "chat", "input_tokens": "dataset", "output_tokens": 8, "num_requests": 4,
        "prompts": {"source": "sharegpt", "path": "d.jsonl", "tokenizer": str(tok), "chat_template": True,
                    "chat_template_kwargs": {"enable_thinking": [True, False]}}})
    on, off = expand_workload(w)
    from cluster.plan.runs import workload_seed

    p_on = build_prompts(on, 4, workload_seed(0, on, 0), tmp_path)
    p_off = build_prompts(off, 4, workload_seed(0, off, 0), tmp_path)
    assert [p.source_row for p in p_on] == [p.source_row for p in p_off]  # the same rows
    for a, b in zip(p_on, p_off):
        assert a.text is not None and b.text is not None
        assert a.text.endswith("<|im_start|>assistant\n<think>\n"), a.text
        assert b.text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n"), b.text
        assert a.input_ids is not None and b.input_ids is not None
        assert len(b.input_ids) == len(a.input_ids) + 1  # the closing </think> is one more token sent
        assert a.chat_template_kwargs == (("enable_thinking", True),)
        assert b.chat_template_kwargs == (("enable_thinking", False),)
    # each request names its setting to the engine (the simulator's template_accept_probs reads it)
    assert category_headers(p_off[0])[TEMPLATE_SETTING_HEADER] == "enable_thinking=false"
    assert TEMPLATE_SETTING_HEADER not in category_headers(Prompt(input_ids=(1, 2)))
    odd = Prompt(input_ids=(1,), chat_template_kwargs=(("é", True), ("lang", "fran\u00e7ais")))
    assert category_headers(odd)[TEMPLATE_SETTING_HEADER] == 'lang="fran\\u00e7ais"'  # ASCII, as HTTP needs


def test_the_simulator_accepts_per_setting_and_a_category_still_wins() -> None:
    from cluster.config.sim_knobs import Knobs
    from cluster.sim.model import accept_probs_for

    k = Knobs(accept_probs=(0.9,), template_accept_probs={"enable_thinking=false": (0.7, 0.6)},
              category_accept_probs={"code": (0.5,)})
    assert accept_probs_for(k, 2) == (0.9, 0.9)
    assert accept_probs_for(k, 2, setting="enable_thinking=true") == (0.9, 0.9)
    assert accept_probs_for(k, 2, setting="lang=\"en\"; enable_thinking=false") == (0.7, 0.6)
    assert accept_probs_for(k, 2, "code", setting="enable_thinking=false") == (0.5, 0.5)
    with pytest.raises(ValueError, match="expected name=value with the value as JSON"):
        Knobs(template_accept_probs={"enable_thinking=False": (0.7,)})


def test_the_shipped_thinking_experiment_plans_both_settings_with_differing_prompts() -> None:
    spec = load_spec(REPO / "experiments" / "thinking-sim.yaml")
    runs = make_plan(spec)
    names = list(dict.fromkeys(r.workload.name for r in runs))
    assert names == ["chat-thinking", "chat-no-thinking"]
    assert set(spec.sim.template_accept_probs) == {"enable_thinking=true", "enable_thinking=false"}
    by_name = {r.workload.name: r for r in runs if r.repeat == 0}
    texts = {n: build_prompts(r.workload, 4, r.seed, REPO) for n, r in by_name.items()}
    on, off = texts["chat-thinking"], texts["chat-no-thinking"]
    assert [p.source_row for p in on] == [p.source_row for p in off]
    assert all(a.text and a.text.endswith("<think>\n") for a in on)
    assert all(b.text and b.text.endswith("<think>\n\n</think>\n\n") for b in off)
    assert all(p.input_ids and 0 not in p.input_ids for p in on + off)  # the shipped vocabulary covers the rows
    # the planned-workload audit's side is rendered per setting too: its length quantiles are the rendered prompts'
    from cluster.loadgen.prompt_sources import workload_selection

    planned = {n: workload_selection(r.workload, 16, r.seed, REPO) for n, r in by_name.items()}
    q_on, q_off = planned["chat-thinking"].lengths, planned["chat-no-thinking"].lengths
    assert q_on is not None and q_off is not None
    assert [q.tokens + 1 for q in q_on] == [q.tokens for q in q_off]  # </think> is one more token in every prompt


def test_the_shipped_tokenizer_is_what_the_script_builds(tmp_path: pathlib.Path) -> None:
    _build_script(tmp_path)
    shipped = REPO / "datasets" / "chatml-thinking"
    for name in ("tokenizer.json", "chat_template.jinja"):
        assert (tmp_path / name).read_bytes() == (shipped / name).read_bytes(), name
