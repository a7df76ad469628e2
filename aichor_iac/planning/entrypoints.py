"""The containers that run their image's entrypoint (no command of their own): the ones a
group restart must run again, as the stack says their image runs (`aichor:entrypoints`), and
every one whose image `aichor-iac entrypoints` asks its registry about. Pure: no Pulumi or
Kubernetes import.
"""

from __future__ import annotations

from dataclasses import replace

from ..experiment.model import Experiment, FailurePolicy, Spec
from ..experiment.origin import Kept
from ..frameworks import Plan
from ..settings import Settings


def told_entrypoints(
    manifest: Experiment, plan: Plan, policy: FailurePolicy, settings: Settings
) -> Experiment:
    """The experiment whose kept containers that run their image's entrypoint, which a group
    restart must run again, run what the stack says their image runs (`aichor:entrypoints`)
    as their command: the restart wraps it as any command."""
    spec, told = manifest.spec, settings.entrypoint_argvs()
    if spec.origin is None or not told or not policy.restarts:
        return manifest
    found = entrypoints(spec, plan).items()
    kept = {n: k.running(told[k.main["image"]]) for n, k in found if k.main["image"] in told}
    if not kept:
        return manifest
    origin = replace(spec.origin, kept={**spec.origin.kept, **kept})
    return manifest.model_copy(update={"spec": spec.with_origin(origin)})


def entrypoints(spec: Spec, plan: Plan) -> dict[str, Kept]:
    """The kept templates whose container runs its image's entrypoint: neither a command of
    its own nor the operator's program (KubeRay's `ray start`) that the restart could rerun."""
    if spec.origin is None:
        return {}
    programs = {g.replica_type: g.program for g in plan.groups}
    kept = spec.origin.kept.items()
    return {n: k for n, k in kept if k.argv is None and programs.get(n) is None}


def commandless(spec: Spec, plan: Plan) -> dict[str, set[bool]]:
    """Each image that a container runs by its entrypoint, the main ones (`entrypoints`) and
    the others of their templates (sidecars, init containers), with whether such containers
    give args (then the image's Cmd is not run)."""
    found: dict[str, set[bool]] = {}
    programs = {g.replica_type: g.program for g in plan.groups}
    for name, kept in spec.origin.kept.items() if spec.origin else ():
        pod = kept.template.get("spec") or {}
        for container in [*pod.get("initContainers", []), *pod.get("containers", [])]:
            operated = container["name"] == kept.container and programs.get(name) is not None
            if not container.get("command") and not operated:
                found.setdefault(container["image"], set()).add(bool(container.get("args")))
    return found
