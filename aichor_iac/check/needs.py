"""What an experiment asks of its cluster, read from its rendered objects (pure): the API
access `pulumi up`, `destroy` and `status` make, the quota it counts against, and each pod
template with how many of its pods run at once."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from ..rules.limits import quantity

# Kind -> (API group, resource): what aichor-iac creates (a PodGroup's group is its own)
RESOURCES = {
    "Namespace": ("", "namespaces"),
    "Secret": ("", "secrets"),
    "ConfigMap": ("", "configmaps"),
    "PersistentVolumeClaim": ("", "persistentvolumeclaims"),
    "ServiceAccount": ("", "serviceaccounts"),
    "Service": ("", "services"),
    "NetworkPolicy": ("networking.k8s.io", "networkpolicies"),
    "Ingress": ("networking.k8s.io", "ingresses"),
    "Role": ("rbac.authorization.k8s.io", "roles"),
    "RoleBinding": ("rbac.authorization.k8s.io", "rolebindings"),
    "Job": ("batch", "jobs"),
    "Deployment": ("apps", "deployments"),
    "PodGroup": ("", "podgroups"),
}
# `pulumi up` creates each object, reads and watches it while it awaits it, patches it on an
# update (server-side apply; `pulumi preview` dry-runs the patch) and `destroy` deletes it
OBJECT_VERBS = ("create", "get", "list", "watch", "patch", "delete")
# What the Job awaits watch, and `status`, `logs` and `events` read
READS = (
    (("list", "watch", "get"), "", "pods", ""),
    (("get",), "", "pods", "log"),
    (("list",), "", "events", ""),
)


@dataclass(frozen=True)
class Access:
    """Verbs on a resource (in `namespace`; None: cluster-scoped)."""

    verbs: tuple[str, ...]
    group: str
    resource: str
    subresource: str
    namespace: str | None

    @property
    def name(self) -> str:
        """`jobs.batch`, `pods/log`, as kubectl names a resource."""
        named = f"{self.resource}.{self.group}" if self.group else self.resource
        return f"{named}/{self.subresource}" if self.subresource else named


@dataclass(frozen=True)
class Pods:
    """A workload's pod template and how many of its pods run at once."""

    owner: str  # `Job/name`
    spec: dict[str, Any]  # the pod template's spec
    metadata: dict[str, Any]  # the pod template's metadata
    at_once: int


def access(objects: list[dict[str, Any]], namespace: str) -> list[Access]:
    """Every access the experiment's objects need, a line per resource."""
    found: dict[tuple[str, str], Access] = {}
    for obj in objects:
        group, resource = RESOURCES.get(obj["kind"], ("", obj["kind"].lower() + "s"))
        if "/" in obj.get("apiVersion", ""):
            group = obj["apiVersion"].split("/")[0]
        scope = None if obj["kind"] == "Namespace" else namespace
        found.setdefault((group, resource), Access(OBJECT_VERBS, group, resource, "", scope))
    reads = [Access(verbs, g, r, s, namespace) for verbs, g, r, s in READS]
    return [*found.values(), *reads]


def pods(objects: list[dict[str, Any]]) -> list[Pods]:
    """Each Job's and Deployment's pods."""
    found = []
    for obj in objects:
        if obj["kind"] not in ("Job", "Deployment"):
            continue
        spec, template = obj["spec"], obj["spec"]["template"]
        if obj["kind"] == "Job":
            parallelism = spec.get("parallelism", 1)
            at_once = min(parallelism, spec.get("completions", parallelism))
        else:
            at_once = spec.get("replicas", 1)
        owner = f"{obj['kind']}/{obj['metadata']['name']}"
        found.append(Pods(owner, template["spec"], template.get("metadata") or {}, at_once))
    return found


def containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """A pod's containers, its init containers first."""
    return [*spec.get("initContainers", []), *spec.get("containers", [])]


def pod_amount(spec: dict[str, Any], kind: str, resource: str) -> float:
    """A pod's effective `kind` ("requests" or "limits") of `resource`, as the scheduler and
    quota count it: the larger of its containers' sum (sidecars, init containers that keep
    running, included) and its largest init container. A request not given is its limit."""

    def of(container: dict[str, Any]) -> float:
        given = container.get("resources") or {}
        value = (given.get(kind) or {}).get(resource)
        if value is None and kind == "requests":
            value = (given.get("limits") or {}).get(resource)
        return quantity(value) if value is not None else 0.0

    inits = spec.get("initContainers", [])
    sidecars = [c for c in inits if c.get("restartPolicy") == "Always"]
    running = sum(of(c) for c in [*spec.get("containers", []), *sidecars])
    first = max((of(c) for c in inits if c.get("restartPolicy") != "Always"), default=0.0)
    return max(running, first)


def resource_names(spec: dict[str, Any]) -> set[str]:
    """Every resource a pod's containers ask for (cpu, memory, nvidia.com/gpu, …)."""
    return {
        name
        for c in containers(spec)
        for kind in ("requests", "limits")
        for name in ((c.get("resources") or {}).get(kind) or {})
    }


def pod_totals(workloads: list[Pods]) -> dict[str, float]:
    """The workloads' pods' usage, by ResourceQuota key, all running at once."""
    usage: defaultdict[str, float] = defaultdict(float)
    for workload in workloads:
        usage["pods"] += workload.at_once
        for name in resource_names(workload.spec) | {"cpu", "memory"}:
            for kind in ("requests", "limits"):
                amount = pod_amount(workload.spec, kind, name) * workload.at_once
                usage[f"{kind}.{name}"] += amount
    return dict(usage)


def object_totals(objects: list[dict[str, Any]]) -> dict[str, float]:
    """The experiment's objects, by ResourceQuota key (`services`, `count/jobs.batch`, …), and
    the storage its claims request."""
    usage: defaultdict[str, float] = defaultdict(float)
    counted = {
        "Service": "services",
        "Secret": "secrets",
        "ConfigMap": "configmaps",
        "PersistentVolumeClaim": "persistentvolumeclaims",
    }
    for obj in objects:
        kind = obj["kind"]
        if kind in counted:
            usage[counted[kind]] += 1
        if kind in RESOURCES and kind != "Namespace":
            group, resource = RESOURCES[kind]
            usage[f"count/{resource}.{group}" if group else f"count/{resource}"] += 1
        if kind == "PersistentVolumeClaim":
            storage = obj["spec"].get("resources", {}).get("requests", {}).get("storage", 0)
            usage["requests.storage"] += quantity(storage)
    return dict(usage)
