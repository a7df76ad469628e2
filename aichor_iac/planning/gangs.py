"""The pods a gang scheduler starts together, under the stack's `aichor:gangScheduler`
(docs/services.md, What a gang is). Pure: no Pulumi or Kubernetes import.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..frameworks import Plan
from ..settings import Settings


@dataclass(frozen=True)
class Gang:
    """The pods a gang scheduler starts together (docs/services.md, What a gang is).

    A gang is what can run at once, never every pod the experiment will ever run: a Job keeps
    `parallelism` pods at a time, so its share is `Group.at_once` (as Kueue and JobSet count a
    Job's pods: min(parallelism, completions)), and `size` (the PodGroup's `minMember`) is the
    sum over the gang's groups. Pods that come and go (completions beyond parallelism) are
    independent shards: the gang is their first wave, and the later pods must still be
    schedulable once earlier ones have ended. Volcano counts succeeded pods towards the gang
    (its `ReadyTaskNum`), so every group is in it. The coscheduling plugin of
    scheduler-plugins counts only pods that have not ended (kube-scheduler's pod informer
    leaves out Succeeded and Failed pods), so a gang whose pods come and go would fall below
    `minMember` at its first unreplaced pod and never schedule the rest: there those groups
    (`left_out`) are scheduled pod by pod, outside the PodGroup."""

    scheduler: str
    roles: tuple[str, ...]  # the groups whose pods belong to the PodGroup
    size: int  # minMember: how many of those pods exist at once
    left_out: tuple[str, ...] = ()


def gang(plan: Plan, settings: Settings) -> Gang | None:
    """The experiment's gang under `aichor:gangScheduler`; None without one."""
    scheduler = settings.gang_scheduler
    if scheduler == "none":
        return None
    members = [g for g in plan.groups if scheduler == "volcano" or g.at_once == g.count]
    roles = tuple(g.role for g in members)
    left_out = tuple(g.role for g in plan.groups if g.role not in roles)
    return Gang(scheduler, roles, sum(g.at_once for g in members), left_out)
