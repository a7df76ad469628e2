"""What a cluster holds of a stack's experiments (issue 54), read for `aichor-iac status` and for
the Pulumi program (`observe.trials`): each experiment's state (`observe.status.report`), each
sweep's trials as its table reads them, and a sweep that depends on its results read again
with the trials they allow, until they allow no more. What ended is read from what was kept
of it (each trial's entry Job and its first pod's output: on the cluster, else in the stack's
store): any reader, at any time, on any machine, reads the same."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ..experiment.model import Experiment
from ..experiment.trial import NONE_ENDED, Ended, Trial
from ..settings import Settings
from ..sweeps import results
from . import kubeapi

if TYPE_CHECKING:  # (status's imports cost `validate`: it is imported where it runs)
    from .status import Report


@dataclass(frozen=True)
class Source:
    """An experiment as `status`, `logs` and `events` read it."""

    name: str
    reader: Any  # its objects, where the options say (`kubeapi.Reader`)
    lead: str | None  # the pod that leads its group restart, if it restarts as a group
    entry: str  # the Job whose end is its end
    trial: Trial | None  # its place in a sweep, if it is a trial
    framework: str = ""  # its operator (pytorch, ray, …)
    where: str = ""  # a local run's place: its read API's address, or its record's


def source_of(
    manifest: Experiment,
    name: str,
    settings: Settings,
    api: Any,
    namespace: str,
    reader: Any = None,
) -> Source:
    """The experiment (named `name`) as read through `api` in `namespace` (or by `reader`: a
    run's record, `records.reader.Recorded`)."""
    from .. import planning
    from ..k8s.context import Context
    from ..k8s.restart import regroup_of

    blueprint = planning.blueprint(manifest, settings, name)
    regroup = regroup_of(blueprint)
    lead = regroup.lead.split(".", 1)[0] if regroup else None
    entry = Context(blueprint).entry_job()
    reader = reader or kubeapi.Reader(api, namespace, name)
    return Source(name, reader, lead, entry, manifest.trial, manifest.spec.operator)


# The sources as read with the trials that have ended (a sweep that depends on its results
# has more trials with more results)
Load = Callable[[Ended], list[Source]]


def settled(
    load: Load,
) -> tuple[list[Source], dict[str, Report], dict[str, list[results.TrialRun]], Ended]:
    """The experiments `load` gives, each one's state, each sweep's trials (as
    `sweeps.results.report` takes them) and the trials that ended of the sweeps that depend
    on their results: read again with those until they allow no more trials."""
    sources, ended = load(NONE_ENDED), NONE_ENDED
    found: dict[str, Report] = {}
    while True:
        found |= {s.name: now(s) for s in sources if s.name not in found}
        trials = sweep_trials(sources, found)
        more_ended = results.ended([t for each in trials.values() for t in each])
        if more_ended == ended or len(more := load(more_ended)) == len(sources):
            return sources, found, trials, more_ended
        sources, ended = more, more_ended


def now(source: Source) -> Report:
    """What the experiment is doing (`observe.status.report`), with its group restart's
    attempt and its receiver's last report."""
    from ..k8s.progress import CONTAINER
    from .progress import TAIL, last_report, receiver_pod
    from .status import report, restart_attempt

    reader, lead, pods = source.reader, source.lead, source.reader.pods()
    attempt = reported = None
    if lead and any(p["metadata"]["name"] == lead for p in pods):
        attempt = restart_attempt([text for _, text in reader.lines(lead)])
    if receiving := receiver_pod(pods, source.entry, CONTAINER):
        reported = last_report(list(reader.lines(receiving, container=CONTAINER, tail=TAIL)))
    return report(reader.jobs(), pods, datetime.now(timezone.utc), attempt, reported)


def sweep_trials(
    sources: list[Source], found: dict[str, Report]
) -> dict[str, list[results.TrialRun]]:
    """Each sweep's trials as `sweeps.results.report` reads them: their states from their
    entry-point Jobs (`found`: each experiment's report), their metrics from their last
    progress report, else from the output of those Jobs' first pods (read only then, or for
    early stopping, whose rule reads each value)."""
    from .status import state as experiment_state  # (its imports cost `validate`: here)

    trials: dict[str, list[results.TrialRun]] = {}
    for source in sources:
        if (trial := source.trial) is None:
            continue
        group = next((g for g in found[source.name]["groups"] if g["job"] == source.entry), None)
        status = found[source.name].get("trainerStatus")
        state, lines = experiment_state(found[source.name], source.entry), []
        if group is not None:
            ran = [r["pod"] for r in group["pods"] if r["phase"] != "Pending"]
            every = trial.stopping is not None
            if ran and (every or not results.reports_objective(status, trial)):
                lines = [text for _, text in source.reader.lines(ran[0])]
        trials.setdefault(trial.sweep, []).append(
            results.TrialRun(source.name, trial, state, lines, status)
        )
    return trials
