"""A sweep's results (issue 41), as Katib reports them: each trial's metrics as its StdOut
metrics collector reads them from the trial's entry point (every `name=value` its filters find
in a line, for the objective's metrics), each metric's value by its strategy (min, max or
latest), and the best trial for the objective's direction. Pure: lines and states in, a report
(JSON) and a table out.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, NotRequired, TypedDict

import yaml
from rich.table import Table

from ..experiment.state import TrainerStatus
from ..experiment.trial import (
    EARLY_STOPPED,
    FAILED,
    MARKER,
    METRICS_UNAVAILABLE,
    SUCCEEDED,
    Ended,
    Objective,
    Result,
    Trial,
)
from ..pods import stopping

if TYPE_CHECKING:
    from rich.console import Group


class TrialRun(NamedTuple):
    """A sweep's trial as a run or a cluster shows it, which `report` and `ended` read."""

    name: str
    place: Trial
    state: str  # a `State`'s value (a record's or a cluster's word for it)
    lines: list[str]  # what its entry pod printed (read where its metrics need them)
    report: TrainerStatus | None  # its last progress report


class TrialRow(TypedDict):
    """A trial as its sweep's table reads it (`report`)."""

    trial: str
    parameters: dict[str, str]
    state: str  # a `State`'s value, or Katib's MetricsUnavailable
    progress: int | None  # its last report's progressPercentage (the receiver takes 0-100)
    objective: float | None
    metrics: dict[str, float | None]  # the objective's additional metrics
    printed: NotRequired[list[str]]  # MetricsUnavailable: the metric names it printed


class Assignment(TypedDict):
    name: str
    value: str


class BestResult(TypedDict):
    """An OptimizationJob's `status.result`, in its CRD's shape."""

    trainJobName: str
    parameters: list[Assignment]


class Status(TypedDict):
    result: BestResult


class SweepReport(TypedDict):
    """A sweep's results (`report`; `status --json` prints it under `sweeps`)."""

    sweep: str
    objective: str
    direction: str
    goal: float | None
    collected: bool  # whether its trials' metrics are collected (a collector reads them)
    trials: list[TrialRow]
    count: int  # how many trials it has (a sweep that learns asks the later ones)
    best: str | None
    failed: bool  # as many trials failed as its maxFailedTrialCount
    status: NotRequired[Status]  # an OptimizationJob's, once it has a best trial


def metrics(lines: list[str], objective: Objective) -> dict[str, list[float]]:
    """Every value of the objective's metrics in the lines, in order (Katib's collector:
    each filter's matches in a line, name and value trimmed, values that are numbers). With
    the File collector, only its file's lines (after MARKER) count: TEXT ones filtered so,
    JSON ones an object each."""
    names = {objective.metric, *objective.additional}
    if objective.file is not None:
        lines = [line[len(MARKER) :] for line in lines if line.startswith(MARKER)]
        if objective.json:
            return _json_metrics(lines, names)
    found: dict[str, list[float]] = {}
    for line in lines:
        for name, number in stopping.metric_values(line, objective.formats or (), names):
            found.setdefault(name, []).append(number)
    return found


def _json_metrics(lines: list[str], names: set[str]) -> dict[str, list[float]]:
    """Katib's File collector on JSON lines (`parseLogsInJsonFormat`): each non-empty line an
    object, each metric's value a string holding a number (other values are skipped); a line
    that is no JSON object spoils the file, as it fails Katib's collection."""
    found: dict[str, list[float]] = {}
    for line in filter(None, lines):
        try:
            record = json.loads(line)
        except ValueError:
            return {}
        if not isinstance(record, dict):
            return {}
        for name in sorted(names & set(record)):
            with contextlib.suppress(ValueError):
                if isinstance(record[name], str):
                    found.setdefault(name, []).append(float(record[name]))
    return found


def printed_names(lines: list[str], objective: Objective) -> list[str]:
    """Every metric name the objective's collector finds in the lines, whatever it is: what a
    trial printed that never printed its objective."""
    if objective.file is not None:
        lines = [line[len(MARKER) :] for line in lines if line.startswith(MARKER)]
        if objective.json:
            objects = [_object(line) for line in lines]
            return sorted({str(k) for found in objects for k in found})
    forms = objective.formats or ()
    return sorted(
        {m.group(1).strip() for line in lines for f in forms for m in re.finditer(f, line)}
    )


def _object(line: str) -> dict[str, Any]:
    with contextlib.suppress(ValueError):
        if isinstance(found := json.loads(line), dict):
            return found
    return {}


def unavailable(row: TrialRow, metric: str) -> str:
    """Why a trial is MetricsUnavailable, and what it printed instead ("did you mean")."""
    printed = row.get("printed") or []
    said = f"{row['trial']} ended without its objective {metric}"
    if not printed:
        return f"{said}: it printed no metric its collector reads"
    near = difflib.get_close_matches(metric, printed, n=1, cutoff=0.5)
    hint = f"; did you mean {near[0]}?" if near else ""
    return f"{said}: it printed {', '.join(printed[:10])}{hint}"


def value(values: list[float], strategy: str) -> float | None:
    """A metric's value for the trial: the least, the greatest or the last reported."""
    if not values:
        return None
    return {"min": min, "max": max}.get(strategy, lambda v: v[-1])(values)


def report(trials: Sequence[TrialRun]) -> SweepReport:
    """A sweep's trials — (name, place, state, entry point's lines, last progress report)
    each — with their parameters, state, progress, objective and other metrics, and the best
    one. A metric the last report holds is its value there; the others, from the lines."""
    trial = trials[0].place
    objective = trial.objective
    assert objective is not None  # (a door's trials carry it)
    rows: list[TrialRow] = []
    for name, place, given, whole, reported in sorted(trials, key=lambda t: t.place.index):
        state, lines, status = judged(place, given, whole, reported)
        values = trial_metrics(objective, lines, status)
        unavailable = objective.formats is not None and values.get(objective.metric) is None
        row: TrialRow = {
            "trial": name,
            "parameters": dict(place.values),
            "state": METRICS_UNAVAILABLE if state == SUCCEEDED and unavailable else state,
            "progress": (status or {}).get("progressPercentage"),
            "objective": values.get(objective.metric),
            "metrics": {m: v for m, v in values.items() if m != objective.metric},
        }
        if row["state"] == METRICS_UNAVAILABLE:  # (what it printed instead)
            row["printed"] = printed_names(lines, objective)
        rows.append(row)
    scored = [(r["objective"], r["trial"]) for r in rows if r["objective"] is not None]
    pick = min if objective.direction == "minimize" else max
    best = pick(scored, key=lambda s: s[0])[1] if scored else None
    # (Katib's count: TrialsFailed + TrialMetricsUnavailable)
    failed = sum(r["state"] in (FAILED, METRICS_UNAVAILABLE) for r in rows)
    found: SweepReport = {
        "sweep": trial.sweep,
        "objective": objective.metric,
        "direction": objective.direction,
        "goal": objective.goal,
        "collected": objective.formats is not None,
        "trials": rows,
        # (a sweep that learns: its later trials are asked as results come)
        "count": trial.count,
        "best": best,
        # Katib's `failed != 0 && failed >= maxFailedTrialCount`: the sweep failed there
        "failed": trial.max_failed is not None and 0 < failed >= trial.max_failed,
    }
    # An OptimizationJob's best trial as its CRD's status has it (the TrainJob's name and its
    # parameters), once there is one
    if trial.kind == "OptimizationJob" and best is not None:
        row = next(r for r in rows if r["trial"] == best)
        parameters: list[Assignment] = [
            {"name": n, "value": v} for n, v in row["parameters"].items()
        ]
        found["status"] = {"result": {"trainJobName": best, "parameters": parameters}}
    return found


def view(found: SweepReport) -> Table | Group:
    """The sweep's table, then its status in its CRD's shape where it has one (YAML)."""
    from rich.console import Group
    from rich.text import Text

    if "status" not in found:
        return table(found)
    status = yaml.safe_dump({"status": found["status"]}, sort_keys=False).rstrip()
    return Group(table(found), Text(status))


def trial_metrics(
    objective: Objective, lines: list[str], status: TrainerStatus | None
) -> dict[str, float | None]:
    """A trial's value of each of the objective's metrics: its last progress report's, else
    from its entry point's lines by the metric's strategy (Katib's default: min when
    minimizing, max when maximizing)."""
    default = "min" if objective.direction == "minimize" else "max"  # (Katib's)
    given = dict(objective.strategies)
    strategies = {m: given.get(m, default) for m in (objective.metric, *objective.additional)}
    found = metrics(lines, objective)
    values = {m: value(found.get(m, []), s) for m, s in strategies.items()}
    return values | {m: v for m, v in reported_metrics(status).items() if m in strategies}


def ended(trials: Sequence[TrialRun]) -> Ended:
    """What the sweeps that learn are asked again with, as their trials end (`doors.load_all`):
    the trials of `trials` that have ended, of sweeps that learn (a sweep fixed beforehand
    knows all its trials), each as its sweep reads it back: its state, its objective, each
    objective value its lines hold. The Pulumi program and `up --until-done` ask so from the
    cluster (`observe.history.settled`), `run --local` from its outcomes (`cli.running`)."""
    found = {}
    for name, place, given, whole, reported in trials:
        if not place.learns:
            continue
        state, lines, status = judged(place, given, whole, reported)
        objective = place.objective
        if state in (SUCCEEDED, FAILED, EARLY_STOPPED) and objective is not None:
            values = tuple(reported_values(place, lines))
            value = trial_metrics(objective, lines, status)[objective.metric]
            found[name] = Result(state, value, values)
    return found


def judged(
    place: Trial, state: str, lines: list[str], status: TrainerStatus | None
) -> tuple[str, list[str], TrainerStatus | None]:
    """A trial as its early stopping rule has it: one that ended, and whose rule stops it,
    is EarlyStopped with the lines up to the value that stopped it (whether or not its stop
    came before it ended: each reading of the sweep reads it alike); else as given."""
    rule, objective = place.stopping, place.objective
    if state not in (SUCCEEDED, FAILED, EARLY_STOPPED) or rule is None or objective is None:
        return state, lines, status
    maximize, values = objective.direction == "maximize", reported_values(place, lines)
    if (at := stopping.stopped_at(values, rule.rule, maximize, rule.start_step)) is None:
        return state, lines, status
    seen = 0
    for i, line in enumerate(lines):
        seen += len(reported_values(place, [line]))
        if seen >= at:
            return EARLY_STOPPED, lines[: i + 1], None
    return EARLY_STOPPED, lines, None


def reported_values(place: Trial, lines: list[str]) -> list[float]:
    """Each value of the trial's objective metric its lines hold, in order."""
    objective = place.objective
    return [] if objective is None else metrics(lines, objective).get(objective.metric, [])


def reported_metrics(status: TrainerStatus | None) -> dict[str, float]:
    """The numbers of a progress report's metrics (values are text: those that are numbers)."""
    found = {}
    for metric in (status or {}).get("metrics", []):
        try:
            found[metric["name"]] = float(metric["value"])
        except ValueError:
            continue
    return found


def reports_objective(status: TrainerStatus | None, trial: Trial) -> bool:
    """Whether a trial's last report holds its objective (its lines need not be read)."""
    objective = trial.objective
    return objective is not None and objective.metric in reported_metrics(status)


def table(found: SweepReport) -> Table:
    """The sweep as a terminal table: a line per trial, the best one marked."""
    out = Table(box=None, header_style="bold", pad_edge=False)
    parameters = list(found["trials"][0]["parameters"]) if found["trials"] else []
    extra = list(found["trials"][0]["metrics"]) if found["trials"] else []
    shown = any(row.get("progress") is not None for row in found["trials"])
    progress = ("progress",) if shown else ()
    for column in ("trial", *parameters, "state", *progress, found["objective"], *extra):
        out.add_column(column, justify="left" if column in ("trial", "state") else "right")
    for row in found["trials"]:
        mark = " *" if row["trial"] == found["best"] else ""
        cells = [_number(row["objective"]), *(_number(row["metrics"][m]) for m in extra)]
        values = (row["parameters"][p] for p in parameters)
        done = [] if not shown else [f"{row['progress']}%" if row["progress"] is not None else ""]
        out.add_row(row["trial"] + mark, *values, row["state"], *done, *cells)
    aim = f"{found['direction']} {found['objective']}"
    if not found["collected"]:
        out.caption = f"{found['sweep']}: {aim}; its metrics are not in the trials' output"
    elif found["best"]:
        out.caption = f"{found['sweep']}: {aim}; best trial {found['best']} (*)"
    else:
        out.caption = f"{found['sweep']}: {aim}; no trial has reported it yet"
    if (later := found.get("count", 0) - len(found["trials"])) > 0 and not found["failed"]:
        out.caption += f"; {later} more trials to be asked from the results"
    if missing := [r for r in found["trials"] if r["state"] == METRICS_UNAVAILABLE]:
        out.caption += f"; {unavailable(missing[0], found['objective'])}"
        out.caption += f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
    if found["failed"]:
        out.caption += "; the sweep failed: as many trials failed as its maxFailedTrialCount"
    out.min_width = len(out.caption)  # (a caption wraps at its table's width: kept whole)
    return out


def _number(found: float | None) -> str:
    return "" if found is None else f"{found:.6g}"
