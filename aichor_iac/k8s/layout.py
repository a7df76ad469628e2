"""One experiment as the list of Kubernetes objects it is: each object's arguments, what it is
created after, whether `pulumi destroy` keeps it, how long `pulumi up` may wait for it.

Pure: the component registers exactly this list, in this order, once `checked()` has found every
object within the API server's rules (`aichor_iac.rules.limits`), so nothing is half-created.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from ..frameworks import Group
from ..problems import Problem
from ..rules import limits
from . import jupyter, kinds, objects, progress, services, tensorboard
from .context import Context

API_VERSIONS = {
    "Namespace": "v1",
    "Secret": "v1",
    "ConfigMap": "v1",
    "PersistentVolumeClaim": "v1",
    "Service": "v1",
    "ServiceAccount": "v1",
    "Role": "rbac.authorization.k8s.io/v1",
    "RoleBinding": "rbac.authorization.k8s.io/v1",
    "NetworkPolicy": "networking.k8s.io/v1",
    "Ingress": "networking.k8s.io/v1",
    "Job": "batch/v1",
    "Deployment": "apps/v1",
}
# The experiment's Secret's keys for each kind of generated secret (the component generates
# the values; they never pass through here).
SECRET_KEYS = {"password": ("password",), "ssh": ("ssh-privatekey", "ssh-publickey")}
# The Secrets whose values the component generates: the experiment's, its sweep's
GENERATED_SECRET, SWEEP_SECRET = "secret", "sweep-progress"


@dataclass(eq=False)
class Child:
    """One object: `suffix` names its Pulumi resource (`<component>-<suffix>`)."""

    kind: str
    suffix: str
    args: dict[str, Any]
    after: list[Child] = field(default_factory=list)
    retain: bool = False
    timeout: int | None = None  # seconds `pulumi up` may wait for its awaits
    group: str | None = None  # the replica type a Job runs
    shared: bool = False  # its sweep's, made with its first trial: the others' wait for it

    @functools.cached_property  # (read by the checks, then the component: the same values)
    def arguments(self) -> dict[str, Any]:
        """The resource's keyword arguments (`metadata`, `spec`, `string_data`), each as
        Kubernetes JSON: what the component registers. The SDK serialises JSON as it is,
        without reading a typed class's metadata at each field (a tenth of a sweep's render)."""
        return {k: kinds.as_json(v) for k, v in self.args.items() if v is not None}

    @functools.cached_property
    def object(self) -> dict[str, Any]:
        """The object as the API server receives it (Kubernetes JSON)."""
        body = {kinds.camel(k): v for k, v in self.arguments.items()}
        if self.kind in API_VERSIONS:
            body = {"apiVersion": API_VERSIONS[self.kind], "kind": self.kind, **body}
        return body


def secret_keys(ctx: Context) -> tuple[str, ...]:
    """The keys of the experiment's generated Secret (a sweep's trials have the receiver's in
    their sweep's)."""
    return (
        SECRET_KEYS.get(ctx.plan.secret or "", ())
        + ((jupyter.TOKEN_KEY,) if ctx.blueprint.jupyter else ())
        + (progress.KEYS if progress.enabled(ctx) and not progress.sweep(ctx) else ())
    )


def children(ctx: Context, create_namespace: bool = False) -> list[Child]:
    """Every object of the experiment, each after the objects it needs."""
    names, settings, plan = ctx.names, ctx.settings, ctx.plan
    # What `pulumi destroy` leaves: the shared volume unless told, and the namespace it lives
    # in when the stack created it (deleting a namespace deletes its claims, retained or not).
    keep = bool(ctx.shared_volume_claim) and not settings.delete_shared_volume
    result: list[Child] = []

    def add(kind: str, suffix: str, args: dict, after: list[Child], **options: Any) -> Child:
        result.append(Child(kind, suffix, args, list(after), **options))
        return result[-1]

    first: list[Child] = []
    if create_namespace:
        metadata = {"name": names.namespace, "labels": {"app.kubernetes.io/part-of": "aichor"}}
        first.append(add("Namespace", "namespace", {"metadata": metadata}, [], retain=keep))
    needed = list(first)  # what every pod of the experiment needs to exist first
    for suffix, args, shared in _secrets(ctx):
        needed.append(add("Secret", suffix, args, first, shared=shared))
    if plan.files:
        needed.append(add("ConfigMap", "config", services.config_map(ctx), first))
    origin = ctx.spec.origin
    for document in origin.companions if origin else ():
        kind, name = document["kind"], document["metadata"]["name"]
        args = services.companion(ctx, document)
        retain = origin is not None and kind == "PersistentVolumeClaim" and name in origin.retained
        needed.append(add(kind, companion_suffix(document), args, first, retain=retain))
    if ctx.shared_volume_claim:
        args = services.shared_volume(ctx)
        needed.append(add("PersistentVolumeClaim", "shared-volume", args, first, retain=keep))
    if policy := _network_policy(ctx):
        suffix, args, shared = policy
        needed.append(add("NetworkPolicy", suffix, args, first, shared=shared))
    if ctx.blueprint.gang and ctx.blueprint.gang.roles:
        needed.append(add("PodGroup", "pod-group", services.pod_group(ctx), first))
    service = add("Service", "service", objects.service(ctx), needed)
    role_services = {
        role: add("Service", f"{role}-service", objects.role_service(ctx, name, role), needed)
        for name, role in plan.services.items()
    }
    jobs: dict[str, list[Child]] = {}
    for group in plan.groups:
        after = [service, *needed, *(job for role in group.after for job in jobs[role])]
        if group.role in role_services:
            after.append(role_services[group.role])
        jobs[group.role] = _jobs(ctx, group, after)
        result += jobs[group.role]
    if ctx.blueprint.jupyter:
        add("Service", "jupyter-service", jupyter.service(ctx), needed)
    if ctx.blueprint.tensorboard:
        after = list(needed)
        if tensorboard.has_volume(ctx):
            volume = tensorboard.log_volume(ctx)
            after.append(add("PersistentVolumeClaim", "tensorboard-volume", volume, first))
        add("Deployment", "tensorboard", tensorboard.deployment(ctx), after)
        add("Service", "tensorboard-service", tensorboard.service(ctx), needed)
    return result


def _secrets(ctx: Context) -> list[tuple[str, dict, bool]]:
    """The generated Secrets (suffix, arguments, whether the sweep's): the experiment's, and
    on a sweep's first trial the sweep's, each with placeholders for the values the component
    puts in."""
    found = []
    if keys := secret_keys(ctx):
        found.append((GENERATED_SECRET, services.generated_secret(ctx, dict.fromkeys(keys, ""))))
    if progress.creates_sweep_objects(ctx):
        found.append((SWEEP_SECRET, progress.sweep_secret(ctx, dict.fromkeys(progress.KEYS, ""))))
    return [(suffix, args, suffix == SWEEP_SECRET) for suffix, args in found]


def _network_policy(ctx: Context) -> tuple[str, dict, bool] | None:
    """The NetworkPolicy (suffix, arguments, whether the sweep's): the experiment's own, else
    with progress reports one that keeps the receiver's port to the experiment's pods (to the
    sweep's, on a sweep's first trial; none on its others)."""
    if ctx.blueprint.network_policy:
        return "network-policy", services.network_policy(ctx), False
    if progress.enabled(ctx) and not progress.sweep(ctx):
        return "progress-policy", progress.network_policy(ctx), False
    if progress.creates_sweep_objects(ctx):
        return "sweep-progress-policy", progress.network_policy(ctx), True
    return None


def _jobs(ctx: Context, group: Group, after: list[Child]) -> list[Child]:
    """The group's Jobs: one Indexed Job, or one per replica (`Context.replicas`)."""
    timeout = objects.await_timeout(ctx, group)
    return [
        Child(
            "Job",
            group.role if replica is None else f"{group.role}-{replica}",
            objects.job(ctx, group, replica),
            list(after),
            timeout=timeout,
            group=group.replica_type,
        )
        for replica in ctx.replicas(group)
    ]


def build(ctx: Context, create_namespace: bool = False) -> list[Child]:
    """`children()`, or ManifestError naming every place an object breaks the API server's
    rules (on the replica type the object comes from, where there is one)."""
    found = children(ctx, create_namespace)
    problems = []
    for child in found:
        obj = child.object
        problems += [
            _placed(ctx, child, obj, where, wrong) for _, where, wrong in limits.violations(obj)
        ]
    named = [(c.kind, c.object["metadata"]["name"]) for c in found]
    for kind, name in sorted({n for n in named if named.count(n) > 1}):
        reason = (
            "is also the name of an object aichor-iac creates for the experiment: rename the "
            "one given beside the resource"
        )
        problems.append(Problem(f"{kind} {name}", reason))
    if problems:  # (once each: the Jobs of one template break its rules alike)
        raise ctx.blueprint.manifest.error(list(dict.fromkeys(problems)))
    return found


def companion_suffix(document: dict[str, Any]) -> str:
    """The resource name (after the component's) of an object given beside the resource."""
    return f"{document['kind'].lower()}-{document['metadata']['name']}"


def _placed(ctx: Context, child: Child, obj: dict[str, Any], where: str, wrong: str) -> Problem:
    """A rule an object breaks, at the input's field it comes from: for a custom resource, the
    field of its pod template (or the field that gave it, `Kept.placed`), of a Job's replica
    spec, of an object given beside it, or the name everything is named after; for a
    manifest, the replica type (its objects are aichor-iac's own, named in the sentence)."""
    origin = ctx.spec.origin
    if origin is None:
        name = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name', '?')}"
        path = f"spec.types.{child.group}" if child.group else "spec"
        return Problem(path, f"{name}: {where or 'the object'}: {wrong}")
    kept = origin.kept.get(child.group or "")
    companion = next((d for d in origin.companions if child.suffix == companion_suffix(d)), None)
    if companion is not None:
        return Problem(f"{companion['kind']} {companion['metadata']['name']}.{where}", wrong)
    if kept is not None and where.startswith("spec.template."):
        return Problem(kept.placed(where.removeprefix("spec.template.")), wrong)
    if kept is not None:
        return Problem(kept.path, f"{where}: {wrong}" if where else wrong)
    if where.startswith("metadata.name"):  # (every object is named after the resource)
        return Problem("metadata.name", f"{wrong} (the name of the {obj.get('kind')} made from it)")
    return Problem("spec", f"{where or 'the object'}: {wrong}")
