"""One set of state names, for an experiment, a trial of a sweep and a run alike: what
`status`, the dashboard, `history` and a run's record say (Katib's words for a trial's end)."""

from __future__ import annotations

import enum
import signal
from typing import TypedDict


class State(str, enum.Enum):
    WAITING = "Waiting"  # not created yet: a sweep's trial waits for the ones before it
    PENDING = "Pending"  # created; no container running yet
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    EARLY_STOPPED = "EarlyStopped"  # a trial its sweep's early stopping ended
    METRICS_UNAVAILABLE = "MetricsUnavailable"  # a trial that ended without its objective
    INTERRUPTED = "Interrupted"  # its run was stopped (Ctrl-C, SIGTERM) before it ended
    NOT_CREATED = "Not created"  # a trial its sweep gave up before (at maxFailedTrialCount)

    def __str__(self) -> str:  # (as its name reads: in a table, a line, JSON)
        return self.value

    @property
    def ended(self) -> bool:
        return self not in (State.WAITING, State.PENDING, State.RUNNING)

    @property
    def failed(self) -> bool:
        """Whether it counts against a sweep's maxFailedTrialCount (Katib's
        `TrialsFailed + TrialMetricsUnavailable`)."""
        return self in (State.FAILED, State.METRICS_UNAVAILABLE)


def signal_name(code: int) -> str | None:
    """The signal an exit code past 128 says a process died of, as a shell reports it (137:
    SIGKILL, a lost node's or the OOM killer's); None for a program's own code."""
    try:
        return signal.Signals(code - 128).name if code > 128 else None
    except ValueError:  # (no such signal: the program's own code)
        return None


class Metric(TypedDict):
    name: str
    value: str  # (as text: Kubeflow Trainer's shape)


class TrainerStatus(TypedDict, total=False):
    """What a trainer reports of its progress: a TrainJob's `status.trainerStatus`, as the
    progress receiver takes it (pods/receiver.py checks each field as the CRD's schema does:
    a percentage 0-100, seconds in int32, 1 to 64 characters a metric's name and value)."""

    progressPercentage: int
    estimatedRemainingSeconds: int
    metrics: list[Metric]
    lastUpdatedTime: str  # RFC 3339
