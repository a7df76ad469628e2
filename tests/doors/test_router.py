"""The router picks the door by apiVersion; a Kubernetes resource no door reads gets one
clear refusal naming its kind and version, what is read instead, and where it came from."""

from __future__ import annotations

import pytest

from aichor_iac import doors
from aichor_iac.problems import ManifestError

CASES = [
    # (apiVersion, kind, a hint the refusal gives, or None)
    ("trainer.kubeflow.org/v1alpha1", "TrainJob", "Trainer v2 is not read yet"),
    ("jobset.x-k8s.io/v1alpha2", "JobSet", "operator: jobset has its shape"),
    ("tensorflow.org/v1alpha1", "TfJob", "retired tf-operator's, write it as a kubeflow.org/v1"),
    ("batch/v1", "Job", None),
    ("v1", "Pod", None),
    # Retired versions of the groups a door reads: that door refuses them.
    ("kubeflow.org/v1beta1", "TFJob", None),
    ("ray.io/v1alpha1", "RayCluster", None),
]


@pytest.mark.parametrize(("api_version", "kind", "hint"), CASES)
def test_a_resource_no_door_reads_is_refused_by_kind_and_version(api_version, kind, hint):
    text = f"# a comment\napiVersion: {api_version}\nkind: {kind}\nmetadata: {{name: x}}\n"
    with pytest.raises(ManifestError) as caught:
        doors.parse(text + "spec: {}\n", source="x.yaml")
    (problem,) = caught.value.problems
    assert (problem.path, problem.line) == ("kind", 3)
    assert f"{api_version} {kind} is not" in problem.message
    if hint:
        assert hint in problem.message
    # What is read instead: the group's current kinds (its door), or everything.
    if not api_version.startswith("ray.io/"):
        assert "kubeflow.org/v1 PyTorchJob" in problem.message
    if not api_version.startswith("kubeflow.org/"):
        assert "ray.io/v1 RayJob" in problem.message
    if not api_version.startswith(("kubeflow.org/", "ray.io/")):
        assert "AIchorManifest" in problem.message


@pytest.mark.parametrize("api_version", ["0.2.2", "0.2.3", None])
def test_an_aichor_manifest_goes_to_the_aichor_door(api_version):
    data = {"spec": {"operator": "batchjob", "image": "i", "command": "c"}}
    data["spec"]["types"] = {"Worker": {"resources": {"cpus": 1, "ramRatio": 1}}}
    if api_version is not None:
        data["apiVersion"] = api_version
    assert doors.validate(data).spec.operator == "batchjob"
