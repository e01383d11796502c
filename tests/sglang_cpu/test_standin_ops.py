"""Each sgl_kernel CPU test stand-in equals SGLang 0.5.23's own reference kernel (Triton interpreter / torch SDPA)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

CHECKER = Path(__file__).with_name("check_standin_ops.py")
CHECK_TIMEOUT_S = 400
OPS = [
    "assign_req_to_token_pool_cpu",
    "assign_extend_cache_locs_cpu",
    "assign_draft_cache_locs_contiguous_cpu",
    "fill_bonus_tokens_cpu",
    "fill_accept_out_cache_loc_cpu",
    "rotate_input_ids_cpu",
    "build_draft_decode_metadata_cpu",
    "copy_all_layer_kv_cache_cpu",
    "build_tree_kernel_efficient_cpu",
    "verify_tree_greedy_cpu",
    "extend_attention_cpu",
    "decode_attention_cpu",
    "strict_namespace",
]


@pytest.fixture(scope="module")
def op_results(sglang_cpu_python: Path) -> dict:
    """One venv subprocess runs every comparison (the main test env has no torch)."""
    proc = subprocess.run([str(sglang_cpu_python), str(CHECKER)], capture_output=True, text=True,
                          timeout=CHECK_TIMEOUT_S)
    assert proc.returncode == 0, f"checker crashed:\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("op", OPS)
def test_standin_matches_sglang_reference(op_results: dict, op: str) -> None:
    assert op in op_results, f"checker did not run {op}"
    res = op_results[op]
    assert res["ok"], f"{op}: {res['detail']}"


def test_every_checked_op_is_listed(op_results: dict) -> None:
    assert sorted(op_results) == sorted(OPS)


def test_platform_hook_is_gated(sglang_cpu_python: Path) -> None:
    """has_amx turns true, and mooncake's sender leaves the CUDA-only host-index path, only with
    SGLBENCH_CPU_STANDINS=1; without it SGLang sees this machine as it is."""
    code = ("import sglang.srt.runtime_context as rc; from sglang.srt.utils import common; "
            "from sglang.srt.disaggregation.mooncake import conn; "
            "print(rc.get_platform().has_amx, common.cpu_has_amx_support(), "
            "conn.MooncakeKVSender.supports_host_tensor_indices)")
    # both interpreters at once: each spends ~8-10 s importing SGLang, and they share nothing
    procs = {flag: subprocess.Popen([str(sglang_cpu_python), "-c", code], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True,
                                    env={"PATH": "/usr/bin:/bin", "SGLBENCH_CPU_STANDINS": flag,
                                         "SGLANG_USE_CPU_ENGINE": "1"})
             for flag in ("1", "0")}
    seen, errs = {}, {}
    try:
        for flag, proc in procs.items():
            out, errs[flag] = proc.communicate(timeout=CHECK_TIMEOUT_S)
            seen[flag] = out.strip().splitlines()[-1] if proc.returncode == 0 and out.strip() else ""
    finally:
        for proc in procs.values():  # every interpreter this test started is stopped by this test
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert all(proc.returncode == 0 for proc in procs.values()), {f: e[-3000:] for f, e in errs.items()}
    assert seen["1"].split()[0] == "True"
    assert seen["1"].split()[2] == "False", "the flag must turn MooncakeKVSender.supports_host_tensor_indices off"
    has_amx, probe, host_indices = seen["0"].split()
    assert has_amx == probe, "without the flag SGLang's platform fact must be the machine's own probe"
    assert host_indices == "True", "without the flag SGLang's own mooncake sender class must be left as shipped"
