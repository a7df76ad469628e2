"""The record of a run: what ran, when, how it ended, its metrics by step and its objective;
one record per experiment or sweep of a run (`Record`), its experiments or trials each an
`ExperimentRun`. The same types `history` prints and the record's file holds; `SCHEMA` is its
version, and a record of another version is refused by name rather than misread."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ..experiment.state import State, signal_name

SCHEMA = 1
__all__ = ["SCHEMA", "Change", "ExperimentRun", "Failure", "PodRun", "Point", "Record", "State"]


@dataclasses.dataclass(frozen=True)
class Point:
    """A metric's value at a step (the n-th value reported or printed, from 0) and the time
    it was taken (RFC 3339, as the kubelet stamps a line; None when unknown)."""

    step: int
    time: str | None
    value: float


def add_point(found: dict[str, list[Point]], name: object, when: str | None, value: object) -> None:
    """A point after the metric's others, if its name is text and its value a number (as a
    report or a printed line gives it: a number, or its text)."""
    if not isinstance(value, (int, float, str)):
        return
    try:
        number = float(value)
    except ValueError:
        return
    if isinstance(name, str):
        points = found.setdefault(name, [])
        points.append(Point(len(points), when or None, number))


@dataclasses.dataclass(frozen=True)
class PodRun:
    """A pod of an experiment, as it was last seen."""

    name: str
    job: str
    phase: str
    exit_code: int | None = None
    reason: str | None = None  # Completed, Error, OOMKilled, Unschedulable, ...
    message: str | None = None
    restarts: int = 0
    node: str | None = None
    seconds: int | None = None  # how long it ran


@dataclasses.dataclass(frozen=True)
class Failure:
    """The failure that came first: its pod, its main container's exit code (a signal's
    death: 128 + its number), when (RFC 3339), its last lines (its termination message: what
    it wrote there, else its log's tail), and how many other pods failed after it."""

    pod: str
    exit_code: int | None = None
    time: str | None = None
    lines: tuple[str, ...] = ()
    others: int = 0

    @classmethod
    def of(cls, found: Mapping[str, Any]) -> Failure:
        """From `status`'s report (`failedFirst`)."""
        return cls(
            found["pod"],
            found["exitCode"],
            found["finishedAt"],
            tuple(found["lines"]),
            found["others"],
        )

    @property
    def signal(self) -> str | None:
        return None if self.exit_code is None else signal_name(self.exit_code)

    def last(self, count: int = 10) -> tuple[str, ...]:
        """Its last lines as a view shows them under `said()`."""
        return self.lines[-count:]

    def said(self) -> str:
        """`failed first: POD, exit 137 (SIGKILL) at T`, and that the others' errors followed."""
        how = f" ({self.signal})" if self.signal else ""
        code = "" if self.exit_code is None else f", exit {self.exit_code}{how}"
        when = f" at {self.time}" if self.time else ""
        return f"failed first: {self.pod}{code}{when}{self.followed}"

    @property
    def followed(self) -> str:
        """That the others' errors after it followed from it, where another pod failed."""
        if not self.others:
            return ""
        return f"; the errors of {self.others} other pod(s) after it followed from it"


@dataclasses.dataclass(frozen=True)
class Change:
    """A pod's state, and when it took it."""

    time: str
    pod: str
    state: str


@dataclasses.dataclass(frozen=True)
class Restart:
    """A restart of the experiment's group (its lead's word): when, which attempt, and why
    (the failure it followed)."""

    time: str
    attempt: int
    reason: str = ""


@dataclasses.dataclass(frozen=True)
class ExperimentRun:
    """An experiment, or one trial of a sweep, as it ran."""

    name: str
    framework: str
    state: State
    reason: str | None = None
    created: str | None = None
    ended: str | None = None
    images: tuple[str, ...] = ()
    parameters: Mapping[str, str] = dataclasses.field(default_factory=dict)  # a trial's
    objective: float | None = None  # a trial's, by its metric's strategy
    metrics: Mapping[str, tuple[Point, ...]] = dataclasses.field(default_factory=dict)
    pods: tuple[PodRun, ...] = ()
    failed_first: Failure | None = None  # the pod whose failure decided it, and how
    restart_attempt: int | None = None  # its group restart's last attempt
    restarts: tuple[Restart, ...] = ()  # each of its group's restarts
    changes: tuple[Change, ...] = ()


@dataclasses.dataclass(frozen=True)
class Record:
    """One run of an experiment or a sweep (`kind`), named as `status` names it: `id` tells
    runs of the same name apart. A plain experiment's run is `experiment`; a sweep's, its
    `trials` (with `objective`, `direction` and the `best` trial's name)."""

    id: str
    name: str
    kind: str  # "experiment" | "sweep"
    state: State
    started: str
    ended: str | None = None
    reason: str | None = None
    file: str = ""  # the input file, as given
    path: str = ""  # the same, absolute: what its runs are found by
    digest: str = ""  # sha256 of its text
    rendered: str = ""  # sha256 of its objects as `render` prints them
    stack: str = ""
    namespace: str = ""
    experiment: ExperimentRun | None = None
    trials: tuple[ExperimentRun, ...] = ()
    objective: str | None = None
    direction: str | None = None
    best: str | None = None
    schema: int = SCHEMA

    def as_json(self) -> dict[str, Any]:
        return _plain(dataclasses.asdict(self))

    @property
    def took(self) -> int | None:
        return took(self.started, self.ended)

    def runs(self) -> tuple[ExperimentRun, ...]:
        """Its experiment, or its trials."""
        return (self.experiment,) if self.experiment else self.trials


@dataclasses.dataclass(frozen=True)
class Summary:
    """A record's line in a list of runs (what `history` lists, read without the record)."""

    id: str
    name: str
    kind: str
    state: State
    started: str
    ended: str | None
    file: str
    path: str
    trials: int  # a sweep's
    best: str | None
    schema: int = SCHEMA

    def as_json(self) -> dict[str, Any]:
        return _plain(dataclasses.asdict(self))

    @property
    def took(self) -> int | None:
        return took(self.started, self.ended)

    @classmethod
    def of(cls, record: Record) -> Summary:
        fields = {f.name: getattr(record, f.name) for f in dataclasses.fields(cls)}
        return cls(**{**fields, "trials": len(record.trials)})


def summary_of(document: Mapping[str, Any]) -> Summary:
    """A summary read back from its JSON (UnknownSchema if another version wrote it)."""
    if document.get("schema") != SCHEMA:
        raise UnknownSchema(f"schema {document.get('schema')!r}, not {SCHEMA}")
    return Summary(**{**document, "state": State(document["state"])})


def took(started: str, ended: str | None) -> int | None:
    """Seconds from `started` to `ended` (RFC 3339), None before it has ended."""
    if not ended:
        return None
    try:
        parse = [datetime.fromisoformat(t.replace("Z", "+00:00")) for t in (started, ended)]
    except ValueError:
        return None
    return int((parse[1] - parse[0]).total_seconds())


class UnknownSchema(ValueError):
    """A record written by another version of aichor-iac."""


def _plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def record_of(document: Mapping[str, Any]) -> Record:
    """A record read back from its JSON (UnknownSchema if another version wrote it)."""
    if document.get("schema") != SCHEMA:
        raise UnknownSchema(f"schema {document.get('schema')!r}, not {SCHEMA}")
    fields = dict(document)
    fields["state"] = State(fields["state"])
    fields["experiment"] = fields.get("experiment") and _run_of(fields["experiment"])
    fields["trials"] = tuple(_run_of(t) for t in fields.get("trials") or ())
    return Record(**fields)


def _run_of(document: Mapping[str, Any]) -> ExperimentRun:
    fields = dict(document)
    fields["state"] = State(fields["state"])
    fields["images"] = tuple(fields.get("images") or ())
    fields["metrics"] = {
        name: tuple(Point(**p) for p in points)
        for name, points in (fields.get("metrics") or {}).items()
    }
    fields["pods"] = tuple(PodRun(**p) for p in fields.get("pods") or ())
    fields["changes"] = tuple(Change(**c) for c in fields.get("changes") or ())
    fields["restarts"] = tuple(Restart(**r) for r in fields.get("restarts") or ())
    first = fields.get("failed_first")  # (a record before its Failure: the pod's name)
    fields["failed_first"] = Failure(first) if isinstance(first, str) else first and _failure(first)
    return ExperimentRun(**fields)


def _failure(document: Mapping[str, Any]) -> Failure:
    return Failure(**{**document, "lines": tuple(document.get("lines") or ())})
