"""A replica's container command: its own command after its wait for peers, holding the
lifeline its followers watch or following the entry point, or its part in the group restart."""

from __future__ import annotations

from ..frameworks import Group
from . import shell
from .context import Context

# The main container's termination message when it fails without writing one: its log's tail
# (the kubelet keeps its last 80 lines, 2 KiB), which `status` and a run's record show as the
# first failure's last lines after its pod is gone. A template's own policy stays.
TAIL_ON_ERROR = "FallbackToLogsOnError"


def followed(ctx: Context, group: Group) -> bool:
    """Whether `group` is the entry point other groups follow (it holds the lifeline)."""
    plan = ctx.plan
    return group.role == plan.entry_point and any(g.follows for g in plan.groups)


def lingers_for(ctx: Context) -> int:
    """How many followers the entry point stays for after its end (0: it ends at once):
    all of them, when some count it gone only once they have seen it."""
    followers = [g for g in ctx.plan.groups if g.follows]
    if all(g.sees_entry_first for g in followers):
        return 0
    return sum(g.count for g in followers)


def listens(ctx: Context, group: Group) -> bool:
    """Whether the group's replicas listen on the lifeline's port: the entry point
    followers follow; every replica under the group restart (members answer a new lead)."""
    return followed(ctx, group) or ctx.regroup is not None


def container_command(ctx: Context, group: Group, command: str, restarts: bool) -> list[str]:
    """A replica's container command: `command` after its wait for peers, followed or
    holding the lifeline as its group says (`restarts`: its Job retries a failure), or
    its part in the group restart."""
    holds, regroup = followed(ctx, group), ctx.regroup
    deadline = ctx.settings.peer_wait_seconds
    return shell.main_command(
        command,
        group.env,
        group.follows,
        group.sees_entry_first,
        linger=lingers_for(ctx) if holds else 0,
        lifeline=holds,
        restarts=restarts,
        waits=group.waits,
        deadline_seconds=deadline,
        regroup=regroup.args(deadline) if regroup else None,
    )
