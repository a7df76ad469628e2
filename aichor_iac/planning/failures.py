"""When a replica fails: the group restart an experiment runs with (the stack's
`aichor:maxRestarts` and `aichor:permanentExitCodes` over the input's own policy), and the
experiments that cannot restart as a group. Pure: no Pulumi or Kubernetes import.
"""

from __future__ import annotations

from dataclasses import replace

from ..experiment.model import Experiment, FailurePolicy, RestartRule, Spec
from ..experiment.origin import Kept
from ..frameworks import Plan
from ..problems import Problem
from ..settings import Settings

# Where a custom resource asks for the whole group's restart, by its API group
OWN_FIELDS = {
    "kubeflow.org": "spec.runPolicy.backoffLimit, with restartPolicy OnFailure or ExitCode",
    "jobset.x-k8s.io": "spec.failurePolicy.maxRestarts",
    "ray.io": "a RayJob's spec.backoffLimit",
}


def failure_policy(spec: Spec, settings: Settings) -> FailurePolicy:
    """The input's own policy (none: no restart), the stack's settings winning where set: its
    permanent exit codes fail at once, before any of the input's rules."""
    own = spec.failure_policy or FailurePolicy()
    rules = own.rules
    if codes := tuple(settings.permanent_exit_codes):
        permanent = RestartRule("aichor:permanentExitCodes", "fail", op="In", codes=codes)
        rules = (permanent, *rules)
    if settings.max_restarts is None:
        return FailurePolicy(own.max_restarts, rules, own.attempt_names, own.source)
    return FailurePolicy(settings.max_restarts, rules, own.attempt_names)


def restart_problems(spec: Spec, plan: Plan, policy: FailurePolicy) -> list[Problem]:
    """Why the experiment cannot restart as one group, at the setting that asks it to."""
    if not policy.restarts:
        return []
    where, problems = policy.source, []
    if plan.endless:
        problems.append(Problem(where, "a cluster that runs until destroyed has no run to restart"))
    elif plan.independent and spec.origin is None:  # (a JobSet's Jobs restart as a set)
        problems.append(
            Problem(
                where,
                f"{plan.framework}: its pods run on their own, with no group to restart: retry "
                "each with spec.restartPolicy.backoffLimit",
            )
        )
    if spec.origin is not None and policy.source == "aichor:maxRestarts":
        api_group = spec.origin.api_version.split("/", 1)[0]
        own = f" ({OWN_FIELDS[api_group]})" if api_group in OWN_FIELDS else ""
        problems.append(
            Problem(
                where,
                f"a {spec.origin.kind} restarts as its own fields say{own}: remove "
                "aichor:maxRestarts",
            )
        )
    for kept in _entrypoints(spec, plan).values():
        problems.append(
            Problem(
                f"{kept.path}.template.spec.containers",
                f"{kept.container} runs its image's entrypoint, which the group restart "
                f"({where}) cannot run again: give it as the container's command, or "
                f"say what {kept.main['image']} runs in aichor:entrypoints (IMAGE=COMMAND; "
                "run --local: --entrypoint)",
            )
        )
    if spec.restart_policy.backoff_limit:
        problems.append(
            Problem(
                "spec.restartPolicy.backoffLimit",
                f"retries one replica alone, which the whole group's restart ({where}) "
                "replaces: remove one of them",
            )
        )
    for group in plan.groups:
        if group.at_once < group.count:
            problems.append(
                Problem(
                    where,
                    f"the {group.role} Job runs {group.at_once} of its {group.count} pods at a "
                    "time: a group restarts only when all its replicas run at once",
                )
            )
    return problems


def told_entrypoints(manifest: Experiment, plan: Plan, settings: Settings) -> Experiment:
    """The experiment whose kept containers that run their image's entrypoint, which a group
    restart must run again, run what the stack says their image runs (`aichor:entrypoints`)
    as their command: the restart wraps it as any command."""
    spec, told = manifest.spec, settings.entrypoint_argvs()
    if spec.origin is None or not told or not failure_policy(spec, settings).restarts:
        return manifest
    entrypoints = _entrypoints(spec, plan).items()
    kept = {n: k.running(told[k.main["image"]]) for n, k in entrypoints if k.main["image"] in told}
    if not kept:
        return manifest
    origin = replace(spec.origin, kept={**spec.origin.kept, **kept})
    return manifest.model_copy(update={"spec": spec.with_origin(origin)})


def _entrypoints(spec: Spec, plan: Plan) -> dict[str, Kept]:
    """The kept templates whose container runs its image's entrypoint: neither a command of
    its own nor the operator's program (KubeRay's `ray start`) that the restart could rerun."""
    if spec.origin is None:
        return {}
    programs = {g.replica_type: g.program for g in plan.groups}
    kept = spec.origin.kept.items()
    return {n: k for n, k in kept if k.argv is None and programs.get(n) is None}
