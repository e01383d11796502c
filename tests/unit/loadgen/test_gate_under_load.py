"""Issue 15 item 4: the gate asks its prompts again all at once inside filler load; garbage that only a mixed batch
produces (sglang PR #20047) fails the gate, though each prompt alone is clean. A loopback fake, stopped here."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from cluster.engines.sglang import SGLangEngine
from cluster.loadgen.gate import FILLER_PROMPT, collect_gate_answers


class MixedBatchNaN:
    """Non-streaming /generate: sane greedy answers, but NaN rows once more than `clean_up_to` requests run at once."""

    def __init__(self, clean_up_to: int) -> None:
        self.clean_up_to = clean_up_to
        self.in_flight = 0
        self.peak = 0
        self.fillers = 0
        self.budgets: dict[str, list[int]] = {}
        self.runner: Any = None

    async def generate(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        self.fillers += body["text"] == FILLER_PROMPT
        self.budgets.setdefault(body["text"], []).append(body["sampling_params"]["max_new_tokens"])
        try:
            mixed = self.in_flight > self.clean_up_to
            await asyncio.sleep(0.01)  # one "decode step", so concurrent requests overlap
            n = 6
            ids = [0] * n if mixed else list(range(100, 100 + n))
            text = "nan" if mixed else "OK 323 ten apples"
            doc = {"text": text, "output_ids": ids,
                   "meta_info": {"completion_tokens": n, "finish_reason": {"type": "length"}}}
            return web.Response(text=json.dumps(doc), content_type="application/json")
        finally:
            self.in_flight -= 1

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/generate", self.generate)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        return f"http://127.0.0.1:{self.runner.addresses[0][1]}"


def _run(clean_up_to: int, filler: int | None, cap: int | None = None) -> tuple[Any, MixedBatchNaN]:
    async def body() -> Any:
        fake = MixedBatchNaN(clean_up_to)
        url = await fake.start()
        try:
            return await collect_gate_answers(SGLangEngine(), url, "m", 10.0, filler, cap), fake
        finally:
            await fake.runner.cleanup()
    return asyncio.run(body())


def test_garbage_only_in_a_mixed_batch_fails_the_loaded_pass() -> None:
    answers, fake = _run(clean_up_to=4, filler=8)
    assert all(o.text == "OK 323 ten apples" for o in answers.outputs.values())  # one at a time: clean
    assert fake.fillers >= 8 and fake.peak > 4
    problems = answers.loaded_problems()
    assert len(problems) == len(answers.loaded) == 3
    assert "under load (8 filler requests + 3 gate prompts at once)" in problems[0] and "output is 'nan'" in problems[0]


def test_a_clean_server_passes_and_no_filler_means_no_loaded_pass() -> None:
    answers, fake = _run(clean_up_to=1000, filler=8)
    assert answers.loaded and answers.loaded_problems() == []
    plain, fake = _run(clean_up_to=0, filler=None)
    assert plain.loaded == {} and fake.fillers == 0 and fake.peak == 1


def test_filler_is_the_highest_offered_concurrency_less_the_gate_prompts() -> None:
    from pathlib import Path

    from cluster.distributed.gate_stage import gate_filler
    from cluster.config.loader import load_spec

    repo = Path(__file__).resolve().parents[3]
    assert gate_filler(load_spec(repo / "experiments" / "qwen35-397b-nvfp4-mtp.yaml")) == 64 - 3
    assert gate_filler(load_spec(repo / "experiments" / "demo-sglang-cpu.yaml")) == 1


def test_max_new_tokens_caps_every_gate_prompt_in_both_passes() -> None:
    """correctness.max_new_tokens: the 32/64/256-token prompts ask for min(own, 40), alone and under load."""
    from cluster.kernel.gate import GATE_PROMPTS

    _, fake = _run(clean_up_to=1000, filler=2, cap=40)
    for p in GATE_PROMPTS:
        assert fake.budgets[p.text] == [min(p.max_tokens, 40)] * 2, (p.prompt_id, fake.budgets[p.text])
    _, fake = _run(clean_up_to=1000, filler=None)
    assert sorted(b for p in GATE_PROMPTS for b in fake.budgets[p.text]) == sorted(p.max_tokens for p in GATE_PROMPTS)


def test_max_new_tokens_is_refused_while_answers_are_checked() -> None:
    import pytest

    from cluster.errors import UserError
    from cluster.config.loader import parse_spec_text

    base = ("version: 1\nname: x\nmodel: {path: sim://m, engine: sim}\nvariants: [{name: b, baseline: true}]\n"
            "workloads: [{name: w, input_tokens: 8, output_tokens: 8, num_requests: 2}]\nload: {concurrency: [1]}\n")
    assert parse_spec_text(base + "correctness: {check_answers: false, max_new_tokens: 32}\n").correctness.max_new_tokens == 32
    with pytest.raises(UserError, match=r"correctness.*max_new_tokens.*check_answers: false"):
        parse_spec_text(base + "correctness: {max_new_tokens: 32}\n")
    with pytest.raises(UserError, match="below min_prefix_tokens"):
        parse_spec_text(base + "correctness: {check_answers: false, max_new_tokens: 8, min_prefix_tokens: 16}\n")
