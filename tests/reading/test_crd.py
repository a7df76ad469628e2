"""Every custom resource is checked against its own CRD first, as the API server checks a
create (`aichor_iac.reading.crd`): types, enums, required fields, bounds, formats, unknown
fields (strict field validation), list-map keys given once, and the CRD's CEL rules that apply
on create. Each problem is in the API server's words, at the user's path and line, with a fix;
nothing that breaks the schema reaches a door."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import ROOT

from aichor_iac import doors
from aichor_iac.problems import ManifestError
from aichor_iac.reading import crd, text

REFUSED = Path(__file__).parent / "refused"
PYTORCHJOB = yaml.safe_load((ROOT / "tests/kubeflow/pytorch-simple.yaml").read_text())
TRAINJOB = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "TrainJob",
    "metadata": {"name": "tj"},
    "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2}},
}
JOBSET = {
    "apiVersion": "jobset.x-k8s.io/v1alpha2",
    "kind": "JobSet",
    "metadata": {"name": "js"},
    "spec": {
        "replicatedJobs": [
            {
                "name": "w",
                "template": {
                    "spec": {
                        "template": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}
                    }
                },
            }
        ]
    },
}
CONTAINER = "spec.pytorchReplicaSpecs.Master.template.spec.containers.0"


def changed(data: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """`data` with the field at `path` (dots; list indices as numbers) set, or deleted when
    `value` is DELETE."""
    data = copy.deepcopy(data)
    *parents, last = path.split(".")
    node: Any = data
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    key: Any = int(last) if isinstance(node, list) else last
    if value is DELETE:
        del node[key]
    else:
        node[key] = value
    return data


DELETE = object()


def problems(data: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ManifestError) as error:
        doors.validate(data, "cr.yaml")
    return {p.path: p.message for p in error.value.problems}


@pytest.mark.parametrize(
    ("data", "path", "words"),
    [
        (  # a type
            changed(PYTORCHJOB, "spec.runPolicy", {"backoffLimit": "three"}),
            "spec.runPolicy.backoffLimit",
            'Invalid value: "string": must be of type integer (PyTorchJob\'s schema, v1.9.4): '
            "give an integer",
        ),
        (  # an enum
            changed(JOBSET, "spec.successPolicy", {"operator": "Most"}),
            "spec.successPolicy.operator",
            'Unsupported value: "Most": supported values: "All", "Any" (JobSet\'s schema',
        ),
        (  # a required field
            changed(TRAINJOB, "spec.runtimeRef", {}),
            "spec.runtimeRef.name",
            "Required value (TrainJob's schema, v2.3.0): add it",
        ),
        (  # an unknown field, near a known one
            changed(TRAINJOB, "spec.trainer.numNode", 2),
            "spec.trainer.numNode",
            'unknown field "spec.trainer.numNode" (TrainJob\'s schema, v2.3.0): did you mean '
            "'numNodes'?",
        ),
        (  # an unknown field deep in a pod template
            changed(PYTORCHJOB, f"{CONTAINER}.gpus", 1),
            f"{CONTAINER}.gpus",
            "unknown field",
        ),
        (  # a bound
            changed(TRAINJOB, "spec.activeDeadlineSeconds", 0),
            "spec.activeDeadlineSeconds",
            "Invalid value: 0: should be greater than or equal to 1",
        ),
        (  # an int32 field past its format's bound
            changed(PYTORCHJOB, "spec.runPolicy", {"backoffLimit": 2**31}),
            "spec.runPolicy.backoffLimit",
            "should be between -2147483648 and 2147483647 (int32)",
        ),
        (  # int-or-string: neither
            changed(PYTORCHJOB, f"{CONTAINER}.resources", {"limits": {"cpu": True}}),
            f"{CONTAINER}.resources.limits.cpu",
            "must be of type integer or string",
        ),
        (  # a quantity's pattern
            changed(PYTORCHJOB, f"{CONTAINER}.resources", {"limits": {"cpu": "lots"}}),
            f"{CONTAINER}.resources.limits.cpu",
            'Invalid value: "lots": must be a quantity such as 500m, 2 or 4Gi',
        ),
        (  # a pattern, matched as RE2 matches it (`$` is the end of the text)
            changed(PYTORCHJOB, f"{CONTAINER}.resources", {"limits": {"cpu": "2\n"}}),
            f"{CONTAINER}.resources.limits.cpu",
            "must be a quantity such as 500m, 2 or 4Gi",
        ),
        (  # a list-map key given twice (at the key)
            changed(
                JOBSET,
                "spec.replicatedJobs",
                JOBSET["spec"]["replicatedJobs"] * 2,
            ),
            "spec.replicatedJobs.1.name",
            'Duplicate value: {"name": "w"} (JobSet\'s schema, v0.12.0): give each item once',
        ),
        (  # a list item of no type
            changed(PYTORCHJOB, f"{CONTAINER}.env", [None]),
            f"{CONTAINER}.env.0",
            'Invalid value: "null": must be of type object',
        ),
        (  # a field of the root the CRD does not have
            changed(JOBSET, "replicatedJobs", []),
            "replicatedJobs",
            'unknown field "replicatedJobs" (JobSet\'s schema, v0.12.0): remove it (known: '
            "apiVersion, kind, metadata, spec)",
        ),
        (  # a CEL rule (TrainJob's name)
            changed(TRAINJOB, "metadata.name", "a" * 64),
            "",
            "metadata.name must be no more than 63 characters",
        ),
        (  # a CEL rule at a nested field (RayJob's deletion strategy)
            {
                "apiVersion": "ray.io/v1",
                "kind": "RayJob",
                "metadata": {"name": "rj"},
                "spec": {
                    "entrypoint": "python x.py",
                    "deletionStrategy": {"onSuccess": {"policy": "DeleteCluster"}},
                },
            },
            "spec.deletionStrategy",
            "deletionStrategy requires either BOTH onSuccess and onFailure",
        ),
        (  # a CEL rule narrowed to the field the user wrote (JobSet's startup order)
            changed(
                JOBSET,
                "spec",
                {
                    "startupPolicy": {"startupPolicyOrder": "InOrder"},
                    "replicatedJobs": [
                        JOBSET["spec"]["replicatedJobs"][0],
                        {
                            **JOBSET["spec"]["replicatedJobs"][0],
                            "name": "v",
                            "dependsOn": [{"name": "w", "status": "Ready"}],
                        },
                    ],
                },
            ),
            "spec.replicatedJobs.1.dependsOn.0",
            "StartupPolicy and DependsOn APIs are mutually exclusive",
        ),
        (  # a field v1 moved: the door's fix
            changed(PYTORCHJOB, "spec.ttlSecondsAfterFinished", 60),
            "spec.ttlSecondsAfterFinished",
            "move it to spec.runPolicy.ttlSecondsAfterFinished",
        ),
    ],
)
def test_a_resource_that_breaks_its_crd_is_refused_at_the_field(
    data: dict[str, Any], path: str, words: str
) -> None:
    found = problems(data)
    assert path in found and words in found[path], found


def test_each_problem_has_its_line() -> None:
    data = changed(PYTORCHJOB, "spec.runPolicy", {"backoffLimit": "three"})
    source = yaml.safe_dump(data, sort_keys=False)
    with pytest.raises(ManifestError) as error:
        doors.parse(source, source="cr.yaml")
    (problem,) = error.value.problems
    line = next(i for i, s in enumerate(source.splitlines(), 1) if "backoffLimit" in s)
    assert problem.line == line and str(error.value).startswith(f"cr.yaml:{line}: ")


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (changed(TRAINJOB, "spec.suspend", None), "a null field is dropped, as the API server"),
        (changed(TRAINJOB, "status", {"anything": [1]}), "status is not read on create"),
        (
            changed(
                JOBSET, "spec.failurePolicy", {"rules": [{"action": "FailJobSet"}]}
            ),  # (JobSet's webhook names the rule before the schema is checked)
            "a failure rule's name is defaulted",
        ),
        (
            changed(PYTORCHJOB, f"{CONTAINER}.resources", {"limits": {"cpu": 2, "memory": "1Gi"}}),
            "int-or-string takes either",
        ),
        (
            changed(TRAINJOB, "metadata", {"generateName": "tj-"}),
            "a generateName completes the name the CEL rules read",
        ),
    ],
)
def test_what_the_api_server_accepts_passes(data: dict[str, Any], why: str) -> None:
    document = text.Document(data, {}, 1)
    written, found = crd.check(document.data, document.lines)
    assert found == [], why
    assert "status" not in written and None not in written["spec"].values(), why


def test_a_preserved_object_keeps_unknown_fields_and_a_declared_one_refuses_them() -> None:
    root = crd._strict(
        {
            "type": "object",
            "properties": {
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "closed": {"type": "object", "properties": {"a": {"type": "integer"}}},
            },
        }
    )
    schema = crd.Schema(root, "github.com/x/y@v1", "Thing")
    assert crd._schema_problems({"free": {"b": {"c": 1}}}, schema, {}) == []
    (problem,) = crd._schema_problems({"closed": {"b": 1}}, schema, {})
    assert problem.path == "closed.b" and "unknown field" in problem.message


@pytest.mark.parametrize("path", sorted(REFUSED.glob("*.yaml")), ids=lambda p: p.stem)
def test_the_inputs_that_crashed_are_clear_problems_at_their_field(path: Path) -> None:
    """Mutated public files that once ended in an internal error (issues 39 and 50)."""
    expected = {
        "companion-apiversion-list": ("", "a ConfigMap is apiVersion v1"),
        "jobset-podfailurepolicy-rule": (
            "spec.replicatedJobs.0.template.spec.podFailurePolicy.rules.0",
            'Invalid value: "null": must be of type object',
        ),
        "rayjob-submitter-spec-odd": (
            "spec.submitterPodTemplate.spec",
            'Invalid value: "string": must be of type object',
        ),
        "runtime-pod-spec-string": (
            "runtime: spec.template.spec.replicatedJobs.0.template.spec.template.spec",
            'Invalid value: "string": must be of type object',
        ),
        # (found by make fuzz: a TrainJob door fed a kind no CRD serves; a CEL rule on an
        # absent field)
        "trainjob-kind-payload": (
            "kind",
            "is not a custom resource aichor-iac reads: give trainer.kubeflow.org/v1alpha1 TrainJob",
        ),
        "jobset-claim-policy-without-templates": (
            "spec.volumeClaimPolicies.1",
            "no such member in mapping: 'templates' evaluating rule: namespace cannot be set",
        ),
        # (issue 50: a fuzzer outside the project; a runtime's replicated Job whose pod
        # template has no spec, which the JobSet's Job would be refused for)
        "runtime-pod-spec-deleted": (
            "runtime: spec.template.spec.replicatedJobs.1.template.spec.template.spec.containers",
            "give at least one container",
        ),
        "runtime-pod-spec-deleted-2": (
            "runtime: spec.template.spec.replicatedJobs.0.template.spec.template.spec.containers",
            "give at least one container",
        ),
        # (issue 68: a JobSet whose only replicated Job has replicas 0: an IndexError)
        "jobset-replicas-zero": (
            "spec.replicatedJobs.0.replicas",
            "0 makes no Job of this replicated Job: give 1 or more, or remove it",
        ),
    }[path.stem]
    with pytest.raises(ManifestError) as error:
        doors.load(path)
    found = {p.path: (p.message, p.line) for p in error.value.problems}
    assert expected[0] in found and expected[1] in found[expected[0]][0], found
    assert found[expected[0]][1] is not None


def _public(folder: str) -> list[Path]:
    return sorted((ROOT / "tests" / folder).glob("*.yaml"))


@pytest.mark.parametrize(
    "path",
    [*_public("kubeflow"), *_public("kuberay"), *_public("jobset"), *_public("trainer")],
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_the_public_files_pass_their_crds(path: Path) -> None:
    """The operators' own examples are valid for their CRDs (but the one the Training
    Operator still ships with v1alpha1 template fields)."""
    bad = {"xgboost-smoke-dist-xgboostjob_v1alpha1_rabit_test.yaml"}
    for document in text.documents(path.read_text(), str(path)):
        data = document.data
        if crd.served(data.get("apiVersion"), data.get("kind")):
            _, found = crd.check(data, document.lines)
            assert (found == []) != (path.name in bad), [p.format(path.name) for p in found]


def test_the_shipped_schemas_are_what_the_script_makes() -> None:
    """One file per CRD and tag the script lists, each naming its source, without the
    descriptions."""
    spec = importlib.util.spec_from_file_location("crd_schemas", ROOT / "scripts/crd_schemas.py")
    assert spec and spec.loader
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    shipped = sorted(crd.CRDS.glob("*.json"))
    tags = {(repo, tag) for repo, tag, _, names in script.SOURCES for _ in names}
    assert len(shipped) == sum(len(names) for *_, names in script.SOURCES)
    for path in shipped:
        data = json.loads(path.read_text())
        repo, tag = data["source"].removeprefix("github.com/").split("@")
        assert (repo, tag) in tags and path.stem.endswith(f"_{tag}")
        assert '"description"' not in path.read_text()


def test_a_resource_beside_the_experiment_is_checked_against_its_own_crd() -> None:
    """A RayJob on the RayCluster beside it: the cluster's problems name the cluster, at its
    own lines; a runtime beside a TrainJob: `runtime:`."""
    job = yaml.safe_load((ROOT / "tests/kuberay/ray-job.use-existing-raycluster.yaml").read_text())
    text = (ROOT / "tests/kuberay/ray-cluster.sample.yaml").read_text()
    cluster = next(d for d in yaml.safe_load_all(text) if d and d["kind"] == "RayCluster")
    cluster["metadata"]["name"] = job["spec"]["clusterSelector"]["ray.io/cluster"]
    cluster["spec"]["headGroupSpec"]["rayStartParam"] = {}
    documents = [job, cluster]
    with pytest.raises(ManifestError) as error:
        doors.parse(yaml.safe_dump_all(documents, sort_keys=False), source="rj.yaml")
    (problem,) = error.value.problems
    name = cluster["metadata"]["name"]
    assert problem.path == f"RayCluster {name}: spec.headGroupSpec.rayStartParam"
    assert "did you mean 'rayStartParams'?" in problem.message and problem.line is not None


def test_the_shipped_kubernetes_schemas_are_kubernetes_validates_newest() -> None:
    """The kinds' strict schemas shipped for runtime checks are those of the newest Kubernetes
    kubernetes-validate (the test extra) ships, descriptions left out, with the definitions
    they reach."""
    import kubernetes_validate.utils as kv

    from aichor_iac.reading import podtemplate

    version = kv.latest_version()
    assert (podtemplate.KUBERNETES / "VERSION").read_text().strip() == version
    spec = importlib.util.spec_from_file_location("crd_schemas", ROOT / "scripts/crd_schemas.py")
    assert spec and spec.loader
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    base = f"kubernetes-json-schema/v{version}-local-strict"
    made = {
        n: script.stripped(kv.schema_contents(f"{base}/{n}.json", version)) for n in script.KINDS
    }
    every = script.stripped(kv.schema_contents(f"{base}/_definitions.json", version))
    made["_definitions"] = script.reached(every, made.values())  # (those the kinds reach)
    assert len(made["_definitions"]["$defs"]) < len(every["$defs"]) / 3
    for name, data in made.items():
        assert json.loads((podtemplate.KUBERNETES / f"{name}.json").read_text()) == data
