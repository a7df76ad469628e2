"""One set of state names, for an experiment, a trial of a sweep and a run alike: what
`status`, the dashboard, `history` and a run's record say (Katib's words for a trial's end)."""

from __future__ import annotations

import enum


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
