"""The checks against a cluster, read only, through a lightkube client (`kubeapi.connect`): the
namespace, the permissions (SelfSubjectAccessReview), quotas, LimitRanges, the Pod Security
level, nodes, the gang scheduler's and Kueue's kinds, and the Pulumi versions. A read the
user may not make gives `unknown`, never `ok`."""

from __future__ import annotations

import functools
import importlib.metadata
import re
import shutil
import subprocess
from collections.abc import Callable
from typing import Any

from packaging.version import Version

from ..settings import Settings
from . import Line, needs, verdicts

MANAGED = ("app.kubernetes.io/part-of", "aichor")  # a namespace a stack created
PULUMI_CLI = Version("3.1.0")  # the Python SDK's Automation API minimum (and this program's)
PULUMI_KUBERNETES = Version("4.24")  # pulumi.com/waitFor with RFC 9535 JSONPath (pyproject)
KUEUE_VERSIONS = ("v1beta2", "v1beta1")


class Refused(Exception):
    """The API answered a read with an error: its HTTP code and message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _all(api: Any, kind: Any, namespace: str) -> list[Any]:
    return list(api.list(kind, namespace=namespace))


def _read(call: Callable[[], Any]) -> Any:
    """The call's answer, or Refused with the API's code."""
    from lightkube.core.exceptions import ApiError

    try:
        return call()
    except ApiError as error:
        raise Refused(error.status.code or 0, error.status.message or str(error)) from None


def run(objects: list[dict[str, Any]], settings: Settings, api: Any) -> list[Line]:
    """Every check of the experiment's objects against the cluster `api` reads."""
    namespace = settings.namespace
    labels, lines = _namespace(api, namespace, settings.create_namespace)
    ranges = _listed(api, "LimitRange", namespace)
    workloads = [
        needs.Pods(w.owner, verdicts.defaulted(w.spec, ranges or []), w.metadata, w.at_once)
        for w in needs.pods(objects)
    ]
    lines += _permissions(api, needs.access(objects, namespace))
    quotas = _listed(api, "ResourceQuota", namespace)
    lines += _unlisted(quotas, "quotas", namespace) or verdicts.quota(
        objects, workloads, quotas or []
    )
    lines += _unlisted(ranges, "limits", namespace) or verdicts.limit_ranges(
        objects, workloads, ranges or []
    )
    if labels is not None:
        lines.append(verdicts.pod_security(workloads, labels))
    else:
        fix = "ask which Pod Security level the namespace enforces"
        lines.append(Line("pod security", "unknown", "the namespace cannot be read", fix))
    lines += _nodes(api, workloads)
    lines += [_served(api, obj, namespace) for obj in objects if obj["kind"] == "PodGroup"]
    if settings.kueue_queue:
        lines.append(_local_queue(api, namespace, settings.kueue_queue))
    return [*lines, *versions()]


def warnings(
    objects: list[dict[str, Any]], settings: Settings, kubeconfig: Any, context: str | None
) -> list[str]:
    """What blocks the objects on the cluster of the Kubernetes provider's `kubeconfig` and
    `context`, a message each (aichor:check: the component's warnings)."""
    from httpx2 import HTTPError

    from ..observe import kubeapi

    kubeconfig, context = kubeapi.provider_connection(kubeconfig, context)
    try:
        lines = run(objects, settings, kubeapi.connect(kubeconfig=kubeconfig, context=context))
    except (kubeapi.Unreachable, HTTPError) as error:
        return [f"aichor:check: the cluster cannot be read ({error})"]
    return [
        f"aichor:check: {line.check}: {line.detail} (fix: {line.fix})"
        for line in lines
        if line.state == "blocked"
    ]


def _namespace(api: Any, name: str, created: bool) -> tuple[dict[str, str] | None, list[Line]]:
    """The namespace's labels (None: unread) and its line."""
    from lightkube.resources.core_v1 import Namespace

    check = f"namespace {name}"
    try:
        labels = _read(lambda: api.get(Namespace, name=name)).metadata.labels or {}
    except Refused as refused:
        if refused.code == 404 and created:
            return {}, [Line(check, "ok", "absent: the stack creates it (aichor:createNamespace)")]
        if refused.code == 404:
            fix = f"create it (kubectl create namespace {name}), or set aichor:createNamespace"
            return None, [Line(check, "blocked", "does not exist", fix)]
        fix = "ask an admin whether it exists (reading it needs get on namespaces)"
        return None, [Line(check, "unknown", f"cannot be read ({refused.code})", fix)]
    if created and labels.get(MANAGED[0]) != MANAGED[1]:
        fix = "it exists: set aichor:createNamespace to false"
        detail = "exists, and the stack would create it: pulumi up fails (AlreadyExists)"
        return labels, [Line(check, "blocked", detail, fix)]
    return labels, [Line(check, "ok", "exists")]


def _permissions(api: Any, accesses: list[needs.Access]) -> list[Line]:
    """A line per resource: the verbs the user lacks (SelfSubjectAccessReview)."""
    lines: list[Line] = []
    for access in accesses:
        check = f"permissions: {access.name}"
        try:
            missing = [v for v in access.verbs if not _allowed(api, access, v)]
        except Refused as refused:
            fix = "ask an admin which verbs you hold (kubectl auth can-i --list)"
            detail = f"cannot be asked (SelfSubjectAccessReview: {refused.code})"
            return [*lines, Line("permissions", "unknown", detail, fix)]
        if not missing:
            lines.append(Line(check, "ok", ", ".join(access.verbs)))
            continue
        where = f"in {access.namespace}" if access.namespace else "(cluster-wide)"
        role = "role" if access.namespace else "clusterrole"
        scope = f" -n {access.namespace}" if access.namespace else ""
        fix = (
            f"ask for a {role} with them: kubectl create {role} aichor --verb="
            f"{','.join(missing)} --resource={access.name}{scope}"
        )
        lines.append(Line(check, "blocked", f"cannot {', '.join(missing)} {where}", fix))
    return lines


def _allowed(api: Any, access: needs.Access, verb: str) -> bool:
    from lightkube.models.authorization_v1 import ResourceAttributes, SelfSubjectAccessReviewSpec
    from lightkube.resources.authorization_v1 import SelfSubjectAccessReview

    attributes = ResourceAttributes(
        namespace=access.namespace,
        verb=verb,
        group=access.group,
        resource=access.resource,
        subresource=access.subresource or None,
    )
    review = SelfSubjectAccessReview(
        spec=SelfSubjectAccessReviewSpec(resourceAttributes=attributes)
    )
    answer = _read(lambda: api.create(review))
    return bool(answer.status and answer.status.allowed)


def _listed(api: Any, kind: str, namespace: str | None) -> list[dict[str, Any]] | None:
    """The objects of a core kind (None: the user may not list them)."""
    from lightkube.resources import core_v1

    try:
        found = _read(lambda: list(api.list(getattr(core_v1, kind), namespace=namespace)))
    except Refused:
        return None
    return [o.to_dict() for o in found]


def _unlisted(found: list[dict[str, Any]] | None, what: str, namespace: str) -> list[Line]:
    """The line when there is nothing to check (`found` unread: unknown; empty: ok)."""
    if found is None:
        fix = f"ask an admin for the {what} of {namespace}, or for list on them"
        return [Line(what, "unknown", f"cannot be listed in {namespace}", fix)]
    return [] if found else [Line(what, "ok", f"none in {namespace}")]


def _nodes(api: Any, workloads: list[needs.Pods]) -> list[Line]:
    found = _listed(api, "Node", None)
    if found is None:
        detail = "nodes cannot be read (most namespace users cannot): not an error"
        return [Line("nodes", "unknown", detail, "ask an admin which nodes have your GPUs")]
    return verdicts.nodes(workloads, found)


def _generic(api_version: str, kind: str, plural: str) -> Any:
    from lightkube.generic_resource import create_namespaced_resource

    group, version = api_version.split("/")
    return create_namespaced_resource(group, version, kind, plural)


def _served(api: Any, obj: dict[str, Any], namespace: str) -> Line:
    """Whether the cluster serves the gang scheduler's PodGroup kind (a list of them)."""
    kind = _generic(obj["apiVersion"], "PodGroup", "podgroups")
    check = f"gang scheduler: PodGroup ({obj['apiVersion']})"
    try:
        _read(lambda: list(api.list(kind, namespace=namespace)))
    except Refused as refused:
        if refused.code == 404:
            fix = "install the gang scheduler the stack names, or set aichor:gangScheduler none"
            return Line(check, "blocked", "the kind is not served: not installed", fix)
        fix = "ask an admin whether it is installed"
        return Line(check, "unknown", f"cannot be listed ({refused.code})", fix)
    return Line(check, "ok", "served")


def _local_queue(api: Any, namespace: str, queue: str) -> Line:
    """Whether Kueue serves LocalQueues and the stack's one exists in the namespace."""
    check = f"Kueue LocalQueue {queue}"
    for version in KUEUE_VERSIONS:
        kind = _generic(f"kueue.x-k8s.io/{version}", "LocalQueue", "localqueues")
        try:
            found = _read(functools.partial(_all, api, kind, namespace))
        except Refused as refused:
            if refused.code == 404:
                continue
            fix = "ask an admin for the namespace's LocalQueues"
            return Line(check, "unknown", f"cannot be listed ({refused.code})", fix)
        names = sorted(q.metadata.name for q in found)
        if queue in names:
            return Line(check, "ok", f"exists in {namespace}")
        have = f" (it has {', '.join(names)})" if names else ""
        fix = f"set aichor:kueueQueue to one of the namespace's LocalQueues{have}"
        return Line(check, "blocked", f"no such LocalQueue in {namespace}", fix)
    fix = "install Kueue, or unset aichor:kueueQueue"
    return Line(check, "blocked", "Kueue is not installed (no LocalQueue kind)", fix)


def versions() -> list[Line]:
    """The Pulumi CLI and pulumi-kubernetes this package needs."""
    lines = []
    cli = shutil.which("pulumi")
    check = "Pulumi CLI"
    if cli is None:
        fix = "install it: https://www.pulumi.com/docs/install/"
        lines.append(Line(check, "blocked", "not found on PATH", fix))
    else:
        said = _said_version(cli)
        found = re.search(r"\d+\.\d+\.\d+", said)
        if found is None:
            fix = "check that `pulumi version` runs"
            lines.append(Line(check, "unknown", f"`pulumi version` said {said!r}", fix))
        elif Version(found[0]) < PULUMI_CLI:
            fix = f"upgrade it to {PULUMI_CLI} or later"
            lines.append(Line(check, "blocked", f"{found[0]}, older than {PULUMI_CLI}", fix))
        else:
            lines.append(Line(check, "ok", found[0]))
    have = Version(importlib.metadata.version("pulumi_kubernetes"))
    check = "pulumi-kubernetes"
    if have < PULUMI_KUBERNETES:
        fix = f"pip install 'pulumi-kubernetes>={PULUMI_KUBERNETES}' (the provider follows it)"
        lines.append(Line(check, "blocked", f"{have}, older than {PULUMI_KUBERNETES}", fix))
    else:
        lines.append(Line(check, "ok", f"{have} (the provider pulumi up runs)"))
    return lines


@functools.cache  # (once per process: each experiment of a stack checks, with aichor:check)
def _said_version(cli: str) -> str:
    """What `pulumi version` prints (or why it could not run)."""
    try:
        return subprocess.run([cli, "version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as error:
        return str(error)
