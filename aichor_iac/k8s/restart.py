"""Each replica's part in the group restart (`regroup.py`, the program it runs): who leads,
the budget, the exit codes that fail at once, the names of the attempt number and every
replica's host, from the experiment's blueprint."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from ..planning import Blueprint
from .lifeline import LIFELINE_PORT
from .shell import FOLLOW_INTERVAL_SECONDS


@dataclass(frozen=True)
class Regroup:
    """A replica's part in the group restart (`regroup.py`): the lead's host, the restarts
    allowed, the exit codes that fail at once, the input's own names for the attempt
    number, and every replica's host (`$i` for the index) with its group's count."""

    lead: str
    budget: int
    permanent: tuple[int, ...]
    names: tuple[str, ...]
    hosts: tuple[tuple[str, int], ...]

    def args(self, deadline_seconds: int) -> list[str]:
        linger = FOLLOW_INTERVAL_SECONDS + 2  # as long as an entry point lingers
        return [
            shlex.quote(self.lead),
            str(LIFELINE_PORT),
            str(self.budget),
            ",".join(map(str, self.permanent)) or "''",
            ",".join(self.names) or "''",
            str(deadline_seconds),
            str(linger),
            *(shlex.quote(f"{host}:{count}") for host, count in self.hosts),
        ]


def regroup_of(blueprint: Blueprint) -> Regroup | None:
    """The experiment's group restart, if it restarts as a group: led by the entry point's
    first replica (the host followers follow)."""
    policy, plan, names = blueprint.failure, blueprint.plan, blueprint.names
    if not policy.max_restarts:
        return None
    lead = next((g.follows for g in plan.groups if g.follows), None)
    return Regroup(
        lead=lead or names.host(plan.entry_point, 0),
        budget=policy.max_restarts,
        permanent=policy.permanent_exit_codes,
        names=policy.attempt_names,
        hosts=tuple((names.host(g.role, "$i"), g.count) for g in plan.groups),
    )
