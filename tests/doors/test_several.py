"""Several experiments in one stack (issue 41): a file of several custom resources or AIchor
manifests, or a directory of files, is one component per experiment, each with the objects
beside it that it uses; refused with the fix when an object is used by none or by several,
when two have one name, or when one of several has none."""

from __future__ import annotations

import copy
import json
import re
import runpy
from pathlib import Path
from typing import Any

import pulumi
import pytest
import schemas
import yaml
from conftest import ROOT, pytorch_manifest

from aichor_iac import cli, doors, engine
from aichor_iac.problems import ManifestError

SAMPLE = (ROOT / "tests/kuberay/ray-job.sample.yaml").read_text()
RAYJOB, CODE = (d for d in yaml.safe_load_all(SAMPLE) if d)  # (a RayJob, its ConfigMap)
PYTORCHJOB = yaml.safe_load((ROOT / "tests/kubeflow/pytorch-simple.yaml").read_text())


def renamed_rayjob(name: str, code: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """KubeRay's sample RayJob and its ConfigMap of code, both renamed."""
    job, config_map = copy.deepcopy(RAYJOB), copy.deepcopy(CODE)
    job["metadata"]["name"], config_map["metadata"]["name"] = name, code
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    head["volumes"][0]["configMap"]["name"] = code
    return job, config_map


def rbac(name: str) -> list[dict[str, Any]]:
    """A ServiceAccount, a Role and the RoleBinding between them, all named `name`."""
    rbac_v1 = "rbac.authorization.k8s.io/v1"
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
        {
            "apiVersion": rbac_v1,
            "kind": "Role",
            "metadata": {"name": f"{name}-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
        },
        {
            "apiVersion": rbac_v1,
            "kind": "RoleBinding",
            "metadata": {"name": f"{name}-binding"},
            "subjects": [{"kind": "ServiceAccount", "name": name}],
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": f"{name}-reader",
            },
        },
    ]


def text(*documents: dict[str, Any]) -> str:
    return yaml.safe_dump_all(documents, sort_keys=False)


def program() -> dict[str, Any]:
    """__main__.py's body: each experiment's outputs under its name."""
    found = runpy.run_path(str(ROOT / "__main__.py"))["experiments"]
    return {name: component.outputs for name, component in found.items()}


def problems_of(data: str) -> list[tuple[str, str, int | None]]:
    with pytest.raises(ManifestError) as caught:
        doors.parse_all(data, "two.yaml")
    return [(p.path, p.message, p.line) for p in caught.value.problems]


def test_two_custom_resources_are_two_experiments_each_with_the_objects_it_uses() -> None:
    one, code_one = renamed_rayjob("ray-one", "code-one")
    two, code_two = renamed_rayjob("ray-two", "code-two")
    account, role, binding = rbac("runner")
    two["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["serviceAccountName"] = (
        "runner"
    )
    # the objects beside them in no particular order: each goes with the one that uses it
    data = text(code_two, one, binding, PYTORCHJOB, role, two, account, code_one)
    found = doors.parse_all(data, "three.yaml")
    assert [e.name for e in found] == ["ray-one", "pytorch-simple", "ray-two"]
    used = {e.name: sorted(c["metadata"]["name"] for c in e.spec.origin.companions) for e in found}
    assert used == {
        "ray-one": ["code-one"],
        "pytorch-simple": [],
        "ray-two": ["code-two", "runner", "runner-binding", "runner-reader"],
    }
    objects = engine.render(found)
    names = [(o["kind"], o["metadata"]["name"]) for o in objects]
    assert len(names) == len(set(names))  # each object once
    assert {("ConfigMap", "code-one"), ("ConfigMap", "code-two"), ("Role", "runner-reader")} <= set(
        names
    )
    assert {
        ("Job", "ray-one-head"),
        ("Job", "pytorch-simple-master"),
        ("Job", "ray-two-head"),
    } <= set(names)
    for obj in objects:
        schemas.validate(obj)


def test_a_rayjob_with_the_raycluster_it_selects_is_one_experiment_beside_another() -> None:
    cluster = {**copy.deepcopy(RAYJOB), "kind": "RayCluster"}
    cluster["spec"] = cluster["spec"]["rayClusterSpec"]
    job = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "on-the-cluster"},
        "spec": {
            "entrypoint": "python /home/ray/samples/sample_code.py",
            "clusterSelector": {"ray.io/cluster": "rayjob-sample"},
        },
    }
    found = doors.parse_all(text(job, PYTORCHJOB, cluster, CODE), "x.yaml")
    assert [e.name for e in found] == ["rayjob-sample", "pytorch-simple"]


@pytest.mark.parametrize(
    ("documents", "path", "reason"),
    [
        (  # a ConfigMap both RayJobs mount
            lambda: [*renamed_rayjob("a", "code")[:1], *renamed_rayjob("b", "code")],
            "ConfigMap code",
            "used by a and b: an object beside the experiments is created once, with the one "
            "experiment that uses it",
        ),
        (  # a ConfigMap neither mounts
            lambda: [*renamed_rayjob("a", "code-a"), renamed_rayjob("b", "code-a")[0], CODE],
            "ConfigMap ray-job-code-sample",
            "used by none of the experiments of this file",
        ),
        (
            lambda: [renamed_rayjob("a", "c")[0], PYTORCHJOB, renamed_rayjob("a", "c")[0], CODE],
            "name",
            "a second experiment named 'a' (the first is in line 1): the experiments of a stack "
            "have names of their own; rename one",
        ),
        (
            lambda: [pytorch_manifest(), {**pytorch_manifest(), "name": "b"}],
            "name",
            "one of several experiments in this file, and it has no name",
        ),
    ],
)
def test_what_a_file_of_several_experiments_is_refused_for(documents, path, reason) -> None:
    found = problems_of(text(*documents()))
    assert any(p == path and reason in r and line for p, r, line in found), found


def test_a_reader_of_one_experiment_names_the_reader_of_several() -> None:
    data = text(pytorch_manifest() | {"name": "a"}, pytorch_manifest() | {"name": "b"})
    with pytest.raises(
        ManifestError,
        match=re.escape("holds 2 experiments (a, b): read them with aichor_iac.load_all"),
    ):
        doors.parse(data)


def test_a_directory_is_the_experiments_of_its_yaml_files(tmp_path: Path) -> None:
    (tmp_path / "b.yaml").write_text(text(pytorch_manifest() | {"name": "control"}))
    (tmp_path / "a.yml").write_text(text(*renamed_rayjob("variant", "code-v")))
    (tmp_path / "notes.txt").write_text("not an experiment")
    assert [e.name for e in doors.load_all(tmp_path)] == ["variant", "control"]
    (tmp_path / "c.yaml").write_text(text(pytorch_manifest() | {"name": "control"}))
    with pytest.raises(ManifestError, match=re.escape(f"the first is in {tmp_path / 'b.yaml'}")):
        doors.load_all(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ManifestError, match="holds no YAML file"):
        doors.load_all(tmp_path / "empty")


def test_the_program_exports_each_experiment_under_its_name_and_creates_the_namespace_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest = tmp_path / "sweep.yaml"
    manifest.write_text(
        text(pytorch_manifest() | {"name": "lr-1"}, pytorch_manifest() | {"name": "lr-2"})
    )
    exports: dict[str, Any] = {}
    monkeypatch.setattr(pulumi, "export", lambda key, value: exports.__setitem__(key, value))
    monkeypatch.chdir(ROOT)
    config = {
        "aichor:manifest": str(manifest),
        "aichor:namespace": "sweeps",
        "aichor:createNamespace": "true",
    }
    rendering = engine.run(program, config=config)
    assert sorted(exports) == ["lr-1", "lr-2"]
    assert exports["lr-2"]["entryPoint"] == "lr-2-master"
    namespaces = [r for r in rendering.resources if r.kind == "Namespace"]
    (namespace,) = namespaces
    second = [
        r
        for r in rendering.resources
        if r.is_kubernetes and r.inputs["metadata"]["name"].startswith("lr-2")
    ]
    assert second and all(namespace.urn in r.dependencies for r in second)


def test_the_cli_validates_renders_and_previews_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "two.yaml"
    manifest.write_text(
        text(pytorch_manifest() | {"name": "lr-1"}, pytorch_manifest() | {"name": "lr-2"})
    )
    assert cli.main(["validate", str(manifest)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{manifest}: valid pytorch manifest (lr-1)",
        f"{manifest}: valid pytorch manifest (lr-2)",
    ]
    assert cli.main(["validate", str(manifest), "--output", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert [e["name"] for e in document["experiments"]] == ["lr-1", "lr-2"]
    assert cli.main(["preview", str(manifest)]) == 0
    out = capsys.readouterr().out
    assert "Totals: 6 pods" in out and out.index("lr-1-worker") < out.index("lr-2 ")
    assert cli.main(["render", str(manifest), "--name", "x"]) == 2
    assert "--name: names one experiment" in capsys.readouterr().err
    assert cli.main(["convert", str(manifest)]) == 2
    assert "holds 2 experiments (lr-1, lr-2): convert takes one" in capsys.readouterr().err
