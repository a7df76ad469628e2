"""JobSet's `volumeClaimPolicies` (v0.12.0): claims shared by the set's Jobs, as its webhook
validates them and its controller makes them (`volume_claim_policy.go`) — each template one
PersistentVolumeClaim `<template>-<jobset>` (labelled with the JobSet's name), created before
the pods, and a `persistentVolumeClaim` volume of the template's name on every pod template
whose containers or init containers mount it. `retentionPolicy.whenDeleted: Retain` keeps the
claim when the stack is destroyed (Pulumi's retainOnDelete); `Delete`, the default, deletes it
with the experiment, as the controller does with the JobSet.
"""

from __future__ import annotations

import copy
from typing import Any

from ...problems import Problem
from ...reading import podtemplate as templates
from ...reading.openapi import Invalid
from ...rules.limits import MAX_LABEL, is_subdomain
from .spec import JobSetSpec

NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"


def claimed(
    data: dict[str, Any], spec: JobSetSpec, name: str
) -> tuple[dict[str, Any], list[dict[str, Any]], tuple[str, ...], list[Problem]]:
    """The JobSet with each claim's volume on the pod templates that mount it, the claims
    (PersistentVolumeClaims, Kubernetes JSON), the names of those kept after the run, and the
    problems the webhook would find."""
    result = copy.deepcopy(data)
    rjobs = result["spec"]["replicatedJobs"]
    claims: list[dict[str, Any]] = []
    retained: list[str] = []
    problems: list[Problem] = []
    seen: set[str] = set()
    for i, policy in enumerate(spec.volume_claim_policies):
        for j, template in enumerate(policy.templates):
            at = f"spec.volumeClaimPolicies.{i}.templates.{j}"
            claim = _claim(template, name, at, seen, problems)
            if claim is None:
                continue
            found = _mounting(rjobs, template["metadata"]["name"], claim, problems)
            if not found:
                reason = "no container or init container of a replicated Job mounts it"
                problems.append(Problem(f"{at}.metadata.name", reason))
            claims.append(claim)
            if policy.retention_policy.when_deleted == "Retain":
                retained.append(claim["metadata"]["name"])
    result["spec"].pop("volumeClaimPolicies", None)
    return result, claims, tuple(retained), problems


def _claim(
    template: dict[str, Any], jobset: str, at: str, seen: set[str], problems: list[Problem]
) -> dict[str, Any] | None:
    """The claim of one template, or None with the reason among `problems`."""
    metadata = templates.mapping(template.get("metadata"))
    claim_name = metadata.get("name")
    if not isinstance(claim_name, str) or not is_subdomain(claim_name):
        problems.append(Problem(f"{at}.metadata.name", "give a DNS-1123 subdomain name"))
        return None
    if claim_name in seen:
        reason = "names must be unique for VolumeClaimPolicies template"
        problems.append(Problem(f"{at}.metadata.name", reason))
        return None
    seen.add(claim_name)
    if metadata.get("namespace"):
        reason = "namespace cannot be set for VolumeClaimPolicies templates"
        problems.append(Problem(f"{at}.metadata.namespace", reason))
        return None
    full = f"{claim_name}-{jobset}"
    if len(full) > MAX_LABEL:
        reason = f"the claim '{full}' would be longer than {MAX_LABEL}: shorten it or the JobSet's"
        problems.append(Problem(f"{at}.metadata.name", reason))
        return None
    claim_metadata: dict[str, Any] = {
        "name": full,
        "labels": {**templates.mapping(metadata.get("labels")), NAME_LABEL: jobset},
    }
    if annotations := metadata.get("annotations"):
        claim_metadata["annotations"] = annotations
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": claim_metadata}
    claim["spec"] = template.get("spec") or {}
    errors = sorted(
        templates.validator("persistentvolumeclaim-v1").errors(claim), key=Invalid.order
    )
    for error in errors:
        path = ".".join(["spec", *map(str, error.path[1:])])
        reason = f"not a valid PersistentVolumeClaim: {error.message.splitlines()[0]}"
        problems.append(Problem(f"{at}.{path}", reason))
    return None if errors else claim


def _mounting(
    rjobs: list[Any], volume: str, claim: dict[str, Any], problems: list[Problem]
) -> bool:
    """Give every pod template that mounts `volume` the claim's volume; whether one does. A
    template with a volume of that name already is a conflict."""
    found = False
    for k, rjob in enumerate(rjobs):
        pod = _pod(rjob)
        volumes = templates.listed(pod.get("volumes"))
        for v, existing in enumerate(volumes):
            if isinstance(existing, dict) and existing.get("name") == volume:
                path = f"spec.replicatedJobs.{k}.template.spec.template.spec.volumes.{v}.name"
                reason = f"volume name conflicts with VolumeClaimPolicy template name: {volume}"
                problems.append(Problem(path, reason))
        if not _mounts(pod, volume):
            continue
        found = True
        source = {"claimName": claim["metadata"]["name"]}
        pod["volumes"] = [*volumes, {"name": volume, "persistentVolumeClaim": source}]
    return found


def _pod(rjob: Any) -> dict[str, Any]:
    job = templates.mapping(templates.mapping(templates.mapping(rjob).get("template")).get("spec"))
    template = templates.mapping(job.get("template"))
    return template["spec"] if isinstance(template.get("spec"), dict) else {}


def _mounts(pod: dict[str, Any], volume: str) -> bool:
    containers = [
        c
        for key in ("initContainers", "containers")
        for c in templates.listed(pod.get(key))
        if isinstance(c, dict)
    ]
    return any(
        isinstance(m, dict) and m.get("name") == volume
        for c in containers
        for m in templates.listed(c.get("volumeMounts"))
    )
