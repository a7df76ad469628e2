"""A problem found on the objects built from a custom resource — the API server's rules its CRD's
schema omits (label keys, extended resources, ...) — is reported at the field the user wrote:
a Kubeflow replica's template, a KubeRay group's or submitter's template, a JobSet's replicated
Job, a TrainJob's trainer or its runtime's template. Never at a Job, group or object of
aichor-iac's own."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml
from conftest import ROOT

from aichor_iac import doors, engine
from aichor_iac.problems import ManifestError

BAD_KEY = {"a b": "x"}  # (a node selector key the API server refuses)


def first(path: str, kind: str) -> dict[str, Any]:
    return next(d for d in yaml.safe_load_all((ROOT / path).read_text()) if d["kind"] == kind)


def pod(template: dict[str, Any]) -> dict[str, Any]:
    return template["template"]["spec"]


def pytorchjob(data: dict[str, Any]) -> None:
    pod(data["spec"]["pytorchReplicaSpecs"]["Worker"])["nodeSelector"] = BAD_KEY


def raycluster(data: dict[str, Any]) -> None:
    pod(data["spec"]["workerGroupSpecs"][0])["tolerations"] = [{"key": "-x", "operator": "Exists"}]


def rayjob(data: dict[str, Any]) -> None:
    data["spec"]["submitterPodTemplate"]["spec"]["nodeSelector"] = BAD_KEY


def jobset(data: dict[str, Any]) -> None:
    pod(data["spec"]["replicatedJobs"][1]["template"]["spec"])["nodeSelector"] = BAD_KEY


def trainjob(data: dict[str, Any]) -> None:
    data["spec"]["trainer"]["resourcesPerNode"] = {"requests": {"nvidia.com/gpu": 1}}


RUNTIME = """\
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainingRuntime
metadata: {name: mine}
spec:
  mlPolicy: {numNodes: 1, torch: {}}
  template:
    spec:
      replicatedJobs:
        - name: node
          template:
            metadata:
              labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}
            spec:
              template:
                spec:
                  nodeSelector: {"a b": x}
                  containers: [{name: node, image: pytorch/pytorch}]
---
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: tj}
spec:
  runtimeRef: {name: mine, kind: TrainingRuntime}
"""


@pytest.mark.parametrize(
    ("path", "kind", "change", "field"),
    [
        (
            "tests/kubeflow/pytorch-simple.yaml",
            "PyTorchJob",
            pytorchjob,
            "spec.pytorchReplicaSpecs.Worker.template.spec.nodeSelector.a b",
        ),
        (
            "tests/kuberay/ray-cluster.sample.yaml",
            "RayCluster",
            raycluster,
            "spec.workerGroupSpecs.0.template.spec.tolerations.0",
        ),
        (
            "tests/kuberay/ray-job.light-weight-submitter.yaml",
            "RayJob",
            rayjob,
            "spec.submitterPodTemplate.spec.nodeSelector.a b",
        ),
        (
            "tests/jobset/simple.paralleljobs.yaml",
            "JobSet",
            jobset,
            "spec.replicatedJobs.1.template.spec.template.spec.nodeSelector.a b",
        ),
        (
            "tests/trainer_shapes/v2.1.kubeflow-podtemplate-overrides.twin.yaml",
            "TrainJob",
            trainjob,
            "spec.trainer.resourcesPerNode",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) and "/" not in v and "." not in v else None,
)
def test_a_rule_of_the_built_objects_is_at_the_field_written(
    path: str, kind: str, change: Callable[[dict[str, Any]], None], field: str
) -> None:
    data = first(path, kind)
    change(data)
    (problem,) = refused(yaml.safe_dump(data))
    assert problem.path == field and problem.line is not None
    assert "Job/" not in problem.message and "spec.types" not in problem.path


def test_a_rule_of_a_runtime_given_beside_is_at_the_runtime() -> None:
    (problem,) = refused(RUNTIME)
    assert problem.path == (
        "runtime: spec.template.spec.replicatedJobs.0.template.spec.template.spec.nodeSelector.a b"
    )


def refused(text: str) -> list[Any]:
    with pytest.raises(ManifestError) as error:
        engine.expand(doors.parse(text, source="cr.yaml"), stack="test", name="exp")
    return error.value.problems
