"""TrainJobs of every released shape run (DESIGN §9): Trainer v2.0's `labels`, `annotations`
and `podSpecOverrides`, v2.1's `podTemplateOverrides`, v2.2+'s `runtimePatches` — each checked
against its own release's CRD, and each rendering exactly as its `runtimePatches` twin
(tests/trainer_shapes/: Kubeflow's and OpenShift AI's how-to TrainJobs, a v2.0 one). Problems
are at the field the user wrote; a field of another shape, of the runtime, or the draft API is
refused saying where it belongs."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import ROOT

from aichor_iac import doors, engine
from aichor_iac.problems import ManifestError

SHAPES = ROOT / "tests" / "trainer_shapes"
TWINS = sorted(SHAPES.glob("*.twin.yaml"))


def rendered(path: Path) -> list[dict[str, Any]]:
    return engine.expand(doors.load(path), stack="test", name="tj").objects


def problems(text: str) -> dict[str, str]:
    with pytest.raises(ManifestError) as error:
        doors.parse(text, source="tj.yaml")
    return {p.path: p.message for p in error.value.problems}


@pytest.mark.parametrize("twin", TWINS, ids=lambda p: p.name.removesuffix(".twin.yaml"))
def test_an_earlier_shape_renders_as_its_runtime_patches_twin(twin: Path) -> None:
    older = twin.with_name(twin.name.replace(".twin", ""))
    assert rendered(older) == rendered(twin)


def test_the_twins_are_of_the_pinned_shape_and_the_others_not() -> None:
    for path in SHAPES.glob("*.yaml"):
        trainjob = next(d for d in yaml.safe_load_all(path.read_text()) if d["kind"] == "TrainJob")
        assert ("runtimePatches" in trainjob["spec"]) == path.name.endswith(".twin.yaml")


def test_the_overrides_reach_the_node_pods() -> None:
    """Kubeflow's how-to: the service account, node selector, toleration, labels, annotations
    and the mounted volume are on every node pod."""
    (node,) = [
        o
        for o in rendered(SHAPES / "v2.1.kubeflow-podtemplate-overrides.yaml")
        if o["kind"] == "Job"
    ]
    pod = node["spec"]["template"]
    assert pod["metadata"]["labels"]["team"] == "ml-platform"
    assert pod["metadata"]["annotations"]["monitoring"] == "enabled"
    assert pod["spec"]["serviceAccountName"] == "custom-sa"
    assert pod["spec"]["nodeSelector"]["accelerator"] == "nvidia-tesla-v100"
    assert {
        "name": "training-data",
        "persistentVolumeClaim": {"claimName": "training-data-pvc"},
    } in pod["spec"]["volumes"]
    main = next(c for c in pod["spec"]["containers"] if c["name"] == "node")
    assert {"name": "training-data", "mountPath": "/workspace"} in main["volumeMounts"]


def test_a_v20_trainjob_asks_kueue_through_its_labels() -> None:
    experiment = doors.load(SHAPES / "v2.0.podspec-overrides-labels.yaml")
    rendering = engine.expand(experiment, stack="test", name="tj")
    assert any("asks Kueue's queue team-a" in w for w in rendering.warnings)


V21 = """\
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: tj}
spec:
  runtimeRef: {name: torch-distributed}
  podTemplateOverrides:
    - targetJobs: [{name: node}, {name: launcher}]
      spec:
        containers:
          - name: node
            env: [{name: A, value: "1"}]
          - name: sidecar
            volumeMounts: [{name: x, mountPath: /x}]
"""
V20 = """\
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: tj}
spec:
  runtimeRef: {name: torch-distributed}
  podSpecOverrides:
    - targetJobs: [{name: node}, {name: launcher}]
      containers:
        - name: node
          env: [{name: A, value: "1"}]
        - name: sidecar
          volumeMounts: [{name: x, mountPath: /x}]
"""


@pytest.mark.parametrize(
    ("text", "at"),
    [(V21, "spec.podTemplateOverrides.0.spec."), (V20, "spec.podSpecOverrides.0.")],
    ids=["v2.1", "v2.0"],
)
def test_what_the_webhook_refuses_of_an_override_is_at_the_override(text: str, at: str) -> None:
    found = problems(text)
    override = at.split(".spec.")[0] if ".spec." in at else at.rstrip(".")
    assert "doesn't exist in the runtime" in found[f"{override}.targetJobs.1.name"]
    assert "must not have envs for the" in found[f"{at}containers.0.env"]
    assert "does not have" in found[f"{at}containers.1.name"]


TRAINJOB = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "TrainJob",
    "metadata": {"name": "tj"},
    "spec": {"runtimeRef": {"name": "torch-distributed"}},
}


def with_spec(**fields: Any) -> str:
    data = copy.deepcopy(TRAINJOB)
    data["spec"].update(fields)
    return yaml.safe_dump(data)


@pytest.mark.parametrize(
    ("text", "path", "words"),
    [
        (
            with_spec(mlPolicy={"numNodes": 2}),
            "spec.mlPolicy",
            "the ML policy belongs to the runtime (a TrainingRuntime's or ClusterTrainingRuntime's "
            "spec.mlPolicy), never to a TrainJob",
        ),
        (
            with_spec(podGroupPolicy={"coscheduling": {}}),
            "spec.podGroupPolicy",
            "the gang policy belongs to the runtime",
        ),
        (
            with_spec(podTemplateOverrides=[], runtimePatches=[]),
            "spec.podTemplateOverrides",
            "it is Trainer v2.1's, which v2.2 replaced with runtimePatches",
        ),
        (
            with_spec(podSpecOverrides=[], podTemplateOverrides=[]),
            "spec.podSpecOverrides",
            "it is Trainer v2.0's; v2.1 renamed it podTemplateOverrides",
        ),
        (
            with_spec(labels={"a": "b"}, runtimePatches=[]),
            "spec.labels",
            "give them in a runtime patch's trainingRuntimeSpec.template.metadata.labels",
        ),
        (  # checked against the v2.1 CRD: its podTemplateOverrides' own fields
            with_spec(
                podTemplateOverrides=[{"targetJobs": [{"name": "node"}], "nodeSelector": {}}]
            ),
            "spec.podTemplateOverrides.0.nodeSelector",
            'unknown field "spec.podTemplateOverrides.0.nodeSelector" (TrainJob\'s schema, v2.1.0)',
        ),
        (
            with_spec(podSpecOverrides=[{"targetJobs": [{"name": "node"}], "spec": {}}]),
            "spec.podSpecOverrides.0.spec",
            "(TrainJob's schema, v2.0.0)",
        ),
        (
            yaml.safe_dump({**TRAINJOB, "apiVersion": "kubeflow.org/v2alpha1"}),
            "apiVersion",
            "the Trainer v2 proposal's draft API, which no release served: write it as "
            "trainer.kubeflow.org/v1alpha1 TrainJob",
        ),
    ],
)
def test_a_field_in_the_wrong_place_is_refused_with_where_it_belongs(
    text: str, path: str, words: str
) -> None:
    found = problems(text)
    assert path in found and words in found[path], found


# Kueue's documentation's TrainJobs (site: tasks/run/trainjobs): a GPU requested, not limited
KUEUE_TRAINJOB = """\
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: pytorch-simple
  namespace: default
  labels:
    kueue.x-k8s.io/queue-name: user-queue
spec:
  runtimeRef:
    name: torch-distributed
    kind: ClusterTrainingRuntime
  trainer:
    numNodes: 2
    resourcesPerNode:
      requests:
        cpu: "1"
        memory: "2Gi"
        nvidia.com/gpu: 1
    command: [torchrun, train.py]
"""


def test_a_gpu_requested_without_a_limit_is_refused_at_resources_per_node() -> None:
    """The API server would refuse every node Job Trainer makes: said at the trainer's field,
    with what to add, never naming a Job."""
    experiment = doors.parse(KUEUE_TRAINJOB, source="tj.yaml")
    with pytest.raises(ManifestError) as error:
        engine.expand(experiment, stack="test", name="tj")
    (problem,) = error.value.problems
    assert problem.path == "spec.trainer.resourcesPerNode"
    assert "add limits.nvidia.com/gpu: 1" in problem.message and "Job" not in problem.message
    assert problem.line == 14
