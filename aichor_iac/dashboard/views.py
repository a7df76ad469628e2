"""The dashboard's rows, from what `status` reads (pure: reports in, typed rows out): each
experiment's line (framework, state, pods ready of all, GPUs, age, progress, ETA, its latest
metrics), each sweep's line (trials by state, its best trial) and its trials' table."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..experiment.state import State
from ..observe.progress import seconds_since
from ..observe.status import pod_rows, state
from ..sweeps import results
from .watch import Snapshot

WAITING = State.WAITING


@dataclass(frozen=True)
class ExperimentRow:
    name: str
    framework: str
    state: str  # Succeeded, Failed, EarlyStopped (a trial), Running, Pending, Waiting
    ready: int  # pods ready
    pods: int
    gpus: int
    age: int | None  # seconds since its first Job was created
    progress: int | None  # percent, as its last report says
    eta: int | None  # seconds left, as its last report says
    metrics: tuple[tuple[str, str], ...]  # its last report's, in its order
    stale: bool  # its last report is old while pods run
    sweep: str | None  # the sweep it is a trial of


@dataclass(frozen=True)
class SweepRow:
    name: str
    kind: str  # Katib's Experiment, or OptimizationJob
    objective: str
    direction: str
    trials: int  # created
    count: int  # asked for
    states: tuple[tuple[str, int], ...]  # state -> trials in it
    best: str | None
    best_value: float | None
    failed: bool  # the sweep failed (maxFailedTrialCount)


@dataclass(frozen=True)
class TrialRow:
    name: str
    state: str
    parameters: tuple[str, ...]  # in the sweep's parameter order
    objective: float | None
    metrics: tuple[float | None, ...]  # in the sweep's metric order
    progress: int | None
    best: bool


@dataclass(frozen=True)
class SweepTable:
    sweep: SweepRow
    parameters: tuple[str, ...]
    metrics: tuple[str, ...]
    trials: tuple[TrialRow, ...]
    result: results.BestResult | None  # an OptimizationJob's status.result, in its CRD's shape


def experiment_row(snapshot: Snapshot, name: str, now: datetime) -> ExperimentRow:
    """An experiment's line (a trial's state as its sweep's table reads it: EarlyStopped)."""
    found, source = snapshot.experiments[name], snapshot.source(name)
    rows = pod_rows(found)
    status = found.get("trainerStatus") or {}
    metrics = tuple((m["name"], str(m["value"])) for m in status.get("metrics", []))
    created = found.get("created")
    return ExperimentRow(
        name=name,
        framework=source.framework if source else "",
        state=shown_state(snapshot, name),
        ready=sum(row["ready"] for row in rows),
        pods=len(rows),
        gpus=found["gpus"],
        age=seconds_since(created, now) if created else None,
        progress=status.get("progressPercentage"),
        eta=status.get("estimatedRemainingSeconds"),
        metrics=metrics,
        stale=bool((progress := found.get("progress")) and progress["stale"]),
        sweep=source.trial.sweep if source and source.trial else None,
    )


def shown_state(snapshot: Snapshot, name: str) -> str:
    """An experiment's state; a trial's as its sweep's table reads it once it has ended
    (EarlyStopped among them), its own before (Pending or Waiting, not yet Running)."""
    judged, source = snapshot.judged.get(name), snapshot.source(name)
    if name not in snapshot.experiments or source is None or (judged and State(judged).ended):
        return judged or WAITING
    return state(snapshot.experiments[name], source.entry)


def experiment_rows(
    snapshot: Snapshot, now: datetime
) -> tuple[list[ExperimentRow], list[tuple[SweepRow, list[ExperimentRow]]]]:
    """The experiments that are no trial, and each sweep with its trials' lines."""
    alone = [
        experiment_row(snapshot, s.name, now)
        for s in snapshot.sources
        if s.trial is None and s.name in snapshot.experiments
    ]
    grouped = []
    for name, found in snapshot.sweeps.items():
        trials = [
            experiment_row(snapshot, row["trial"], now)
            for row in found["trials"]
            if row["trial"] in snapshot.experiments
        ]
        grouped.append((sweep_row(name, found, snapshot), trials))
    return alone, grouped


def sweep_row(name: str, found: results.SweepReport, snapshot: Snapshot) -> SweepRow:
    """A sweep's line: its trials by state and its best trial."""
    order = (
        State.RUNNING,
        State.PENDING,
        State.WAITING,
        State.SUCCEEDED,
        State.EARLY_STOPPED,
        State.METRICS_UNAVAILABLE,
        State.FAILED,
    )
    shown = [shown_state(snapshot, r["trial"]) for r in found["trials"]]
    counted = {s: shown.count(s) for s in order}
    best = next((r for r in found["trials"] if r["trial"] == found["best"]), None)
    first = snapshot.source(found["trials"][0]["trial"]) if found["trials"] else None
    return SweepRow(
        name=name,
        kind=first.trial.kind if first and first.trial else "Experiment",
        objective=found["objective"],
        direction=found["direction"],
        trials=len(found["trials"]),
        count=found["count"],
        states=tuple((s, n) for s, n in counted.items() if n),
        best=found["best"],
        best_value=best["objective"] if best else None,
        failed=found["failed"],
    )


def sweep_table(name: str, snapshot: Snapshot) -> SweepTable:
    """A sweep's trials, a row each: parameters and metrics in one order for all."""
    found = snapshot.sweeps[name]
    parameters = tuple(dict.fromkeys(p for r in found["trials"] for p in r["parameters"]))
    metrics = tuple(dict.fromkeys(m for r in found["trials"] for m in r["metrics"]))
    trials = tuple(
        TrialRow(
            name=r["trial"],
            state=shown_state(snapshot, r["trial"]),
            parameters=tuple(r["parameters"].get(p, "") for p in parameters),
            objective=r["objective"],
            metrics=tuple(r["metrics"].get(m) for m in metrics),
            progress=r["progress"],
            best=r["trial"] == found["best"],
        )
        for r in found["trials"]
    )
    result = status["result"] if (status := found.get("status")) else None
    return SweepTable(sweep_row(name, found, snapshot), parameters, metrics, trials, result)


def trial_row(snapshot: Snapshot, name: str) -> results.TrialRow | None:
    """A trial's row of its sweep's table (its parameters, objective, metrics), if it is one."""
    rows = (r for found in snapshot.sweeps.values() for r in found["trials"])
    return next((r for r in rows if r["trial"] == name), None)
