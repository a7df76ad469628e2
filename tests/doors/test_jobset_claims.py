"""JobSet's volumeClaimPolicies (v0.12.0): one claim `<template>-<jobset>` per template, made
before the pods and labelled with the JobSet's name; a `persistentVolumeClaim` volume on every
pod template that mounts it; Retain keeps it after `pulumi destroy`; what the webhook refuses
is refused at the field."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import expand
from stack_model import Stack
from test_jobset import job, jobset

from aichor_iac.problems import ManifestError


def mounting(name: str, *volumes: str, init: bool = False) -> dict[str, Any]:
    rjob = job(name)
    pod = rjob["template"]["spec"]["template"]["spec"]
    mounts = [{"name": v, "mountPath": f"/mnt/{v}"} for v in volumes]
    if init:
        pod["initContainers"] = [{"name": "get", "image": "busybox", "volumeMounts": mounts}]
    else:
        pod["containers"][0]["volumeMounts"] = mounts
    return rjob


def claim(name: str, **metadata: Any) -> dict[str, Any]:
    spec = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}
    return {"metadata": {"name": name, **metadata}, "spec": spec}


def data(*policies: dict[str, Any], rjobs: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    rjobs = rjobs or (mounting("get", "cache", init=True), mounting("train", "cache", "ckpt"))
    return jobset(*rjobs, volumeClaimPolicies=list(policies))


def test_each_template_is_a_claim_mounted_where_the_pods_ask() -> None:
    rendering = expand(
        data(
            {"templates": [claim("cache", labels={"team": "a"}, annotations={"note": "x"})]},
            {"templates": [claim("ckpt")], "retentionPolicy": {"whenDeleted": "Retain"}},
        ),
        name="js",
    )
    objects = {f"{o['kind']}/{o['metadata']['name']}": o for o in rendering.objects}
    cache = objects["PersistentVolumeClaim/cache-js"]
    assert cache["metadata"]["labels"]["team"] == "a"
    assert cache["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"] == "js"
    assert cache["metadata"]["annotations"] == {"note": "x"}
    assert cache["spec"]["accessModes"] == ["ReadWriteMany"]
    volumes = {
        job: {
            v["name"]: v["persistentVolumeClaim"]["claimName"]
            for v in objects[f"Job/js-{job}-0"]["spec"]["template"]["spec"]["volumes"]
            if "persistentVolumeClaim" in v  # (not the progress receiver's files)
        }
        for job in ("get", "train")
    }
    assert volumes == {
        "get": {"cache": "cache-js"},
        "train": {"cache": "cache-js", "ckpt": "ckpt-js"},
    }
    kept = [r for r in rendering.resources if r.options.get("retainOnDelete")]
    assert [(r.kind, r.inputs["metadata"]["name"]) for r in kept] == [
        ("PersistentVolumeClaim", "ckpt-js")
    ]
    # (created before the Jobs: each Job depends on the claims)
    stack = Stack()
    stack.up(rendering)
    assert ("PersistentVolumeClaim", "default", "cache-js") in stack.cluster
    stack.destroy()
    assert set(stack.cluster) == {("PersistentVolumeClaim", "default", "ckpt-js")}


@pytest.mark.parametrize(
    ("given", "path", "message"),
    [
        (
            data({"templates": [claim("unused")]}),
            "spec.volumeClaimPolicies.0.templates.0.metadata.name",
            "mounts it",
        ),
        (
            data({"templates": [claim("cache")]}, {"templates": [claim("cache")]}),
            "spec.volumeClaimPolicies.1.templates.0.metadata.name",
            "unique",
        ),
        (
            data({"templates": [claim("cache", namespace="other")]}),
            "spec.volumeClaimPolicies.0.templates.0.metadata.namespace",
            "namespace cannot be set",
        ),
        (
            data({"templates": [claim("c" * 61)]}),
            "spec.volumeClaimPolicies.0.templates.0.metadata.name",
            "longer than 63",
        ),
        (
            data({"templates": [claim("Cache_1")]}),
            "spec.volumeClaimPolicies.0.templates.0.metadata.name",
            "DNS-1123",
        ),
        (
            data({"templates": [{"metadata": {"name": "cache"}, "spec": {"accessModes": "RWX"}}]}),
            "spec.volumeClaimPolicies.0.templates.0.spec.accessModes",
            "must be of type array",
        ),
        (
            data({"templates": [claim("cache")], "retentionPolicy": {"whenDeleted": "Keep"}}),
            "spec.volumeClaimPolicies.0.retentionPolicy.whenDeleted",
            "",
        ),
    ],
)
def test_what_the_webhook_refuses(given: dict[str, Any], path: str, message: str) -> None:
    with pytest.raises(ManifestError) as error:
        expand(given, name="js")
    found = {p.path: p.message for p in error.value.problems}
    assert path in found and message in found[path], found


def test_a_volume_of_the_claims_name_conflicts() -> None:
    train = mounting("train", "cache")
    train["template"]["spec"]["template"]["spec"]["volumes"] = [{"name": "cache", "emptyDir": {}}]
    with pytest.raises(ManifestError) as error:
        expand(data({"templates": [claim("cache")]}, rjobs=(train,)), name="js")
    (problem,) = error.value.problems
    assert problem.path == "spec.replicatedJobs.0.template.spec.template.spec.volumes.0.name"
    assert "conflicts with VolumeClaimPolicy template name: cache" in problem.message
