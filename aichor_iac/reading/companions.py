"""The Kubernetes objects a custom resource's file gives beside it — a ConfigMap of code, a
Service for Ray's client, a Secret, a claim, the pods' ServiceAccount and its Role — read as the
stack creates them: in the experiment's namespace (a namespace of their own is not used), held
to the strict OpenAPI schema and the API server's naming rules. Cluster-scoped kinds are
refused with the reason (a stack needs only its namespace's permissions), and so are
workloads (they would run beside the experiment, not as part of it).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from ..problems import Problem, one_line
from ..rules.limits import DNS_1035, MAX_LABEL, is_subdomain
from .openapi import Invalid
from .podtemplate import validator
from .text import Document

RBAC = "rbac.authorization.k8s.io/v1"
NETWORKING = "networking.k8s.io/v1"
# (apiVersion, kind) of what is created beside the experiment -> its strict schema's name
KINDS = {
    ("v1", "ConfigMap"): "configmap-v1",
    ("v1", "Secret"): "secret-v1",
    ("v1", "Service"): "service-v1",
    ("v1", "PersistentVolumeClaim"): "persistentvolumeclaim-v1",
    ("v1", "ServiceAccount"): "serviceaccount-v1",
    (RBAC, "Role"): "role-rbac-v1",
    (RBAC, "RoleBinding"): "rolebinding-rbac-v1",
    (NETWORKING, "NetworkPolicy"): "networkpolicy-networking-v1",
    (NETWORKING, "Ingress"): "ingress-networking-v1",
}
# Kinds that live outside every namespace, as found beside custom resources (KubeRay's samples
# give ClusterRoles and scheduler queues), and Kubernetes' own.
CLUSTER_SCOPED = {
    "Namespace",
    "Node",
    "PersistentVolume",
    "StorageClass",
    "ClusterRole",
    "ClusterRoleBinding",
    "PriorityClass",
    "RuntimeClass",
    "IngressClass",
    "CustomResourceDefinition",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "Queue",  # Volcano's (scheduling.volcano.sh) and KAI's (scheduling.run.ai)
    "ClusterQueue",
    "ResourceFlavor",
}
# What a companion keeps of its metadata (its namespace is the experiment's)
METADATA = ("name", "labels", "annotations")


def is_companion(document: dict[str, Any]) -> bool:
    """Whether a document is an object created beside the experiment."""
    api_version, kind = document.get("apiVersion"), document.get("kind")
    return isinstance(api_version, str) and isinstance(kind, str) and (api_version, kind) in KINDS


def refusal(document: dict[str, Any]) -> str:
    """Why a document beside the experiment is not created with it."""
    kind = document.get("kind")
    kind = kind if isinstance(kind, str) else None  # (any YAML value)
    what = f"{_article(kind)} {kind}" if kind else "a document"
    versions = [v for v, k in KINDS if k == kind]
    if versions:  # a kind created beside it, in another (or no valid) apiVersion
        return one_line(
            f"{what} is apiVersion {versions[0]} (this one gives "
            f"{document.get('apiVersion')!r}): write apiVersion: {versions[0]}"
        )
    instead = (
        "create it beside the stack (kubectl apply, or a resource of the Pulumi program) and "
        "remove it from this file"
    )
    if kind in CLUSTER_SCOPED:
        return one_line(
            f"{what} is cluster-scoped: aichor-iac creates objects only in the experiment's "
            f"namespace (a stack needs no cluster-wide permission); {instead}"
        )
    made = ", ".join(f"{k}" for _, k in KINDS)
    return one_line(
        f"{what} beside the experiment: aichor-iac creates beside a custom resource only "
        f"these kinds, in its namespace: {made}; {instead}"
    )


def read(documents: list[Document]) -> tuple[tuple[dict[str, Any], ...], list[Problem]]:
    """The companions as the stack creates them (metadata: name, labels, annotations; no
    status), and every way one breaks the strict schema or the API server's rules, each at
    its document's line."""
    kept, problems, seen = [], [], set()
    for document in documents:
        found = _problems(document)
        data = document.data
        if not found and (data["kind"], data["metadata"]["name"]) in seen:
            found = [
                Problem(
                    f"{data['kind']} {data['metadata']['name']}",
                    "is given twice; keep one",
                    document.line,
                )
            ]
        problems += found
        if not found:
            seen.add((data["kind"], data["metadata"]["name"]))
            meta = {k: v for k, v in data["metadata"].items() if k in METADATA}
            kept.append({**{k: v for k, v in data.items() if k != "status"}, "metadata": meta})
    return tuple(kept), problems


def _problems(document: Document) -> list[Problem]:
    data = document.data
    kind = data["kind"]
    metadata = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    where = f"{kind} {metadata.get('name', '(no name)')}"

    def at(path: tuple[Any, ...], reason: str) -> Problem:
        line = document.lines.get(tuple(map(str, path)), document.line)
        return Problem(".".join([where, *map(str, path)]), reason, line)

    schema = validator(KINDS[data["apiVersion"], kind])
    written = {k: v for k, v in data.items() if k != "status"}  # (read back from a cluster)
    found = [
        at(e.path, f"not a valid {kind}: {e.message.splitlines()[0]}")
        for e in sorted(schema.errors(written), key=Invalid.order)
    ]
    name = str(metadata.get("name", ""))
    if not found and (rule := _name_rule(kind, name)):
        found.append(at(("metadata", "name"), rule))
    if not found and kind == "Secret":  # the API server decodes `data`
        found += [
            at(("data", key), "not base64: give the value in stringData, or encode it")
            for key, value in (data.get("data") or {}).items()
            if not _base64(value)
        ]
    return found


def _base64(value: str) -> bool:
    """Whether the API server can decode `value` (standard base64; line breaks ignored)."""
    try:
        base64.b64decode(value.replace("\n", "").replace("\r", ""), validate=True)
    except binascii.Error:
        return False
    return True


def _article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


def _name_rule(kind: str, name: str) -> str | None:
    """The API server's rule for the kind's names, if `name` breaks it."""
    if kind == "Service":  # a DNS-1035 label
        ok = bool(DNS_1035.match(name)) and len(name) <= MAX_LABEL
        return None if ok else "give a DNS-1035 label (letters, digits, '-'; at most 63)"
    if kind in ("Role", "RoleBinding"):  # a path segment
        bad = name in ("", ".", "..") or any(c in name for c in "/%")
        return "give a name without '/' or '%', not '.' or '..'" if bad else None
    return None if is_subdomain(name) else "give a DNS-1123 subdomain name"
