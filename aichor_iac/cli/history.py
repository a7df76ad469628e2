"""`aichor-iac history`: the runs this machine has kept (`records.store`), newest first; a run
of an experiment or a sweep shown from its record (`history NAME`: its newest, by name or by
the run's id), with its pods' kept logs (`--logs`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from ..problems import ManifestError, Problem
from ..records import store
from ..records.model import ExperimentRun, Record, State, Summary
from ..records.reader import Recorded
from .report import console

if TYPE_CHECKING:  # (rich and the progress words: imported when a run is shown)
    from rich.table import Table
    from rich.text import Text

STYLES = {State.FAILED: "red", State.SUCCEEDED: "green", State.INTERRUPTED: "yellow"}


def history(args: argparse.Namespace) -> int:
    """Every kept run (or those of NAME, the newest shown whole), newest first; with a stack
    config, its store's runs first kept here."""
    if args.stack_config:
        _fetched(args.stack_config)
    found = list(store.every_summary())
    if args.name is not None:
        found = [(f, s) for f, s in found if args.name in (s.name, s.id)]
        if not found:
            raise ManifestError("aichor-iac history", [Problem("NAME", _unknown(args.name))])
    if args.output == "json" and not args.logs:  # (the records as written: no need to type them)
        documents = {f: store.read_documents(f) for f in dict.fromkeys(f for f, _ in found)}
        kept = [d for f, s in found for d in documents[f] if d["name"] == s.name]
        print(json.dumps(kept, indent=2))
        return 0
    if args.name is None:
        if args.logs:
            reason = "give the run's NAME (or id): --logs prints one run's logs"
            raise ManifestError("aichor-iac history", [Problem("--logs", reason)])
        console().print(runs_table([s for _, s in found]) if found else _none())
        return 0
    folder, newest = found[0]
    record = next(r for r in store.read_records(folder) if r.name == newest.name)
    if args.logs:
        return _logs(folder, record, args.output == "json")
    out = console()
    out.print(shown(record))
    if len(found) > 1:
        out.print(f"\n[bold]{len(found) - 1} earlier run(s) of {args.name}:[/]")
        out.print(runs_table([s for _, s in found[1:]]))
    return 0


def _fetched(path: str) -> None:
    """The runs the stack's pods kept in its `aichor:history`, kept in this machine's store."""
    from ..observe import stored
    from ..settings import load_stack_file

    settings, stack = load_stack_file(path)
    if not settings.history:
        why = "no aichor:history in it: its pods keep no run outside the cluster"
        raise ManifestError(path, [Problem("aichor:history", why)])
    file = str(Path(path).parent / settings.manifest) if settings.manifest else ""
    stored.fetch(settings, file, stack)


def _unknown(name: str) -> str:
    names = sorted({s.name for _, s in store.every_summary()})
    kept = f" (kept: {', '.join(names[:20])}{', …' if len(names) > 20 else ''})" if names else ""
    return f"no run of {name} is kept in {store.root()}{kept}"


def _none() -> Text:
    from rich.text import Text

    return Text(f"no run is kept in {store.root()} yet: aichor-iac run --local FILE keeps each")


def runs_table(records: list[Summary]) -> Table:
    """A line per run: name, kind, state, when it started, how long it took, its trials."""
    from rich.table import Table

    out = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("name", "kind", "state", "started", "took", "trials", "id"):
        out.add_column(column)
    for record in records:
        trials = ""
        if record.kind == "sweep":
            best = f", best {record.best}" if record.best else ""
            trials = f"{record.trials}{best}"
        out.add_row(
            record.name,
            record.kind,
            _state(record.state),
            record.started.replace("T", " ").rstrip("Z"),
            _took(record),
            trials,
            record.id,
        )
    return out


def _state(state: State) -> Text:
    from rich.text import Text

    return Text(state.value, style=STYLES.get(state, ""))


def _took(record: Record | Summary) -> str:
    from ..observe.progress import duration

    return "" if record.took is None else duration(record.took)


def shown(record: Record) -> Table:
    """One run: what ran, when and how it ended; its pods (an experiment's) or its trials (a
    sweep's, the best marked), and the last value of each metric."""
    from rich.table import Table
    from rich.text import Text

    out = Table(box=None, show_header=False, pad_edge=False)
    out.add_column()
    ended = f" to {record.ended}" if record.ended else " (not ended)"
    out.add_row(Text.assemble((record.name, "bold"), f" {record.kind}  ", _state(record.state)))
    out.add_row(f"{record.started}{ended}  took {_took(record) or '-'}")
    out.add_row(f"file {record.file} (sha256 {record.digest[:12]}), stack {record.stack}")
    out.add_row(f"run {record.id}")
    if record.experiment is not None:
        out.add_row(_pods(record.experiment))
        if (failure := record.experiment.failed_first) is not None:
            out.add_row(Text(failure.said(), style="bold"))
            for line in failure.last():
                out.add_row(Text(f"    {line}", style="dim"))
        for restart in record.experiment.restarts:
            out.add_row(f"restart {restart.attempt}: {restart.reason} ({restart.time})")
    else:
        out.add_row(_trials(record))
    return out


def _pods(run: ExperimentRun) -> Table:
    from rich.table import Table

    from ..observe.progress import duration

    out = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("pod", "phase", "restarts", "reason", "exit", "time"):
        out.add_column(column)
    for pod in run.pods:
        spent = "" if pod.seconds is None else duration(pod.seconds)
        exit_code = "" if pod.exit_code is None else str(pod.exit_code)
        first = " (failed first)" if run.failed_first and pod.name == run.failed_first.pod else ""
        row = (pod.phase, str(pod.restarts), (pod.reason or "") + first, exit_code, spent)
        out.add_row(pod.name, *row)
    last = {name: points[-1].value for name, points in run.metrics.items() if points}
    if last:
        out.caption = " · ".join(f"{name} {value:g}" for name, value in last.items())
    return out


def _trials(record: Record) -> Table:
    from rich.table import Table

    out = Table(box=None, header_style="bold", pad_edge=False)
    names = sorted({name for t in record.trials for name in t.parameters})
    for column in ("trial", *names, "state", record.objective or "objective"):
        out.add_column(column)
    for trial in record.trials:
        mark = " *" if trial.name == record.best else ""
        objective = "" if trial.objective is None else f"{trial.objective:g}"
        values = [trial.parameters.get(n, "") for n in names]
        out.add_row(trial.name + mark, *values, _state(trial.state), objective)
    if record.best:
        out.caption = f"{record.direction} {record.objective}; best trial {record.best} (*)"
    return out


def _logs(folder: Path, record: Record, as_json: bool) -> int:
    """The kept lines of each pod's main container, in the order they were printed (as
    `logs` prints a running experiment's)."""
    lines = []
    for run in record.runs():
        reader = Recorded(folder, run.name)
        for pod in run.pods:
            lines += [(when, pod.name, text) for when, text in reader.lines(pod.name)]
    for when, name, text in sorted(lines, key=lambda line: line[0]):
        print(
            json.dumps({"pod": name, "time": when, "line": text}) if as_json else f"{name} {text}"
        )
    return 0
