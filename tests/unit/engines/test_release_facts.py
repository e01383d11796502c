"""scripts/sglang_release_facts.py on hand-built wheels: a boundary is where a marker appears (or disappears)."""

from __future__ import annotations

import importlib.util
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "sglang_release_facts.py"


@pytest.fixture(scope="module")
def facts() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sglang_release_facts", SCRIPT)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def _wheel(tmp: Path, version: str, source: str) -> Path:
    path = tmp / f"sglang-{version}-cp311-cp311-manylinux_2_34_x86_64.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("sglang/srt/server_args.py", source)
        z.writestr("sglang/README.md", "cuda_graph_max_bs_decode (outside sglang/srt/*.py: never read)")
    return path


def test_post_releases_sort_after_their_release(facts: ModuleType, tmp_path: Path) -> None:
    names = ["0.5.14", "0.5.13.post1", "0.5.13", "0.5.9"]
    got = sorted((_wheel(tmp_path, v, "") for v in names), key=facts.wheel_version)
    assert [p.name.split("-")[1] for p in got] == ["0.5.9", "0.5.13", "0.5.13.post1", "0.5.14"]


def test_boundaries_from_wheels(facts: ModuleType, tmp_path: Path) -> None:
    raising = "raise ValueError('is not compatible with radix cache when using --mamba-scheduler-strategy no_buffer')"
    wheels = [_wheel(tmp_path, "0.5.12", raising),
              _wheel(tmp_path, "0.5.13.post1", raising),
              _wheel(tmp_path, "0.5.14", "cuda_graph_max_bs_decode: int = 0\nmamba_radix_cache_strategy = 'auto'"),
              _wheel(tmp_path, "0.5.16", "cuda_graph_max_bs_decode: int = 0\nmamba_radix_cache_strategy = 'auto'")]
    seen = facts.presence(wheels)
    by_name = {f.name: facts.boundary(seen, f) for f in facts.FACTS}
    assert by_name["decode CUDA-graph flags"] == ((0, 5, 14), "0.5.13.post1 lacks it, 0.5.14 has it")
    assert by_name["NEXTN + no_buffer radix-cache ValueError"][0] == (0, 5, 14)
    assert by_name["/server_info route"][0] is None  # no wheel shows the change: undecided, never "agrees"
    rows = {f.name: (found, const) for f, found, const, _ in facts.check(wheels)}
    assert rows["decode CUDA-graph flags"] == ((0, 5, 14), (0, 5, 14))


def test_a_constant_the_wheels_contradict_fails_the_script(facts: ModuleType, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    _wheel(tmp_path, "0.5.14", "")
    _wheel(tmp_path, "0.5.15", "cuda_graph_max_bs_decode: int = 0")
    assert facts.main([str(tmp_path)]) == 1
    assert "DIFFERS" in capsys.readouterr().out
    monkeypatch.setattr(facts.eng, "CUDA_GRAPH_REFACTOR", (0, 5, 15))
    assert facts.main([str(tmp_path)]) == 0
    assert facts.main([str(tmp_path / "empty")]) == 2
