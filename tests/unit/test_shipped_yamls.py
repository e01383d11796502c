"""Every experiment YAML the repository ships loads and plans: experiments/*.yaml, each one a k8s/ manifest's
entrypoint names (the image carries experiments/ at /experiments), and any experiment embedded in a ConfigMap."""

from __future__ import annotations

from pathlib import Path

import re

import pytest
import yaml

from cluster.plan.runs import expand_variants, make_plan
from cluster.config.loader import load_spec, parse_spec_text
from cluster.tuning.stage import tuning_options_check

REPO = Path(__file__).resolve().parents[2]
EXPERIMENTS = sorted((REPO / "experiments").glob("*.y*ml"))


def _embedded() -> list[tuple[str, str]]:
    """(manifest:configmap/key, YAML text) for every ConfigMap data entry that is an experiment."""
    out = []
    for path in sorted((REPO / "k8s").glob("*.y*ml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not isinstance(doc, dict) or doc.get("kind") != "ConfigMap":
                continue
            for key, text in (doc.get("data") or {}).items():
                if key.endswith((".yaml", ".yml")) and "variants:" in text:
                    out.append((f"{path.name}:{doc['metadata']['name']}/{key}", text))
    return out


def _referenced() -> list[tuple[str, str]]:
    """(manifest, experiment file name) for every `/experiments/<name>.yaml` a k8s/ manifest runs."""
    out = []
    for path in sorted((REPO / "k8s").glob("*.y*ml")):
        for name in re.findall(r"/experiments/([\w.-]+\.ya?ml)", path.read_text()):
            out.append((path.name, name))
    return out


EMBEDDED = _embedded()
REFERENCED = _referenced()


def _plans(spec: object) -> int:
    variants = expand_variants(spec)  # type: ignore[arg-type]
    for v in variants:
        tuning_options_check(v)
    runs = make_plan(spec)  # type: ignore[arg-type]
    assert variants and runs
    assert len({r.run_key for r in runs}) == len(runs)
    return len(runs)


def test_there_are_yamls_to_check() -> None:
    assert EXPERIMENTS and REFERENCED  # k8s/ has no ConfigMap today: its jobs run experiments/ from the image


@pytest.mark.parametrize("path", EXPERIMENTS, ids=[p.name for p in EXPERIMENTS])
def test_shipped_experiment_loads_and_plans(path: Path) -> None:
    assert _plans(load_spec(path)) > 0


@pytest.mark.parametrize("manifest, name", REFERENCED, ids=[f"{m}:{n}" for m, n in REFERENCED])
def test_k8s_manifest_runs_a_shipped_experiment_that_plans(manifest: str, name: str) -> None:
    path = REPO / "experiments" / name
    assert path.is_file(), f"{manifest} runs /experiments/{name}, which experiments/ does not ship"
    assert _plans(load_spec(path)) > 0


def test_k8s_embedded_experiments_load_and_plan() -> None:
    for where, text in EMBEDDED:  # none today; a ConfigMap that carries an experiment is checked the same way
        assert _plans(parse_spec_text(text, where)) > 0, where
