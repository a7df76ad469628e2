"""A user's pod template (from a Kubeflow custom resource) with only what the operator and
aichor-iac's ordering add: the operator's env and ports on its container, the experiment's
labels and host names, the wait for peers and the following, the restart policy.

Everything else the user wrote stays as written: volumes, init containers, sidecars, env,
`envFrom`, node selectors, tolerations, affinity, security contexts, resources.
"""

from __future__ import annotations

import copy
from typing import Any

from ..experiment.origin import Kept
from ..frameworks import Group
from ..frameworks.base import Mount
from ..pods import LIFELINE_PORT
from . import commands, shell
from .context import Context


def template(
    ctx: Context,
    group: Group,
    kept: Kept,
    env: list[Any],
    annotations: dict[str, str],
    added: tuple[list[Any], list[Mount], list[dict[str, Any]]],
) -> dict:
    """The pod template of `group`'s Job (Kubernetes JSON): the user's, plus on its container
    `env` (the operator's variables, after the user's, as the operator appends them), and
    `added`: volumes, the mounts of the container's (each where it says), and native
    sidecars after the user's init containers."""
    volumes, mounts, sidecars = added
    result = copy.deepcopy(kept.template)
    metadata = result.setdefault("metadata", {})
    gang = ctx.gang_metadata(group.role)
    metadata["labels"] = {
        **metadata.get("labels", {}),
        **dict(group.labels),
        **ctx.labels(group.role),
        **gang.get("labels", {}),
    }
    given = {**metadata.get("annotations", {}), **dict(group.annotations), **annotations}
    if merged := {**given, **ctx.trial_annotations()}:
        metadata["annotations"] = merged
    spec = result["spec"]
    # (under the group restart, the command restarts in its pod with the others', not alone)
    in_place = kept.restart_policy == "OnFailure" and ctx.regroup is None
    spec["restartPolicy"] = "OnFailure" if in_place else "Never"
    spec["subdomain"] = ctx.names.service
    if ctx.scheduler_name and "schedulerName" not in spec:
        spec["schedulerName"] = ctx.scheduler_name
    if group.dns_searches:
        dns = spec.setdefault("dnsConfig", {})
        dns["searches"] = [*dns.get("searches", []), *group.dns_searches]
    main = next(c for c in spec["containers"] if c["name"] == kept.container)
    main["env"] = [*main.get("env", []), *env]
    main.setdefault("terminationMessagePolicy", commands.TAIL_ON_ERROR)
    if volumes:
        spec["volumes"] = [*spec.get("volumes", []), *volumes]
        main["volumeMounts"] = [
            *main.get("volumeMounts", []),
            *({"name": m.name, "mountPath": m.path, "readOnly": True} for m in mounts),
        ]
    if sidecars:
        spec["initContainers"] = [*spec.get("initContainers", []), *sidecars]
    _ports(ctx, group, kept, main)
    _command(ctx, group, kept, spec, main)
    _colocate(ctx, group, spec)
    _exclusive(ctx, group, result)
    return result


def _colocate(ctx: Context, group: Group, spec: dict[str, Any]) -> None:
    """A TPU slice's hosts on one node pool, unless the template says where they go."""
    colocation = ctx.colocation(group)
    affinity = spec.get("affinity") or {}
    if colocation is None or "podAffinity" in affinity:
        return
    labels, topology = colocation
    term = {"labelSelector": {"matchLabels": labels}, "topologyKey": topology}
    spec["affinity"] = {
        **affinity,
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]},
    }


# JobSet's exclusive placement (v0.12.0): its pod webhook's labels and affinities, its
# controller's node selector and toleration for the node-selector strategy
JOB_KEY, PRIORITY = "jobset.sigs.k8s.io/job-key", "jobset.sigs.k8s.io/priority"
NAMESPACED_JOB, NO_SCHEDULE = (
    "alpha.jobset.sigs.k8s.io/namespaced-job",
    "alpha.jobset.sigs.k8s.io/no-schedule",
)


def _exclusive(ctx: Context, group: Group, template: dict[str, Any]) -> None:
    """A Job that keeps a topology domain to itself. By node selector: the nodes labelled
    for it (and its taint tolerated). Else by affinities, on every pod (the webhook gives the
    leader these and its followers the leader's domain, a node selector only a webhook can
    know): with its own Job's pods, and no other JobSet Job's of the same priority there."""
    spec = template["spec"]
    if group.exclusive_nodes:
        name = f"{ctx.names.namespace}_{ctx.job_name(group, None)}"
        spec["nodeSelector"] = {**spec.get("nodeSelector", {}), NAMESPACED_JOB: name}
        toleration = {"key": NO_SCHEDULE, "operator": "Exists", "effect": "NoSchedule"}
        spec["tolerations"] = [*spec.get("tolerations", []), toleration]
        return
    if group.exclusive is None:
        return
    key = dict(group.labels)[JOB_KEY]
    others = [
        {"key": JOB_KEY, "operator": "Exists"},
        {"key": JOB_KEY, "operator": "NotIn", "values": [key]},
    ]
    # The pod's priority is its PriorityClass's value, known in the cluster only: without one
    # it is 0 (no global default class); with one, other Jobs are kept out whatever theirs.
    if not (spec.get("priorityClassName") or ctx.settings.priority_class_name):
        template["metadata"]["labels"][PRIORITY] = "0"
        others.append({"key": PRIORITY, "operator": "In", "values": ["0"]})
    affinity = spec.setdefault("affinity", {})
    for kind, expressions in (
        ("podAffinity", [{"key": JOB_KEY, "operator": "In", "values": [key]}]),
        ("podAntiAffinity", others),
    ):
        terms = affinity.setdefault(kind, {})
        terms["requiredDuringSchedulingIgnoredDuringExecution"] = [
            *terms.get("requiredDuringSchedulingIgnoredDuringExecution", []),
            {
                "labelSelector": {"matchExpressions": expressions},
                "topologyKey": group.exclusive,
                "namespaceSelector": {},
            },
        ]


def _ports(ctx: Context, group: Group, kept: Kept, main: dict[str, Any]) -> None:
    """The operator's ports (and the lifeline's) the container does not list yet, and the
    readiness probe that lets the later Jobs start."""
    numbers = {p.get("containerPort") for p in main.get("ports", [])}
    runs = kept.argv or group.program  # a command the lifeline's supervisor can run
    lifeline = [("lifeline", LIFELINE_PORT)] if commands.listens(ctx, group) and runs else []
    added = [
        {"name": n, "containerPort": p, "protocol": "TCP"}
        for n, p in [*group.ports, *lifeline]
        if p not in numbers
    ]
    if added:
        main["ports"] = [*main.get("ports", []), *added]
    if group.ready_port and "readinessProbe" not in main:  # Ready: the later Jobs may start
        main["readinessProbe"] = {
            "tcpSocket": {"port": group.ready_port},
            "periodSeconds": 5,
            "failureThreshold": 1,
        }


def _command(
    ctx: Context, group: Group, kept: Kept, spec: dict[str, Any], main: dict[str, Any]
) -> None:
    """What the container runs: the operator's program, the user's command wrapped by the
    waits and the lifeline, or the image's entrypoint after a wait in an init container."""
    wrapped = bool(group.computed or group.waits or group.follows or commands.listens(ctx, group))
    if group.program is not None:  # what the operator runs in the container (`ray start`)
        main["command"] = commands.container_command(
            ctx, group, group.program, kept.backoff_limit > 0
        )
        main.pop("args", None)
    elif kept.argv is not None and wrapped:
        command = shell.argv_command(kept.argv)
        main["command"] = commands.container_command(ctx, group, command, kept.backoff_limit > 0)
        main.pop("args", None)  # in the command line the wrapper runs
    elif kept.argv is None and group.waits:
        # The image's entrypoint runs unchanged: the wait runs before it, in its image.
        lines = shell.wait_lines(group.waits, ctx.settings.peer_wait_seconds)
        wait = {
            "name": "aichor-wait",
            "image": main["image"],
            "command": ["/bin/sh", "-c", shell.k8s_escape("\n".join(lines))],
        }
        spec["initContainers"] = [wait, *spec.get("initContainers", [])]
