"""Node-side input checks, Ray-free: a taken or Ray-owned port, an interpreter that cannot import its engine, an
output root that cannot be written."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

from cluster.plan.inputs import check_engine_import, check_output_root, check_ports
from cluster.errors import PreflightError
from cluster.plan.runs import expand_variants
from cluster.config.loader import parse_spec_text
from cluster.config.engines import EngineLauncher

SPEC = """\
version: 1
name: demo
model: {path: sim://m, engine: sim}
variants:
  - name: baseline
    args: {port: PORT}
workloads: [{name: w, input_tokens: 8, output_tokens: 8, num_requests: 2}]
load: {concurrency: [1]}
"""


def _variants(port: int):  # type: ignore[no-untyped-def]
    return expand_variants(parse_spec_text(SPEC.replace("PORT", str(port))))


def test_a_taken_port_is_refused_on_the_node() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        check_ports(_variants(port))  # without the node's bind test only Ray's ports are refused
        with pytest.raises(PreflightError) as info:
            check_ports(_variants(port), bind_host="127.0.0.1")
    assert f"port {port} is already taken" in str(info.value) and info.value.field == "args.port"


def test_the_running_clusters_own_port_is_refused() -> None:
    with pytest.raises(PreflightError, match="this cluster's GCS"):
        check_ports(_variants(6380), {6380: "this cluster's GCS"})


def test_an_interpreter_without_the_engine_is_refused() -> None:
    check_engine_import("sim", "cluster.sim.server", None, sys.executable)
    with pytest.raises(PreflightError) as info:
        check_engine_import("sglang", "sglbench_no_such_engine.launch_server", None, sys.executable)
    assert "ModuleNotFoundError: No module named 'sglbench_no_such_engine'" in str(info.value)
    assert info.value.field == "engines.sglang.python"
    with pytest.raises(PreflightError, match="does not exist"):
        check_engine_import("sglang", "sglang.launch_server", EngineLauncher(python="/nonexistent/python"), "python")
    # a launcher command is the user's to vouch for: not run
    check_engine_import("sglang", "sglang.launch_server", EngineLauncher(launcher=["/nonexistent/sglang"]), "python")


def test_an_output_root_that_cannot_be_written(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(PreflightError, match="is a file"):
        check_output_root(str(tmp_path / "f"))
    with pytest.raises(PreflightError, match="is a file"):
        check_output_root(str(tmp_path / "f" / "deeper"))
    check_output_root(str(tmp_path / "new" / "root"))
    assert not (tmp_path / "new").exists()  # checking creates nothing
    check_output_root("s3://bucket/prefix")


@pytest.mark.skipif(os.access("/proc/sys", os.W_OK) and os.access("/sys", os.W_OK),
                    reason="no read-only filesystem on this machine")
def test_an_output_root_on_a_read_only_filesystem() -> None:
    ro = "/sys" if not os.access("/sys", os.W_OK) else "/proc/sys"
    with pytest.raises(PreflightError, match="not writable"):
        check_output_root(f"{ro}/sglbench-results")


def _word_tokenizer(path: Path) -> Path:
    """A one-token-per-word tokenizer.json built here (nothing downloaded)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel(vocab={"[UNK]": 0, "w": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    path.mkdir()
    tok.save(str(path / "tokenizer.json"))
    return path


CONV_SPEC = """
version: 1
name: conv
model: {{path: sim://m, engine: sim}}
sim: {{context_length: 64}}
variants: [{{name: base}}]
workloads:
  - name: w
    input_tokens: dataset
    output_tokens: {out}
    num_requests: 4
    prompts: {{source: sharegpt, path: {path}, tokenizer: {tok}{extra}}}
load: {{concurrency: [1]}}
"""


def test_a_conversation_row_past_the_context_is_refused_at_its_line_unless_filtered(tmp_path: Path) -> None:
    import json

    from cluster.plan.inputs import check_prompts

    tok = _word_tokenizer(tmp_path / "tok")
    data = tmp_path / "d.jsonl"
    rows = [{"category": "chat", "conversations": [{"from": "human", "value": "w " * n},
                                                   {"from": "gpt", "value": "w " * 8}]} for n in (10, 60, 20)]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")

    def check(out: object, extra: str = "") -> list[str]:
        spec = parse_spec_text(CONV_SPEC.format(out=out, path=data, tok=tok, extra=extra))
        return check_prompts(spec, expand_variants(spec), {}, tmp_path)

    # the context is only checkable with token counts: max_input_tokens or output_tokens: dataset ask for them
    with pytest.raises(PreflightError) as info:
        check("dataset")  # 60 + 8 > 64 on line 2
    assert info.value.file == f"{data}:2" and "a 60-token prompt plus 8 output tokens" in str(info.value)
    assert "max_input_tokens" in str(info.value)
    notes = check("dataset", ", max_input_tokens: 50")
    assert notes == [f"workload 'w': {data}: 3 rows read, 2 used (chat 2), 1 filtered (1 longer than "
                     "max_input_tokens 50)"]
    with pytest.raises(PreflightError, match="every row was filtered"):
        check(8, ", max_input_tokens: 5")


TRACE_SPEC = """
version: 1
name: tr
model: {{path: sim://m, engine: sim}}
sim: {{context_length: 64}}
variants: [{{name: base}}]
workloads:
  - {{name: w, input_tokens: dataset, output_tokens: dataset, num_requests: {n}, prompts: {{source: trace, path: {path}}}}}
load: {{request_rate: [2], arrival: trace}}
"""


def test_a_trace_is_checked_row_by_row_before_anything_starts(tmp_path: Path) -> None:
    import json

    from cluster.plan.inputs import check_prompts

    data = tmp_path / "t.jsonl"
    rows = [(0.0, 10, 5), (1.0, 20, 5), (2.0, 60, 8), (2.0, 4, 4)]
    data.write_text("".join(json.dumps({"timestamp_s": t, "input_tokens": i, "output_tokens": o}) + "\n"
                            for t, i, o in rows))

    def check(n: int) -> list[str]:
        spec = parse_spec_text(TRACE_SPEC.format(n=n, path=data))
        return check_prompts(spec, expand_variants(spec), {}, tmp_path)

    # the first two rows: 1 gap over 1 s
    assert check(2) == [f"workload 'w': {data}: 2 trace rows replayed over 1 s, recorded mean rate 1 req/s"]
    with pytest.raises(PreflightError) as info:
        check(3)  # row 3: 60 + 8 > 64
    assert info.value.file == f"{data}:3" and "a 60-token prompt plus 8 output tokens" in str(info.value)
    with pytest.raises(PreflightError) as info:
        check(5)
    assert info.value.field == "workloads.0.num_requests" and "more than the trace's 4 rows" in str(info.value)
    data.write_text(json.dumps({"timestamp_s": 3.0, "input_tokens": 4, "output_tokens": 4}) + "\n")
    with pytest.raises(PreflightError, match="no rate to rescale"):
        check(1)


def test_a_compact_array_rows_are_each_checked_against_the_context(tmp_path: Path) -> None:
    # the row past the context is the second of a one-line array: keyed by line, row 0's count served every row
    import json

    from cluster.plan.inputs import check_prompts

    tok = _word_tokenizer(tmp_path / "tok")
    data = tmp_path / "d.json"
    data.write_text(json.dumps([{"conversations": [{"from": "human", "value": "w " * n},
                                                   {"from": "gpt", "value": "w " * 8}]} for n in (60, 10)]))
    spec = parse_spec_text(CONV_SPEC.format(out="dataset", path=data, tok=tok, extra=""))
    with pytest.raises(PreflightError) as info:
        check_prompts(spec, expand_variants(spec), {}, tmp_path)
    assert "a 60-token prompt plus 8 output tokens" in str(info.value) and info.value.file == f"{data}:1"


def test_a_tokenizer_past_the_models_vocabulary_is_refused(tmp_path: Path) -> None:
    from cluster.plan.inputs import ModelLimits, _check_workload
    from cluster.config.workload import WorkloadSpec

    tok = _word_tokenizer(tmp_path / "tok")  # ids 0 and 1
    (tmp_path / "d.jsonl").write_text('{"conversations": [{"from": "human", "value": "w"}, '
                                      '{"from": "gpt", "value": "w"}]}\n')
    (tmp_path / "c.txt").write_text("w " * 50)
    conv = WorkloadSpec.model_validate({"name": "w", "input_tokens": "dataset", "output_tokens": "dataset",
                                        "num_requests": 2, "prompts": {"source": "sharegpt", "path": "d.jsonl",
                                                                       "tokenizer": str(tok)}})
    text = WorkloadSpec.model_validate({"name": "t", "input_tokens": 4, "output_tokens": 4, "num_requests": 2,
                                        "prompts": {"source": "text", "path": "c.txt", "tokenizer": str(tok)}})
    for w in (conv, text):
        _check_workload("", 0, w, ModelLimits(None, 2, "config.json"), tmp_path, False)  # ids 0-1 fit 2
        with pytest.raises(PreflightError) as info:
            _check_workload("", 0, w, ModelLimits(None, 1, "config.json"), tmp_path, False)
        assert "ids up to 1, outside the model's vocabulary of 1" in str(info.value)
        assert info.value.field == "workloads.0.prompts.tokenizer"
    (tmp_path / "c.jsonl").write_text('{"text": 1}\n')
    bad = text.model_copy(update={"prompts": text.prompts.model_copy(update={"path": "c.jsonl"})})
    with pytest.raises(PreflightError, match="'text' or 'prompt'") as info:
        _check_workload("", 0, bad, ModelLimits(None, 2, "config.json"), tmp_path, False)
    assert info.value.file == f"{tmp_path / 'c.jsonl'}:1"
