"""Each replica's part in the group restart (`regroup.py`, the program it runs): who leads,
the budget, the exit codes that fail at once, the names of the attempt number and every
replica's host, from the experiment's blueprint."""

from __future__ import annotations

import json
import shlex
from dataclasses import astuple, dataclass, replace

from ..experiment.model import RestartRule
from ..frameworks import Names, Plan
from ..planning import Blueprint
from ..pods import LIFELINE_PORT
from .shell import FOLLOW_INTERVAL_SECONDS


@dataclass(frozen=True)
class Regroup:
    """A replica's part in the group restart (`regroup.py`): the lead's host, the restarts
    allowed, the exit codes that fail at once, the input's own names for the attempt
    number, and every replica's host (`$i` for the index) with its group's count."""

    lead: str
    budget: int
    rules: tuple[RestartRule, ...]
    names: tuple[str, ...]
    hosts: tuple[tuple[str, int], ...]
    # The Jobs every replica of which must succeed for the experiment to (a JobSet's); none:
    # the lead's success is the experiment's
    ends: tuple[str, ...] = ()

    def args(self, deadline_seconds: int) -> list[str]:
        linger = FOLLOW_INTERVAL_SECONDS + 2  # as long as an entry point lingers
        return [
            shlex.quote(self.lead),
            str(LIFELINE_PORT),
            str(self.budget),
            shlex.quote(json.dumps([list(astuple(r)) for r in self.rules])),
            shlex.quote(",".join(self.names)),  # (the input's env names: quoted as any)
            str(deadline_seconds),
            str(linger),
            shlex.quote(",".join(self.ends)),
            *(shlex.quote(f"{host}:{count}") for host, count in self.hosts),
        ]


def regroup_of(blueprint: Blueprint) -> Regroup | None:
    """The experiment's group restart, if it restarts as a group: led by the entry point's
    first replica (the host followers follow)."""
    policy, plan, names = blueprint.failure, blueprint.plan, blueprint.names
    if not policy.restarts:
        return None
    lead = next((g.follows for g in plan.groups if g.follows), None)
    return Regroup(
        lead=lead or names.host(plan.entry_point, 0),
        budget=policy.max_restarts,
        rules=tuple(r for r in (_jobs_of(rule, plan, names) for rule in policy.rules) if r),
        names=policy.attempt_names,
        hosts=tuple((names.host(g.role, "$i"), g.count) for g in plan.groups),
        ends=() if lead or not plan.independent else tuple(map(names.job, plan.completes)),
    )


def _jobs_of(rule: RestartRule, plan: Plan, names: Names) -> RestartRule | None:
    """The rule over the Jobs of its replica types (their groups' Jobs); None when it names
    types of which no group runs (an empty list would match every Job)."""
    if not rule.jobs:
        return rule
    jobs = tuple(names.job(g.role) for g in plan.groups if g.replica_type in rule.jobs)
    return replace(rule, jobs=jobs) if jobs else None
