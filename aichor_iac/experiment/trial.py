"""A trial of a sweep (issue 41): one experiment among those of a sweep, with its place in the
sweep (which decides what it waits for) and the values it was given: fixed beforehand (grid,
random, sobol), or asked from the trials that ended before it (a sweep that learns, issue 54),
and the early stopping rule it runs under."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from .state import State

# Before each line of a trial's metrics file on its output (Katib's File collector, read here
# from the output: `sweeps.collect`)
MARKER = "aichor-katib-metrics: "
# Katib's states of a trial that has ended (`State`'s)
SUCCEEDED, FAILED, EARLY_STOPPED = State.SUCCEEDED, State.FAILED, State.EARLY_STOPPED
METRICS_UNAVAILABLE = State.METRICS_UNAVAILABLE


@dataclass(frozen=True)
class Result:
    """A trial that has ended, as its sweep reads it back: how (`state`: SUCCEEDED, FAILED or
    EARLY_STOPPED), its objective (None: it reported none), and each value of the objective
    metric it reported, in order (early stopping's rule reads them)."""

    state: str
    objective: float | None = None
    values: tuple[float, ...] = ()


# A sweep's trials that have ended, by trial name: a sweep that learns asks its next trials
# from them (and early stopping makes its rule from them)
Ended = Mapping[str, Result]
NONE_ENDED: Ended = MappingProxyType({})


@dataclass(frozen=True)
class Stopping:
    """Katib's medianstop for a trial (`pods.stopping`): stopped at its `start_step`-th
    objective value if its best by then is worse than `rule`, the rule made when it was
    created from the trials that had succeeded (None: too few had)."""

    min_trials_required: int
    start_step: int
    rule: float | None = None


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
    # Katib's maxFailedTrialCount: the sweep fails at that many failed trials (at the first
    # when 0), and no trial is created after (None: it never fails)
    max_failed: int | None = None
    objective: Objective | None = None
    # The label naming the sweep on every object of its trials (a door gives its own:
    # Katib's `katib.kubeflow.org/experiment`, which Katib puts on a trial's pods)
    label: str = "aichor.ai/sweep"
    # A sweep that learns: every trial's name, in order, the later ones' before their values
    # are known (each is asked once the trials before it allow: `learns`)
    names: tuple[str, ...] = ()
    stopping: Stopping | None = None  # its sweep's early stopping (Katib's medianstop)
    # Annotations its door puts on every object of the trial (an OptimizationJob's trial:
    # its values, as the CRD's ParameterAssignment list in JSON)
    annotations: tuple[tuple[str, str], ...] = ()
    kind: str = "Experiment"  # the sweep's own kind (Katib's; Trainer's "OptimizationJob")
    # A trial of a sweep that learns that ended in an earlier life of its stack (its Jobs
    # deleted: `pulumi destroy`), read back from the stack's store (`observe.resumed`): how it
    # ended. It is not created again; the trials after it neither wait for it nor count it
    # but by that state.
    kept: State | None = None
    first: int = 0  # the first trial its stack makes (its sweep's objects made with it)

    @property
    def learns(self) -> bool:
        """Whether the sweep's later trials depend on the results of the earlier ones (their
        values, or their early stopping's rule): a render knows the trials that can start
        now, not all `count`."""
        return bool(self.names)

    @property
    def waits_for(self) -> int | None:
        """The trial whose end this one is created after (None: it starts with the sweep)."""
        return self.index - self.parallel if self.index >= self.parallel else None

    @property
    def gates(self) -> bool:
        """Whether a later trial is created only once this one has ended."""
        return self.index + self.parallel < self.count

    @property
    def stops_sweep(self) -> bool:
        """Whether its own failure ends the sweep: Katib fails an experiment once its failed
        trials reach maxFailedTrialCount, and at the first when that is 0 or 1
        (`UpdateExperimentStatusCondition`: `failed != 0 && failed >= max`)."""
        return self.max_failed in (0, 1)

    @property
    def counted(self) -> range:
        """The earlier trials whose failures decide whether this one is created (a sweep that
        fails at 2 or more failed trials): every trial up to the one it waits for, the
        trials sure to have ended when it is created. Empty where they are too few to reach
        the limit."""
        limit, last = self.max_failed, self.waits_for
        if limit is None or limit < 2 or last is None or last + 1 < limit:
            return range(0)
        return range(last + 1)
