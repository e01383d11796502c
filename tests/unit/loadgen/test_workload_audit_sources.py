"""The workload audit on every prompt source, through the load runner against the simulator (in process, no Ray).

For each source a good run passes the audit and a run whose prompts were collapsed (every prompt replaced by the
first before sending, the shape of the 40-rows-sent-as-one ShareGPT bug) is flagged with "fewer distinct prompts".
The selection is read from the source (loadgen/selection.py), the sent side from what the runner put on the wire.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
from typing import Any, Sequence

import pyarrow as pa
import pytest

from cluster.analysis.workload_audit import WorkloadAudit, audit_workload
from cluster.engines.base import Prompt
from cluster.engines.sglang import SGLangEngine
from cluster.loadgen.prompt_sources import build_prompt_sequence, build_session_plan, workload_selection
from cluster.loadgen.runner import run_window
from cluster.kernel.window_job import WindowJob
from cluster.loadgen.selection import prompt_fingerprint
from cluster.kernel.runs import LoadPoint
from cluster.config.sim_knobs import Knobs
from tests.unit.loadgen.inprocess_sim import served_sim
from cluster.config.workload import WorkloadSpec

ENGINE = SGLangEngine()
WORDS = ["question", "answer", "the", "a", "code", "chat"] + [str(i) for i in range(100)]


def _tokenizer(d: pathlib.Path) -> pathlib.Path:
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel(vocab={"[UNK]": 0, **{w: i + 1 for i, w in enumerate(WORDS)}},
                                     unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(d / "tokenizer.json"))
    return d


def _sharegpt_rows(n: int) -> list[dict[str, Any]]:
    # rows of different lengths in two categories; a compact JSON array puts them all on line 1
    return [{"category": "code" if i % 2 else "chat",
             "conversations": [{"from": "human", "value": "question " + " ".join(str(j) for j in range(i % 7 + 1))
                                + f" {i}"},
                               {"from": "gpt", "value": f"answer {i}"},
                               {"from": "human", "value": f"the {i}"},
                               {"from": "gpt", "value": "a"}]}
            for i in range(n)]


def _workload(d: pathlib.Path, source: str) -> WorkloadSpec:
    base: dict[str, Any] = {"name": "w", "input_tokens": 12, "output_tokens": 4, "num_requests": 40}
    if source == "random_ids":
        base["prompts"] = {"source": "random_ids"}
    elif source == "random_ids_lengths":  # a length distribution: sent lengths against its population's quantiles
        base.update(prompts={"source": "random_ids"}, num_requests=120,
                    input_tokens={"dist": "lognormal", "mean": 24, "std": 12, "min": 4, "max": 96})
    elif source == "shared_prefix":
        base["prompts"] = {"source": "random_ids", "shared_prefix": {"groups": 3, "tokens": 6}}
    elif source == "sessions":
        base.update(prompts={"source": "random_ids"}, sessions={"turns": 2})
    elif source == "jsonl":
        f = d / "p.jsonl"
        f.write_text("".join(json.dumps({"input_ids": list(range(100 + i, 104 + i + i % 5))}) + "\n"
                             for i in range(40)))
        base.update(input_tokens="dataset", prompts={"source": "jsonl", "path": str(f)})
    elif source == "text":
        f = d / "corpus.txt"
        f.write_text(" ".join(WORDS[j % len(WORDS)] for j in range(3000)))
        base.update(input_tokens=8, prompts={"source": "text", "path": str(f), "tokenizer": str(_tokenizer(d))})
    elif source == "sharegpt_sessions":
        f = d / "d.json"
        f.write_text(json.dumps(_sharegpt_rows(40), indent=1))
        base.update(input_tokens="dataset", num_requests=40, sessions={"turns": 2},
                    prompts={"source": "sharegpt", "path": str(f), "tokenizer": str(_tokenizer(d)),
                             "max_input_tokens": 64})
    elif source in ("sharegpt", "sharegpt_tokenized"):
        f = d / "d.json"
        f.write_text(json.dumps(_sharegpt_rows(40)))  # compact: every row on line 1
        src: dict[str, Any] = {"source": "sharegpt", "path": str(f)}
        if source == "sharegpt_tokenized":
            src.update(tokenizer=str(_tokenizer(d)), max_input_tokens=64)
        base.update(input_tokens="dataset", prompts=src)
    elif source == "messages":
        f = d / "m.jsonl"
        rows = [{"category": r["category"], "messages": [{"role": "user", "content": r["conversations"][0]["value"]},
                                                         {"role": "assistant", "content": "ok"}]}
                for r in _sharegpt_rows(40)]
        f.write_text("".join(json.dumps(r) + "\n" for r in rows))
        base.update(input_tokens="dataset", prompts={"source": "messages", "path": str(f),
                                                     "tokenizer": str(_tokenizer(d)), "max_input_tokens": 64})
    elif source == "trace":
        f = d / "t.jsonl"
        f.write_text("".join(json.dumps({"timestamp_s": i * 0.01, "input_tokens": 4 + i % 9, "output_tokens": 3})
                             + "\n" for i in range(40)))
        base.update(input_tokens="dataset", output_tokens="dataset", prompts={"source": "trace", "path": str(f)})
    return WorkloadSpec.model_validate(base)


async def _sim_window(prompts: Sequence[Prompt], wl: WorkloadSpec, d: pathlib.Path) -> pa.Table:
    async with served_sim(Knobs(time_scale=0.001)) as url:
        res = await run_window(ENGINE, WindowJob(url, wl.api, 4, LoadPoint("concurrency", 4), 7, True, 0.0, "m", 10.0,
                                                 scrape_metrics=False), prompts, sessions=build_session_plan(wl,
                                                 wl.num_requests, 7, d))
    return pa.Table.from_batches([res.requests])


def _audit(d: pathlib.Path, source: str, collapse: bool, length_shift: bool = False
           ) -> tuple[WorkloadAudit, pa.Table]:
    wl = _workload(d, source)
    prompts: Sequence[Prompt] = build_prompt_sequence(wl, wl.num_requests, 7, d)
    if collapse:
        prompts = [prompts[0]] * len(prompts)
    elif source == "random_ids_lengths" and length_shift:
        # the other injection: every prompt cut to its first half (ids sent, lengths wrong)
        prompts = [Prompt(input_ids=(p.input_ids or ())[: max(1, len(p.input_ids or ()) // 2)]) for p in prompts]
    requests = asyncio.run(_sim_window(prompts, wl, d))
    return audit_workload(requests, workload_selection(wl, wl.num_requests, 7, d)), requests


SOURCES = ["random_ids", "random_ids_lengths", "shared_prefix", "sessions", "jsonl", "text", "sharegpt",
           "sharegpt_tokenized", "messages", "trace", "sharegpt_sessions"]


@pytest.mark.parametrize("source", SOURCES)
def test_a_good_run_of_every_source_passes_the_audit(tmp_path: pathlib.Path, source: str) -> None:
    audit, requests = _audit(tmp_path, source, collapse=False)
    assert requests.column("error").null_count == requests.num_rows  # every request was served
    assert audit.reasons == (), audit.reasons
    assert audit.distinct_planned > 1
    if source in ("jsonl", "sharegpt", "sharegpt_tokenized", "messages"):
        assert audit.distinct_sent == audit.distinct_planned == 40  # a permutation of 40 distinct rows
    if source in ("jsonl", "sharegpt", "sharegpt_tokenized", "messages", "trace"):
        # every row of a file source that has one: sent and recorded per request
        assert sorted(requests.column("source_row").to_pylist()) == list(range(40))


@pytest.mark.parametrize("source", SOURCES)
def test_a_collapsed_run_of_every_source_is_flagged_for_its_distinct_prompts(tmp_path: pathlib.Path,
                                                                             source: str) -> None:
    audit, _ = _audit(tmp_path, source, collapse=True)
    assert audit.distinct_sent == 1
    assert any(r.startswith("sent 1 distinct prompts of") and "fewer than" in r for r in audit.reasons), \
        audit.reasons
    if source in ("sharegpt", "sharegpt_tokenized", "messages", "sharegpt_sessions"):
        # two categories half and half in the selection; the collapse sent only the first row's
        assert any(r.startswith("category ") for r in audit.reasons), audit.reasons


def test_the_fingerprint_is_of_what_was_sent(tmp_path: pathlib.Path) -> None:
    wl = _workload(tmp_path, "jsonl")
    prompts = build_prompt_sequence(wl, wl.num_requests, 7, tmp_path)
    requests = asyncio.run(_sim_window(prompts, wl, tmp_path)).to_pydict()
    by_index = dict(zip(requests["request_index"], requests["prompt_fingerprint"]))
    assert by_index == {i: prompt_fingerprint(p) for i, p in enumerate(prompts)}


def test_a_prompt_file_with_repeated_rows_offers_its_distinct_prompts_with_their_multiplicities(
        tmp_path: pathlib.Path) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "a"}\n' * 4 + '{"prompt": "b"}\n{"input_ids": [5, 6]}\n')
    wl = WorkloadSpec.model_validate({"name": "w", "input_tokens": "dataset", "output_tokens": 4, "num_requests": 2,
                                      "prompts": {"source": "jsonl", "path": str(f)}})
    plan = workload_selection(wl, 2, 0, tmp_path)
    assert (plan.offered_distinct, plan.with_replacement, plan.draw_multiplicities) == (3.0, False, ((1, 2), (4, 1)))
    assert plan.lengths is None  # text rows: the client does not know their lengths


def test_prompts_cut_to_half_their_length_are_flagged_on_the_length_quantiles(tmp_path: pathlib.Path) -> None:
    audit, _ = _audit(tmp_path, "random_ids_lengths", collapse=False, length_shift=True)
    assert audit.distinct_sent == 120 and not any(r.startswith("sent ") for r in audit.reasons)
    assert [r.split(" sent")[0] for r in audit.reasons] == ["input length p10", "input length p50",
                                                             "input length p90"], audit.reasons
    assert audit.lengths_sent is not None and audit.lengths_selection is not None
    assert all(s < q for s, q in zip(audit.lengths_sent, audit.lengths_selection))
