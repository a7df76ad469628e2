"""When a replica fails: the group restart an experiment runs with (the stack's
`aichor:maxRestarts` and `aichor:permanentExitCodes` over the input's own policy), and the
experiments that cannot restart as a group. Pure: no Pulumi or Kubernetes import.
"""

from __future__ import annotations

from .experiment.model import FailurePolicy, Spec
from .frameworks import Plan
from .problems import Problem
from .settings import Settings


def failure_policy(spec: Spec, settings: Settings) -> FailurePolicy:
    """The input's own policy (none: no restart), the stack's settings winning where set."""
    own = spec.failure_policy or FailurePolicy()
    codes = tuple(sorted({*own.permanent_exit_codes, *settings.permanent_exit_codes}))
    if settings.max_restarts is None:
        return FailurePolicy(own.max_restarts, codes, own.attempt_names, own.source)
    return FailurePolicy(settings.max_restarts, codes, own.attempt_names)


def restart_problems(spec: Spec, plan: Plan, policy: FailurePolicy) -> list[Problem]:
    """Why the experiment cannot restart as one group, at the setting that asks it to."""
    if not policy.max_restarts:
        return []
    where, problems = policy.source, []
    if plan.endless:
        problems.append(Problem(where, "a cluster that runs until destroyed has no run to restart"))
    elif plan.independent:
        problems.append(
            Problem(
                where,
                f"{plan.framework}: its pods run on their own, with no group to restart: retry "
                "each with spec.restartPolicy.backoffLimit",
            )
        )
    if spec.origin is not None and policy.source == "aichor:maxRestarts":
        problems.append(
            Problem(
                where,
                f"a {spec.origin.kind} restarts as its own fields say: the whole group's "
                "restart runs AIchor manifests and functions (remove aichor:maxRestarts)",
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
