"""A trial of a sweep (issue 41): one experiment among those a sweep fixes beforehand, with
its place in the sweep (which decides what it waits for) and the values it was given."""

from __future__ import annotations

from dataclasses import dataclass

# Before each line of a trial's metrics file on its output (Katib's File collector, read here
# from the output: `doors.katib_collect`)
MARKER = "aichor-katib-metrics: "


@dataclass(frozen=True)
class Objective:
    """What a sweep's trials are compared by, and how their metrics are read (Katib's
    ObjectiveSpec and StdOut metrics collector)."""

    metric: str  # the objective metric's name
    direction: str  # "minimize" or "maximize"
    goal: float | None = None  # a trial that reaches it is good enough
    additional: tuple[str, ...] = ()  # other metrics reported beside it
    # metric -> "min", "max" or "latest": which of a trial's values is its value
    strategies: tuple[tuple[str, str], ...] = ()
    # regular expressions, each a metric's name then its value, looked for in every line of
    # the trial's entry point (None: the metrics are not in its output)
    formats: tuple[str, ...] | None = ()
    # Katib's File collector: its metrics file's path (its lines on the output after MARKER,
    # the only lines read) and whether each is a JSON object
    file: str | None = None
    json: bool = False


@dataclass(frozen=True)
class Trial:
    sweep: str  # the sweep's name (a Katib Experiment's)
    index: int  # 0, 1, …: the order trials are created in
    count: int  # how many trials the sweep has
    parallel: int  # at most this many of its trials at once
    values: tuple[tuple[str, str], ...]  # parameter -> value, as the trial got it
    stops_sweep: bool = False  # its failure ends the sweep (Katib's maxFailedTrialCount: 0)
    objective: Objective | None = None

    @property
    def waits_for(self) -> int | None:
        """The trial whose end this one is created after (None: it starts with the sweep)."""
        return self.index - self.parallel if self.index >= self.parallel else None

    @property
    def gates(self) -> bool:
        """Whether a later trial is created only once this one has ended."""
        return self.index + self.parallel < self.count
