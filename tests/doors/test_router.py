"""The router picks the door by apiVersion; a Kubernetes resource no door reads gets one
clear refusal naming its kind and version, what is read instead, and where it came from."""

from __future__ import annotations

import pytest

from aichor_iac import doors
from aichor_iac.problems import ManifestError

CASES = [
    # (apiVersion, kind, a hint the refusal gives, or None)
    ("trainer.kubeflow.org/v1alpha2", "TrainJob", "give trainer.kubeflow.org/v1alpha1 TrainJob"),
    ("jobset.x-k8s.io/v1alpha1", "JobSet", "give jobset.x-k8s.io/v1alpha2 JobSet"),
    ("batch/v1", "Job", None),
    ("v1", "Pod", None),
    # A version a door's group never had: that door refuses it.
    ("kubeflow.org/v3", "PyTorchJob", None),
    ("ray.io/v2", "RayCluster", None),
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
    read = {
        "kubeflow.org/": "kubeflow.org/v1 PyTorchJob",
        "ray.io/": "ray.io/v1 RayJob",
        "jobset.x-k8s.io/": "jobset.x-k8s.io/v1alpha2 JobSet",
        "trainer.kubeflow.org/": "trainer.kubeflow.org/v1alpha1 TrainJob",
    }
    door = next((g for g in read if api_version.startswith(g)), None)
    for group, kind_read in read.items():
        assert (kind_read in problem.message) == (door in (None, group)), problem.message
    assert ("AIchorManifest" in problem.message) == (door is None)


@pytest.mark.parametrize(
    ("api_version", "kind", "meant"),
    [
        ("kubeflow.org/v1", "PytorchJob", "PyTorchJob (apiVersion: kubeflow.org/v1)"),
        ("kubeflow.org/v1", "MpiJob", "MPIJob (apiVersion: kubeflow.org/v2beta1)"),
        ("kubeflow.org/v1beta1", "Experimnt", "Experiment (apiVersion: kubeflow.org/v1beta1)"),
        ("example.com/v1", "Rayjob", "RayJob (apiVersion: ray.io/v1)"),
        (
            "trainer.kubeflow.org/v1alpha1",
            "TrainingJob",
            "TrainJob (apiVersion: trainer.kubeflow.org/v1alpha1)",
        ),
        ("jobset.x-k8s.io/v1alpha2", "Jobset", "JobSet (apiVersion: jobset.x-k8s.io/v1alpha2)"),
    ],
)
def test_a_kind_near_one_read_gets_did_you_mean(api_version, kind, meant) -> None:
    text = f"apiVersion: {api_version}\nkind: {kind}\nmetadata: {{name: x}}\nspec: {{}}\n"
    with pytest.raises(ManifestError) as caught:
        doors.parse(text, source="x.yaml")
    (problem,) = caught.value.problems
    assert (problem.path, problem.line) == ("kind", 2)
    assert problem.message.endswith(f"did you mean kind: {meant}?"), problem.message


def test_every_kind_read_is_listed_for_a_kind_near_none() -> None:
    text = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {}\n"
    with pytest.raises(ManifestError, match=r"kubeflow\.org/v1beta1 Experiment, ray\.io/v1 RayJob"):
        doors.parse(text, source="x.yaml")


RETIRED = [
    ("tensorflow.org/v1alpha1", "TfJob", "kubeflow.org/v1 TFJob"),
    ("kubeflow.org/v1alpha2", "TFJob", "kubeflow.org/v1 TFJob"),
    ("kubeflow.org/v1beta1", "TFJob", "kubeflow.org/v1 TFJob"),
    ("kubeflow.org/v1beta2", "PyTorchJob", "kubeflow.org/v1 PyTorchJob"),
    ("kubeflow.org/v1alpha1", "XGBoostJob", "kubeflow.org/v1 XGBoostJob"),
    ("kubeflow.org/v1alpha2", "MPIJob", "kubeflow.org/v2beta1 MPIJob"),
    ("ray.io/v1alpha1", "RayJob", "ray.io/v1 RayJob"),
    ("ray.io/v1alpha1", "RayCluster", "ray.io/v1 RayCluster"),
]


@pytest.mark.parametrize(("api_version", "kind", "current"), RETIRED)
def test_a_retired_version_says_which_replaced_it(api_version, kind, current):
    text = f"apiVersion: {api_version}\nkind: {kind}\nmetadata: {{name: x}}\nspec: {{}}\n"
    with pytest.raises(ManifestError) as caught:
        doors.parse(text, source="old.yaml")
    (problem,) = caught.value.problems
    assert (problem.path, problem.line) == ("apiVersion", 1)
    assert problem.message.startswith(f"{api_version} {kind} is a retired version: write it as ")
    assert f"write it as {current} " in problem.message


def test_an_unrendered_template_says_to_render_it_first():
    text = (
        "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: {{ .Release.Name }}\n"
        "{{- if .Values.gpu }}\nspec: {}\n{{- end }}\n"
    )
    with pytest.raises(ManifestError, match=r"looks like a template .* render it first"):
        doors.parse(text, source="chart.yaml")


@pytest.mark.parametrize("api_version", ["0.2.2", "0.2.3", None])
def test_an_aichor_manifest_goes_to_the_aichor_door(api_version):
    data = {"spec": {"operator": "batchjob", "image": "i", "command": "c"}}
    data["spec"]["types"] = {"Worker": {"resources": {"cpus": 1, "ramRatio": 1}}}
    if api_version is not None:
        data["apiVersion"] = api_version
    assert doors.validate(data).spec.operator == "batchjob"


def test_a_directory_reports_every_files_problems(tmp_path) -> None:
    (tmp_path / "a.yaml").write_text("spec:\n  operator: pytorch\n  image: i\n  command: c\n")
    (tmp_path / "b.yaml").write_text("apiVersion: kubeflow.org/v1\nkind: PytorchJob\n")
    (tmp_path / "c.yaml").write_text("kind: AIchorManifest\nspec: [\n")
    with pytest.raises(ManifestError) as caught:
        doors.load_all(tmp_path)
    lines = str(caught.value).splitlines()
    assert [line.split(": ")[0] for line in lines] == [
        f"{tmp_path / 'a.yaml'}:1",  # (each problem at its own file and line)
        f"{tmp_path / 'b.yaml'}:2",
        f"{tmp_path / 'c.yaml'}:2",
    ], lines
    assert "spec.types: required" in lines[0] and "did you mean kind: PyTorchJob" in lines[1]


def test_every_kind_read_is_declared_once_with_its_door_and_its_crd():
    # identities.ENTRANCES: the one table of the custom resources read; each has its door's
    # module, and a CRD shipped to check it against (Katib's Experiment: its own model).
    import importlib

    from aichor_iac.doors.identities import ENTRANCES, KATIB
    from aichor_iac.doors.kubeflow.spec import KINDS
    from aichor_iac.reading import crd

    for entrance in ENTRANCES:
        importlib.import_module(f"aichor_iac.doors.{entrance.door}")
        served = crd.served(entrance.api_version, entrance.kind)
        assert served == ((entrance.api_version, entrance.kind) != KATIB), entrance
    kubeflow = [e.kind for e in ENTRANCES if e.door == "kubeflow.door"]
    assert kubeflow == list(KINDS)


def test_each_door_of_an_api_group_has_the_interface_the_router_reads():
    import importlib
    import inspect

    from aichor_iac.doors.identities import DOORS
    from aichor_iac.doors.router import Door

    for door in DOORS.values():
        module = importlib.import_module(f"aichor_iac.doors.{door}")
        assert isinstance(module, Door), door
        parameters = list(inspect.signature(module.validate).parameters)
        assert parameters == ["data", "source", "lines", "companions", "runtimes"], door
