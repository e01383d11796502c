"""Issue 15: the SGLang 0.5.23 facts the hybrid/SM120 rules rely on, read from the installed wheel's own source
(no import, no GPU): flag names and choices, the draft MoE runner default, and the Mamba state-slot log line."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from cluster.engines.sglang_server_info import MAMBA_CAP_LINE


def _srt(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import importlib.util as u; print(u.find_spec('sglang').origin)"],
                         capture_output=True, text=True, timeout=120, check=True).stdout.strip().splitlines()[-1]
    return Path(out).parent / "srt"


def test_flags_and_defaults_the_rules_cite(sglang_venv_python: Path) -> None:
    srt = _srt(sglang_venv_python)
    exec_ = (srt / "arg_groups" / "fields" / "exec_.py").read_text()
    assert re.search(r'mamba_radix_cache_strategy: A\[\s*str,\s*Arg\(\s*help="The strategy to use for mamba radix '
                     r'cache\.",\s*choices=\["auto", "no_buffer", "extra_buffer", "extra_buffer_lazy"\]', exec_)
    assert '"--fp4-gemm-backend"' in exec_ and "flashinfer_cutlass otherwise (including SM120)" in exec_
    spec = (srt / "arg_groups" / "fields" / "spec.py").read_text()
    assert "speculative_moe_runner_backend: A[" in spec
    overrides = (srt / "arg_groups" / "overrides.py").read_text()
    # an unset draft runner inherits the target's
    assert re.search(r"if view\.speculative_moe_runner_backend is None:\s*default = view\.moe_runner_backend",
                     overrides)
    # auto radix-cache strategy resolves per variant: extra_buffer, or no_buffer with overlap scheduling off
    assert re.search(r'declared\["mamba_radix_cache_strategy"\] = "no_buffer"\s*declared\["disable_overlap_schedule"\] '
                     r"= True", overrides)
    assert "mamba_scheduler_strategy" not in exec_  # 0.5.23 no longer has the old spelling


def test_the_state_slot_log_line_matches_sglangs_format(sglang_venv_python: Path) -> None:
    src = (_srt(sglang_venv_python) / "mem_cache" / "kv_cache_configurator.py").read_text()
    m = re.search(r'"max_running_requests is capped to %d by the mamba state "\s*"cache \(max_mamba_cache_size=%d, '
                  r'%d state slots per "\s*"request\)', src)
    assert m, "SGLang's state-slot warning changed: update cluster/engines/sglang.py MAMBA_CAP_LINE"
    filled = "max_running_requests is capped to %d by the mamba state cache (max_mamba_cache_size=%d, %d state " \
             "slots per request)" % (12, 60, 5)
    assert MAMBA_CAP_LINE.search(filled)
