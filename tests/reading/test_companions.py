"""Objects given beside a custom resource in its file (`aichor_iac.reading.companions`): each
namespaced kind is created by the stack in the experiment's namespace before the pods, as
written (valid against the strict schema and the API server's rules); a Secret's values never
leave the stack state; cluster-scoped kinds, workloads and invalid objects are refused at
their line with the reason."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import schemas
import yaml
from conftest import expand

from aichor_iac import doors
from aichor_iac.problems import ManifestError
from aichor_iac.rules import limits

sys.path.insert(0, str(Path(__file__).parents[1] / "doors"))
from test_kubeflow import custom_resource
from test_kuberay import raycluster

RBAC = "rbac.authorization.k8s.io/v1"
CLIENT = {  # a Ray client's Service, as KubeRay users add one for `ray://`
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {"name": "ray-client", "labels": {"team": "a"}},
    "spec": {
        "type": "NodePort",
        "selector": {"ray.io/node-type": "head"},
        "ports": [{"name": "client", "port": 10001, "targetPort": 10001}],
    },
}
COMPANIONS = [
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "code"}, "data": {"a": "1"}},
    CLIENT,
    {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "token"},
        "stringData": {"token": "hunter2-plain"},
        "data": {"key": "aHVudGVyMi1lbmNvZGVk"},  # hunter2-encoded
    },
    {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    },
    {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "ray", "namespace": "x"}},
    {
        "apiVersion": RBAC,
        "kind": "Role",
        "metadata": {"name": "events"},
        "rules": [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}],
    },
    {
        "apiVersion": RBAC,
        "kind": "RoleBinding",
        "metadata": {"name": "events"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "events"},
        "subjects": [
            {"kind": "ServiceAccount", "name": "ray", "namespace": "x"},
            {"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"},
        ],
    },
    {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "deny"},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
    },
    {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": "dashboard"},
        "spec": {
            "rules": [
                {
                    "http": {
                        "paths": [
                            {
                                "path": "/",
                                "pathType": "Prefix",
                                "backend": {
                                    "service": {"name": "exp-head", "port": {"number": 8265}}
                                },
                            }
                        ]
                    }
                }
            ]
        },
    },
]


def file_with(tmp_path: Path, *documents: dict[str, Any], resource: Any = None) -> Path:
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump_all([resource or raycluster(), *documents], sort_keys=False))
    return path


@pytest.mark.parametrize(
    "resource",
    [raycluster(), custom_resource("PyTorchJob", {"Master": 1, "Worker": 2})],
    ids=["RayCluster", "PyTorchJob"],
)
def test_every_namespaced_kind_is_created_first_in_the_experiments_namespace(
    tmp_path: Path, resource: dict[str, Any]
) -> None:
    rendering = expand(file_with(tmp_path, *COMPANIONS, resource=resource), namespace="ml")
    objects = rendering.objects
    made = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    first_job = min(i for i, o in enumerate(objects) if o["kind"] == "Job")
    for given in COMPANIONS:
        obj = made[given["kind"], given["metadata"]["name"]]
        assert objects.index(obj) < first_job
        assert obj["metadata"]["namespace"] == "ml"
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "aichor"
        for key in set(given) - {"metadata", "data", "stringData", "subjects"}:
            assert obj[key] == given[key], key
        schemas.validate(obj)
    assert made["Service", "ray-client"]["metadata"]["labels"]["team"] == "a"
    assert limits.check(objects) == []
    # The pods are created after every companion (Pulumi's dependencies)
    job = next(r for r in rendering.resources if r.type.endswith("batch/v1:Job"))
    after = {urn.rsplit("::", 1)[1] for urn in job.dependencies}
    for given in COMPANIONS:
        assert f"exp-{given['kind'].lower()}-{given['metadata']['name']}" in after


def test_a_rolebinding_binds_the_service_account_of_the_same_file(tmp_path: Path) -> None:
    objects = expand(file_with(tmp_path, *COMPANIONS), namespace="ml").objects
    binding = next(o for o in objects if o["kind"] == "RoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "ray", "namespace": "ml"},
        {"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"},
    ]


def test_a_secrets_values_never_leave_the_stack_state(tmp_path: Path) -> None:
    """Rendered, previewed or registered, a Secret of the user's has only redacted values."""
    path = file_with(tmp_path, *COMPANIONS)
    rendering = expand(path)
    secret = next(o for o in rendering.objects if o["metadata"]["name"] == "token")
    assert secret["stringData"] == {"token": "[secret]"} and secret["data"] == {"key": "[secret]"}
    text = repr(rendering.resources) + repr(rendering.objects) + repr(rendering.outputs)
    assert "hunter2" not in text and "aHVudGVy" not in text


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (
            {"apiVersion": RBAC, "kind": "ClusterRole", "metadata": {"name": "r"}},
            "a ClusterRole is cluster-scoped: aichor-iac creates objects only in the experiment's",
        ),
        (
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}},
            "a Namespace is cluster-scoped",
        ),
        (
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "Queue",
                "metadata": {"name": "q"},
            },
            "a Queue is cluster-scoped",
        ),
        (
            {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "redis"}},
            "a Deployment beside the experiment: aichor-iac creates beside a custom resource only",
        ),
        (
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a.b"}, "spec": {}},
            "Service a.b.metadata.name: give a DNS-1035 label",
        ),
        (
            {**CLIENT, "spec": {"ports": [{"port": "http"}]}},
            "Service ray-client.spec.ports.0.port: not a valid Service",
        ),
        (
            {"apiVersion": RBAC, "kind": "Role", "metadata": {"name": "a/b"}, "rules": []},
            "Role a/b.metadata.name: give a name without '/'",
        ),
        (
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"k": "%%"}},
            "Secret s.data.k: not base64: give the value in stringData, or encode it",
        ),
        (
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "code"}, "data": {}},
            "ConfigMap code: is given twice; keep one",
        ),
    ],
)
def test_what_is_not_created_beside_the_experiment_is_refused_at_its_line(
    tmp_path: Path, document: dict[str, Any], message: str
) -> None:
    path = file_with(tmp_path, COMPANIONS[0], document)
    with pytest.raises(ManifestError) as error:
        doors.load(path)
    text = str(error.value)
    assert message in text, text
    line = next(p.line for p in error.value.problems if message.split(":")[0] in p.format(""))
    assert line is not None and line > 1  # (the document's, after the resource's)


def test_problems_of_the_resource_and_of_its_companions_come_together(tmp_path: Path) -> None:
    cr = raycluster()
    cr["spec"]["headGroupSpec"]["serviceType"] = "LoadBalancer"
    bad = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a.b"}, "spec": {}}
    with pytest.raises(ManifestError) as error:
        doors.load(file_with(tmp_path, bad, resource=cr))
    paths = [p.path for p in error.value.problems]
    assert "spec.headGroupSpec.serviceType" in paths and "Service a.b.metadata.name" in paths


def test_a_name_aichor_iac_uses_is_refused(tmp_path: Path) -> None:
    """A Service named as the experiment's own (the headless Service `exp`) would make
    `pulumi up` fail half-way (AlreadyExists): refused before anything is created."""
    taken = {**CLIENT, "metadata": {"name": "exp"}}
    with pytest.raises(ManifestError) as error:
        expand(file_with(tmp_path, taken))
    assert "Service exp: is also the name of an object aichor-iac creates" in str(error.value)
