"""When a replica fails: the group restart an experiment runs with (the stack's
`aichor:maxRestarts` and `aichor:permanentExitCodes` over the input's own policy), and the
experiments that cannot restart as a group. Pure: no Pulumi or Kubernetes import.
"""

from __future__ import annotations

from ..experiment.model import FailurePolicy, RestartRule, Spec
from ..frameworks import Plan
from ..problems import Problem
from ..settings import Settings
from .entrypoints import entrypoints

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
    for kept in entrypoints(spec, plan).values():
        problems.append(
            Problem(
                f"{kept.path}.template.spec.containers",
                f"{kept.container} runs its image's entrypoint, which the group restart "
                f"({where}) cannot run again: give it as the container's command, or "
                f"say what {kept.main['image']} runs in aichor:entrypoints (`aichor-iac "
                "entrypoints` reads it from the registry; run --local: --entrypoint)",
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
