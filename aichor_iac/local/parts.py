"""What decides each experiment of a local run (a run holds one, or several: a sweep's trials,
a stack's experiments): done once the pods its success needs have succeeded, failed at the
first failure of one of those or of a pod the others wait for."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..experiment.state import State, signal_name

# An experiment's outcome: its exit status (as a shell reports a process's) and the pod whose
# failure decided it (None: it succeeded, or the run's timeout came first)
Outcome = tuple[int, str | None]
TIMED_OUT: Outcome = (124, None)
# Never created: `pulumi up` failed first (an awaited Job failed, as a sweep's trial does
# when the sweep's maxFailedTrialCount is 0 or 1, or the sweep failed at its limit)
HELD_BACK: Outcome = (125, None)


def trial_state(outcome: Outcome, printed: bool) -> State:
    """A trial's state (Katib's words) from its outcome in a run; `printed`: whether its
    entry pod printed anything (one the run's timeout caught ran, or waited)."""
    if outcome == TIMED_OUT:
        return State.RUNNING if printed else State.WAITING
    if outcome == HELD_BACK:
        return State.NOT_CREATED
    return State.SUCCEEDED if outcome[0] == 0 else State.FAILED


@dataclasses.dataclass(frozen=True)
class Part:
    """An experiment of a run: the roles whose pods must all succeed (`count` of them), and
    the roles whose pods' first failure fails it (those, and the ones others wait for)."""

    name: str
    needed: tuple[str, ...]
    deciding: tuple[str, ...]
    count: int
    rejoining: tuple[str, ...] = ()  # roles whose containers restart in place (elastic)

    @classmethod
    def of(cls, name: str, plan: Any) -> Part:
        needed = tuple(sorted(plan.completes))
        return cls(
            name=name,
            needed=needed,
            deciding=tuple(sorted({*needed, *awaited(plan)})),
            count=sum(g.count for g in plan.groups if g.role in plan.completes),
            rejoining=plan.rejoining,
        )

    def outcome(self, results: list[tuple[str, int, str, str]]) -> Outcome | None:
        """Its outcome from the pods' results so far — (pod, exit code, experiment, role)
        each, in the order they ended — or None while it runs. A smoke test: the first
        failure of a deciding pod decides, even where its Job would make the pod again (a
        group restart runs within the pods)."""
        mine = [(pod, code, role) for pod, code, name, role in results if name == self.name]
        failed = [(code, pod) for pod, code, role in mine if code and role in self.deciding]
        if failed:  # (a signal's death already 128 + the signal: `containers.wait`)
            code, pod = failed[0]
            return code, pod
        if sum(role in self.needed for _, _, role in mine) == self.count:
            return 0, None
        return None


def awaited(plan: Any) -> list[str]:
    """The groups whose pods others wait to be up, which decide a run too: their failure
    leaves the rest waiting (on a cluster up to aichor:peerWaitSeconds or the experiment's
    timeout). A Ray head, MPI's workers (gates), and the Ray nodes the entry point waits for:
    the groups it is created after (a node that never joins holds its node wait)."""
    entry = next(g for g in plan.groups if g.role == plan.entry_point)
    return sorted(g.role for g in plan.groups if g.gates or g.role in entry.after)


def failed_first(outcome: Outcome) -> str:
    """Who decided a failed outcome, as its line says it: the pod that failed first, and the
    signal of a code past 128 (137: SIGKILL, a lost node's or the OOM killer's)."""
    status, pod = outcome
    how = f" ({name})" if (name := signal_name(status)) else ""
    return f"{pod} failed first{how}"


def first_failure(outcomes: dict[str, Outcome]) -> Outcome:
    """A run's own outcome: its first experiment to fail (in the order they were decided),
    else success."""
    return next((o for o in outcomes.values() if o[0]), (0, None))
