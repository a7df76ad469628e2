"""How a stack's sweep trials are ordered and gated in the Pulumi program (`components.
experiments`): each trial created after the one it waits for, by its URN alone; a trial that
counts earlier failures created only while they are fewer than the sweep's limit; the trials
that ended before a destroy (`Trial.kept`) said and counted by their state."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol

import pulumi
from pulumi.resource import DependencyResource
from pulumi_kubernetes.batch.v1 import Job

from .experiment.model import Experiment
from .experiment.state import State
from .experiment.trial import Trial
from .k8s import awaits


class Created(Protocol):
    """A trial's component, as the order reads it."""

    experiment: str
    entry_job: Job


# A sweep's trial as `experiments` made it: its component, or (its name, its state) if it
# ended before (`Trial.kept`)
Made = Created | tuple[str, State]


def say_kept(manifests: Sequence[Experiment]) -> None:
    """What `pulumi up` says of the trials that ended before (`Trial.kept`)."""
    kept: dict[str, list[str]] = {}
    for manifest in manifests:
        if (trial := manifest.trial) is not None and trial.kept is not None:
            kept.setdefault(trial.sweep, []).append(f"{trial.index} ({trial.kept.value})")
    for sweep, said in kept.items():
        pulumi.log.info(
            f"sweep {sweep}: trials {', '.join(said)} ended before, as aichor:history keeps "
            "them: not created again; the sweep goes on from their results"
        )


def after_job(job: Job) -> pulumi.Output[pulumi.Resource]:
    """A dependency on `job` by its URN alone (the engine creates the dependent after it, its
    await included), which Pulumi's SDK does not walk through: it walks every resource a new
    one depends on, and all theirs, to refuse a cycle (`resource_cycle_breaker`, recursively),
    and through a sweep's chain of trials each walk grew with the trials before (a
    RecursionError from 700 trials one at a time)."""
    return _unlinked(job.urn.apply(DependencyResource))


def _unlinked(output: pulumi.Output[Any]) -> pulumi.Output[Any]:
    """The same value, known when it is, without the resources it came from (`after_job`); a
    failure (a gate's) is the new output's."""
    loop = asyncio.get_event_loop()
    known, secret = loop.create_future(), loop.create_future()

    async def value() -> Any:
        try:
            found = await output.future(with_unknowns=True)
            known.set_result(await output.is_known())
            secret.set_result(await output.is_secret())
            return found
        except BaseException:
            known.set_result(False)
            secret.set_result(False)
            raise

    return pulumi.Output(set(), value(), known, secret)


def failed_counts(
    trial: Trial,
    trials: dict[tuple[str, int], Made],
    failures: dict[str, list[pulumi.Output[list[str]]]],
) -> pulumi.Output[list[str]]:
    """The names of the failed trials among those `trial` counts (its sweep's first ones, up
    to the one it waits for), known once each has ended: `failures[sweep][i]` is trial i's
    count, the one before it and one trial more, so that a sweep's gates grow with its
    trials, not their square. A trial that ended before (`Trial.kept`) counts by its state."""
    counts = failures.setdefault(trial.sweep, [])
    for index in range(len(counts), trial.counted[-1] + 1):
        each = trials[trial.sweep, index]
        before = counts[-1] if counts else pulumi.Output.from_input([])
        if isinstance(each, tuple):
            name, state = each
            failed = pulumi.Output.from_input(state is State.FAILED)  # (its entry Job failed)
        else:
            name, failed = each.experiment, each.entry_job.status.apply(awaits.job_failed)

        def more(known: list[Any], name: str = name) -> list[str]:
            names, failed = known
            return [*names, name] if failed else names

        counts.append(_unlinked(pulumi.Output.all(before, failed).apply(more)))
    return counts[trial.counted[-1]]


def sweep_gate(trial: Trial, failed: pulumi.Output[list[str]]) -> pulumi.Output[None]:
    """A dependency of the trial's objects that resolves, to nothing, once every trial it
    counts (`Trial.counted`, each awaited until it ends) has ended, while fewer of them have
    failed than the sweep's maxFailedTrialCount. Else it raises: the trial's registration
    fails, naming them, and `pulumi up` with it, creating no later trial (Katib creates none
    once the experiment has failed). The engine is told of the trial it waits for alone
    (`after_job`); the program holds it back until the others have ended."""
    limit = trial.max_failed
    assert limit is not None

    def check(names: list[str]) -> None:
        if len(names) >= limit:  # (Katib's `failed >= maxFailedTrialCount`)
            raise pulumi.RunError(
                f"sweep {trial.sweep} failed: {len(names)} of its trials failed "
                f"({', '.join(names)}), and its maxFailedTrialCount is {trial.max_failed}: "
                f"trial {trial.index} and those after it are not created"
            )

    return _unlinked(failed.apply(check))
