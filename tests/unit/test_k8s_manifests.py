"""Every YAML document under k8s/ validates against the KubeRay v1 schemas plus the rules the schemas cannot express."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "k8s"
SCHEMAS = REPO.parent / "shared" / "kuberay"
SCHEMA_FILES = {"RayCluster": "raycluster_v1.json", "RayJob": "rayjob_v1.json"}


def _documents() -> list[tuple[str, int, dict[str, Any]]]:
    out = []
    for path in sorted(K8S.glob("*.yaml")) + sorted(K8S.glob("*.yml")):
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if doc is not None:
                out.append((path.name, i, doc))
    return out


DOCS = _documents()
IDS = [f"{name}#{i}:{doc.get('kind')}" for name, i, doc in DOCS]
RAY_DOCS = [(n, i, d) for n, i, d in DOCS if d.get("kind") in SCHEMA_FILES]


def _cluster_specs() -> Iterator[tuple[str, dict[str, Any]]]:
    for name, _, doc in RAY_DOCS:
        if doc["kind"] == "RayCluster":
            yield name, doc["spec"]
        elif "rayClusterSpec" in doc["spec"]:
            yield name, doc["spec"]["rayClusterSpec"]


def _containers(obj: Any) -> Iterator[dict[str, Any]]:
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                yield from value
            else:
                yield from _containers(value)
    elif isinstance(obj, list):
        for value in obj:
            yield from _containers(value)


def test_manifests_exist() -> None:
    kinds = sorted(d["kind"] for _, _, d in DOCS)
    assert kinds.count("RayCluster") == 1 and kinds.count("RayJob") == 2


@pytest.mark.parametrize("name,index,doc", RAY_DOCS, ids=[f"{n}#{i}" for n, i, _ in RAY_DOCS])
def test_ray_documents_match_kuberay_schema(name: str, index: int, doc: dict[str, Any]) -> None:
    if not SCHEMAS.is_dir():
        pytest.skip(f"KubeRay schemas not found at {SCHEMAS} (they live in the project's shared/ folder)")
    import jsonschema

    schema = json.loads((SCHEMAS / SCHEMA_FILES[doc["kind"]]).read_text())
    assert doc["apiVersion"] == "ray.io/v1"
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, f"{name}: " + "; ".join(f"{'.'.join(map(str, e.path))}: {e.message}" for e in errors[:5])


def test_schema_check_can_fail() -> None:
    if not SCHEMAS.is_dir():
        pytest.skip(f"KubeRay schemas not found at {SCHEMAS}")
    import jsonschema

    schema = json.loads((SCHEMAS / "raycluster_v1.json").read_text())
    _, doc = next(_cluster_specs())
    broken = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "x"},
              "spec": {**doc, "headGroupSpec": {**doc["headGroupSpec"], "rayStartParams": {"num-cpus": 0}}}}
    assert list(jsonschema.Draft7Validator(schema).iter_errors(broken))


@pytest.mark.parametrize("name,index,doc", DOCS, ids=IDS)
def test_every_document_is_named_and_labelled(name: str, index: int, doc: dict[str, Any]) -> None:
    assert doc.get("apiVersion") and doc.get("kind")
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", doc["metadata"]["name"])
    assert doc["metadata"].get("labels", {}).get("app.kubernetes.io/name") == "sglbench"


def test_rayjobs_name_a_cluster_and_run_the_driver() -> None:
    jobs = [(n, d) for n, _, d in RAY_DOCS if d["kind"] == "RayJob"]
    modes = set()
    for name, job in jobs:
        spec = job["spec"]
        assert ("rayClusterSpec" in spec) != ("clusterSelector" in spec), f"{name}: exactly one of rayClusterSpec/clusterSelector"
        assert re.fullmatch(r"python -m cluster\.distributed\.driver /experiments/[\w.-]+\.yaml( --output /results)?",
                            spec["entrypoint"]), spec["entrypoint"]
        assert "runtimeEnvYAML" not in spec, "dependencies are baked into the image: no runtime-env installs"
        modes.add("own" if "rayClusterSpec" in spec else "existing")
        if spec.get("submissionMode") == "SidecarMode":
            head = spec["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
            assert head.get("restartPolicy") == "Never"
    assert modes == {"own", "existing"}
    selector = next(d for _, d in jobs if "clusterSelector" in d["spec"])["spec"]["clusterSelector"]
    cluster = next(d for _, _, d in RAY_DOCS if d["kind"] == "RayCluster")
    assert selector == {"ray.io/cluster": cluster["metadata"]["name"]}


def test_ray_start_params_are_strings() -> None:
    for name, spec in _cluster_specs():
        groups = [spec["headGroupSpec"]] + spec.get("workerGroupSpecs", [])
        for group in groups:
            for key, value in group.get("rayStartParams", {}).items():
                assert isinstance(value, str), f"{name}: rayStartParams.{key} must be a string, got {value!r}"


def test_head_has_no_gpus_and_a_loopback_dashboard() -> None:
    for name, spec in _cluster_specs():
        head = spec["headGroupSpec"]
        assert head["rayStartParams"].get("num-gpus") == "0"
        assert head["rayStartParams"].get("dashboard-host") == "127.0.0.1"
        for c in _containers(head["template"]):
            for part in ("limits", "requests"):
                assert "nvidia.com/gpu" not in c.get("resources", {}).get(part, {}), name
        assert spec.get("authOptions", {}).get("mode") == "token", f"{name}: token auth must be on"


def test_gpu_worker_group_shape() -> None:
    for name, spec in _cluster_specs():
        gpu_groups = [g for g in spec["workerGroupSpecs"]
                      if any("nvidia.com/gpu" in c.get("resources", {}).get("requests", {}) or
                             "nvidia.com/gpu" in c.get("resources", {}).get("limits", {}) for c in _containers(g["template"]))]
        assert len(gpu_groups) == 1, name
        group = gpu_groups[0]
        pod = group["template"]["spec"]
        (container,) = pod["containers"]
        limits = container["resources"]["limits"]
        assert str(limits["nvidia.com/gpu"]) == "8", f"{name}: the GPU worker requests nvidia.com/gpu: 8 in limits"
        volumes = {v["name"]: v for v in pod["volumes"]}
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        shm = volumes[mounts["/dev/shm"]["name"]]["emptyDir"]
        assert shm["medium"] == "Memory"
        shm_bytes = _quantity_bytes(shm["sizeLimit"])
        store = int(group["rayStartParams"]["object-store-memory"])
        assert store <= shm_bytes, f"{name}: /dev/shm ({shm['sizeLimit']}) must hold the object store ({store} bytes)"
        models = mounts["/models"]
        assert models.get("readOnly") is True
        assert volumes[models["name"]]["persistentVolumeClaim"]["readOnly"] is True
        head_pod = spec["headGroupSpec"]["template"]["spec"]
        head_mounts = {m["mountPath"]: m["name"] for c in head_pod["containers"] for m in c.get("volumeMounts", [])}
        results = {v["name"]: v for v in head_pod["volumes"]}[head_mounts["/results"]]
        assert results["persistentVolumeClaim"]["claimName"] == "sglbench-results"


def _quantity_bytes(q: str) -> int:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    for suffix, factor in units.items():
        if q.endswith(suffix):
            return int(q[: -len(suffix)]) * factor
    return int(q)


def test_rayjob_cluster_matches_raycluster() -> None:
    """The RayJob's own cluster is raycluster.yaml plus the head restart policy SidecarMode needs."""
    cluster = next(d for _, _, d in RAY_DOCS if d["kind"] == "RayCluster")["spec"]
    own = next(d for _, _, d in RAY_DOCS if d["kind"] == "RayJob" and "rayClusterSpec" in d["spec"])["spec"]["rayClusterSpec"]
    own = json.loads(json.dumps(own))
    own["headGroupSpec"]["template"]["spec"].pop("restartPolicy")
    assert own == cluster


def test_only_marked_lines_need_editing() -> None:
    """Image, model volume and experiment are the user's edits: each is marked, and every image is the same one."""
    marks: dict[str, set[str]] = {}
    for path in K8S.glob("*.yaml"):
        for line in path.read_text().splitlines():
            m = re.search(r"# EDIT: (\w+)", line)
            if m:
                marks.setdefault(m.group(1), set()).add(path.name)
    assert set(marks) == {"image", "model", "experiment"}
    images = {c["image"] for _, _, d in DOCS for c in _containers(d)}
    assert len(images) == 1
    assert "rayjob.yaml" in marks["experiment"] and "rayjob-existing-cluster.yaml" in marks["experiment"]
