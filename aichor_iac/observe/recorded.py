"""A run's records (`records.model`) made from what `status` reads of it (`history.settled`):
each experiment's state, pods, group restart and progress reports, each sweep's trials with
their parameters, objective and every metric by step. The local driver keeps a run's objects
and logs as it goes (`local.recording`); `run --local` makes its records from them here, so a
record says what `status` said."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from ..experiment.trial import Objective
from ..k8s.progress import CONTAINER
from ..records.model import ExperimentRun, Failure, PodRun, Point, Record, Restart, State, add_point
from ..records.reader import Recorded
from ..sweeps import results
from . import history
from .progress import JOB_NAME, receiver_pod, reported
from .status import Report, main_status, pod_rows
from .status import state as experiment_state


@dataclasses.dataclass(frozen=True)
class Run:
    """What the runner knows of a run that its objects do not say."""

    id: str
    started: str
    ended: str | None = None
    file: str = ""
    path: str = ""
    digest: str = ""
    rendered: str = ""
    stack: str = ""
    namespace: str = ""
    interrupted: bool = False
    # each failed experiment's deciding pod and its exit code, as its local run saw them
    failed_first: Mapping[str, tuple[str, int]] = dataclasses.field(default_factory=dict)


def records(load: history.Load, run: Run) -> list[Record]:
    """The run's records: one per sweep (its trials) and one per other experiment, in the
    order `load` gives them."""
    sources, found, trials, _ = history.settled(load)
    made: dict[str, Record] = {}
    for source in sources:
        if source.trial is None:
            one = _experiment(source, found[source.name], run)
            made[source.name] = _record(run, source.name, "experiment", one.state, one=one)
        elif source.trial.sweep not in made:
            made[source.trial.sweep] = _sweep(sources, found, trials[source.trial.sweep], run)
    return list(made.values())


def _record(run: Run, name: str, kind: str, state: State, **fields: Any) -> Record:
    known = {f.name for f in dataclasses.fields(Record)}
    header = {k: v for k, v in dataclasses.asdict(run).items() if k in known}
    one = fields.pop("one", None)
    runs = (one,) if one else fields.get("trials", ())
    ended = [r.ended for r in runs if r.ended]
    header["ended"] = run.ended or (max(ended) if ended and state.ended else None)
    return Record(**header, name=name, kind=kind, state=state, experiment=one, **fields)


def _sweep(
    sources: list[history.Source], found: dict[str, Report], each: list[Any], run: Run
) -> Record:
    """A sweep's record: its trials as its table reads them (`results.report`)."""
    table = results.report(each)
    by_name = {s.name: s for s in sources}
    trials = []
    places = sorted(each, key=lambda t: t.place.index)  # (as the table's rows)
    for row, (name, place, *_) in zip(table["trials"], places, strict=True):
        state = _state(row["state"], run)
        one = _experiment(by_name[name], found[name], run, place.objective, state)
        trials.append(
            dataclasses.replace(one, parameters=dict(row["parameters"]), objective=row["objective"])
        )
    states = {t.state for t in trials}
    if run.interrupted and not all(s.ended for s in states):
        state = State.INTERRUPTED
    elif table["failed"]:
        state = State.FAILED
    else:
        state = State.RUNNING if not all(s.ended for s in states) else State.SUCCEEDED
    return _record(
        run,
        table["sweep"],
        "sweep",
        state,
        trials=tuple(trials),
        objective=table["objective"],
        direction=table["direction"],
        best=table["best"],
    )


def _state(given: str, run: Run) -> State:
    """A state of `status`'s as the record's: a run stopped before it ended, Interrupted."""
    state = State(given)
    return State.INTERRUPTED if run.interrupted and not state.ended else state


def _experiment(
    source: history.Source,
    report: Report,
    run: Run,
    objective: Objective | None = None,
    state: State | None = None,
) -> ExperimentRun:
    """An experiment (or a trial) as its report and its pods' kept lines say."""
    entry = next((g for g in report["groups"] if g["job"] == source.entry), None)
    if state is None:
        state = _state(experiment_state(report, source.entry), run)
    pods = source.reader.pods()
    return ExperimentRun(
        name=source.name,
        framework=source.framework,
        state=state,
        reason=entry["reason"] if entry else None,
        created=report["created"],
        ended=_ended(pods) if state.ended else None,
        images=tuple(sorted({c["image"] for p in pods for c in p["spec"]["containers"]})),
        metrics=series(source, objective),
        pods=_pods(report),
        failed_first=_failure(report, run.failed_first.get(source.name)) if state.failed else None,
        restart_attempt=report["restart_attempt"],
        restarts=restarts(source),
        changes=source.reader.changes() if isinstance(source.reader, Recorded) else (),
    )


def _failure(report: Report, decided: tuple[str, int] | None) -> Failure | None:
    """The failure that decided a failed experiment: the pod its local run names, with the
    exit code it saw (it saw the order; the API stamps seconds, and a pod made again since
    shows none), else the first failure its pods show; with its last lines and the count of
    the other pods that failed."""
    found = report["failedFirst"]
    if found is not None and (decided is None or decided[0] == found["pod"]):
        return Failure.of(found)
    if decided is None:
        return None
    pod, code = decided
    row = next((r for r in pod_rows(report) if r["pod"] == pod), None)
    # (the pods that failed but `pod`: the one the API saw first and its others, less `pod`
    # where it shows its failure; a pod made again after it shows none)
    shown = row is not None and bool(row["exit_code"] or row["restarts"])
    others = found["others"] + 1 - shown if found is not None else 0
    if row is None:
        return Failure(pod, code, others=others)
    lines = tuple((row["message"] or "").rstrip("\n").splitlines())
    return Failure(pod, row["exit_code"] or code, lines=lines, others=others)


def _pods(report: Report) -> tuple[PodRun, ...]:
    """The report's pods, as its rows say."""
    return tuple(
        PodRun(
            name=row["pod"],
            job=group["job"],
            phase=row["phase"],
            exit_code=row["exit_code"],
            reason=row["reason"],
            message=row["message"],
            restarts=row["restarts"],
            node=row["node"],
            seconds=row["seconds"],
        )
        for group in report["groups"]
        for row in group["pods"]
    )


def _ended(pods: list[dict[str, Any]]) -> str | None:
    """When the last of the pods' main containers ended."""
    states = [main_status(p).get("state") or {} for p in pods]
    ends = [s["terminated"].get("finishedAt") for s in states if "terminated" in s]
    return max(filter(None, ends), default=None)


RESTARTED = re.compile(r"^aichor: restart attempt (\d+) \([^)]*\)(?:: (.*))?$")


def restarts(source: history.Source) -> tuple[Restart, ...]:
    """Each restart of the experiment's group, as its lead said it (when, which, why)."""
    if not source.lead or not any(
        p["metadata"]["name"] == source.lead for p in source.reader.pods()
    ):
        return ()
    said = ((when, RESTARTED.match(text)) for when, text in source.reader.lines(source.lead))
    return tuple(Restart(when, int(m[1]), m[2] or "") for when, m in said if m)


def series(source: history.Source, objective: Objective | None) -> dict[str, tuple[Point, ...]]:
    """Every metric of the experiment by step: each progress report's (its receiver's lines),
    then, for a trial, each value of its objective's metrics its entry point printed (as its
    collector reads them) that no report gave."""
    found: dict[str, list[Point]] = {}
    pods = source.reader.pods()
    if receiving := receiver_pod(pods, source.entry, CONTAINER):
        for when, text in source.reader.lines(receiving, container=CONTAINER):
            for metric in (reported(text) or {}).get("metrics", []):
                add_point(found, metric.get("name"), when, metric.get("value"))
    entry = sorted(
        p["metadata"]["name"]
        for p in pods
        if (p["metadata"].get("labels") or {}).get(JOB_NAME) == source.entry
    )
    if objective is not None and entry:
        printed: dict[str, list[Point]] = {}
        for when, text in source.reader.lines(entry[0]):
            for name, values in results.metrics([text], objective).items():
                for number in values:
                    add_point(printed, name, when, number)
        found |= {name: points for name, points in printed.items() if name not in found}
    return {name: tuple(points) for name, points in sorted(found.items())}
