"""`status`, `logs` and `events`: what an experiment (or each of a stack's) is doing, read
with a Kubernetes client (lightkube) from the stack's cluster (its kubeconfig and context), or
from a local run's read API (`--local`, `aichor_iac/local/api.py`); and `check`: the
experiment against the stack's cluster before it runs."""

from __future__ import annotations

import argparse
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ..experiment.trial import NONE_ENDED, Ended
from ..problems import ManifestError, Problem
from .inputs import inputs_of
from .report import console


@contextlib.contextmanager
def answered(args: argparse.Namespace) -> Iterator[None]:
    """The cluster's refusals and silences as problems, and Ctrl-C as the end of a watch."""
    from httpx2 import HTTPError
    from lightkube.core.exceptions import ApiError

    where = f"aichor-iac {args.handler.__name__}"
    try:
        yield
    except ApiError as error:
        status = error.status
        why = f"the cluster answered {status.code} {status.reason or status.message}"
        raise ManifestError(where, [Problem("", why)]) from None
    except HTTPError as error:
        raise ManifestError(where, [Problem("", f"cannot reach the cluster ({error})")]) from None
    except KeyboardInterrupt:  # (--watch, -f: until interrupted)
        pass


@dataclass(frozen=True)
class Source:
    """An experiment as `status`, `logs` and `events` read it."""

    name: str
    reader: Any  # its objects, where the options say
    lead: str | None  # the pod that leads its group restart, if it restarts as a group
    entry: str  # the Job whose end is its end
    trial: Any  # its place in a sweep, if it is a trial


def readers(args: argparse.Namespace, ended: Ended = NONE_ENDED) -> list[Source]:
    """Each experiment, read where the options say: a local run's, else the cluster's (with
    the trials of `ended`, those of a sweep that learns that they allow)."""
    from .. import planning
    from ..k8s.context import Context
    from ..k8s.restart import regroup_of
    from ..observe import kubeapi

    inputs = inputs_of(args)
    if ended:
        inputs = inputs.grown(ended)
    found = []
    try:
        if not args.local:
            kubeconfig, context = kubeapi.stack_connection(inputs.stack_file)
            api = kubeapi.connect(
                kubeconfig=args.kubeconfig or kubeconfig, context=args.context or context
            )
        for manifest, name in inputs.each():
            namespace = inputs.settings.namespace
            if args.local:  # (each experiment's run, as it announced itself)
                url, namespace = kubeapi.local_url(name)
                api = kubeapi.connect(url=url)
            blueprint = planning.blueprint(manifest, inputs.settings, name)
            regroup = regroup_of(blueprint)
            lead = regroup.lead.split(".", 1)[0] if regroup else None
            entry = Context(blueprint).entry_job()
            reader = kubeapi.Reader(api, namespace, name)
            found.append(Source(name, reader, lead, entry, manifest.trial))
    except kubeapi.Unreachable as error:
        where = f"aichor-iac {args.handler.__name__}"
        raise ManifestError(where, [Problem("", str(error))]) from None
    return found


def status(args: argparse.Namespace) -> int:
    """Per Job and pod, what each experiment is doing; `--watch` again every 2 seconds."""
    from rich.console import Group
    from rich.live import Live
    from rich.text import Text

    from ..observe.status import table
    from ..sweeps.plot import plot
    from ..sweeps.results import table as sweep_table

    sources = readers(args)

    def everything() -> tuple[dict[str, Any], dict[str, Any]]:
        nonlocal sources
        sources, found, sweeps = _read(args, sources)
        if args.plot:  # (again on each --watch refresh)
            plot(sweeps, args.plot)
        return found, sweeps

    def shown() -> Any:
        found, sweeps = everything()
        if len(found) == 1 and not sweeps:
            return table(found.popitem()[1])
        parts = [(Text(name, style="bold underline"), table(f)) for name, f in found.items()]
        parts += [
            (Text(name, style="bold underline"), sweep_table(f)) for name, f in sweeps.items()
        ]
        return Group(*(item for part in parts for item in part))

    with answered(args):
        if args.output == "json":
            found, sweeps = everything()
            document = (
                found.popitem()[1] if len(found) == 1 and not sweeps else {"experiments": found}
            )
            if sweeps:
                document["sweeps"] = sweeps
            print(json.dumps(document, indent=2))
            return 0
        out = console()
        if not args.watch:
            out.print(shown())
            return 0
        with Live(shown(), console=out, auto_refresh=False) as live:
            while True:  # (until interrupted)
                time.sleep(2)
                live.update(shown(), refresh=True)
    return 0


def _read(
    args: argparse.Namespace, sources: list[Source]
) -> tuple[list[Source], dict[str, Any], dict[str, Any]]:
    """Each experiment's state and each sweep's results; a sweep that learns read again with
    the trials its results allow, until they allow no more (the sources then)."""
    from ..sweeps import results

    found: dict[str, Any] = {}
    while True:
        found |= {s.name: _now(s) for s in sources if s.name not in found}
        trials = _trials(sources, found)
        sweeps = {sweep: results.report(each) for sweep, each in trials.items()}
        ended = {
            name: result
            for each in trials.values()
            if each[0][1].learns
            for name, result in results.ended(each).items()
        }
        if not ended or len(more := readers(args, ended)) == len(sources):
            return sources, found, sweeps
        sources = more


def _now(source: Source) -> dict[str, Any]:
    """What the experiment is doing (`observe.status.report`), with its group restart's
    attempt and its receiver's last report."""
    from ..k8s.progress import CONTAINER
    from ..observe.progress import TAIL, last_report, receiver_pod
    from ..observe.status import report, restart_attempt

    reader, lead, pods = source.reader, source.lead, source.reader.pods()
    attempt = reported = None
    if lead and any(p["metadata"]["name"] == lead for p in pods):
        attempt = restart_attempt([text for _, text in reader.lines(lead)])
    if receiving := receiver_pod(pods, source.entry, CONTAINER):
        reported = last_report(list(reader.lines(receiving, container=CONTAINER, tail=TAIL)))
    return report(reader.jobs(), pods, datetime.now(timezone.utc), attempt, reported)


def _trials(sources: list[Source], found: dict[str, Any]) -> dict[str, list[Any]]:
    """Each sweep's trials as `sweeps.report` reads them: their states from their entry-point
    Jobs (`found`: each experiment's report), their metrics from their last progress report,
    else from the output of those Jobs' first pods (read only then, or for early stopping,
    whose rule reads each value)."""
    from ..sweeps import results as sweeps

    trials: dict[str, list[Any]] = {}
    for source in (s for s in sources if s.trial is not None):
        group = next((g for g in found[source.name]["groups"] if g["job"] == source.entry), None)
        status = found[source.name].get("trainerStatus")
        state, lines = "Waiting", []  # (created once an earlier trial has ended)
        if group is not None:
            state = sweeps.state_of(group["condition"], group["reason"])
            ran = [r["pod"] for r in group["pods"] if r["phase"] != "Pending"]
            every = source.trial.stopping is not None
            if ran and (every or not sweeps.reports_objective(status, source.trial)):
                lines = [text for _, text in source.reader.lines(ran[0])]
        place = (source.name, source.trial, state, lines, status)
        trials.setdefault(source.trial.sweep, []).append(place)
    return trials


def logs(args: argparse.Namespace) -> int:
    """Every pod's lines (of each experiment), each after its pod's name, in the order they
    were printed; with `-f`, as they come."""
    with answered(args):
        return _logs(args, [source.reader for source in readers(args)])
    return 0


def _logs(args: argparse.Namespace, sources: list[Any]) -> int:
    pods = sorted((p["metadata"]["name"], s) for s in sources for p in s.pods())
    as_json = args.output == "json"
    lock = threading.Lock()

    def say(pod: str, when: str, text: str) -> None:
        with lock:
            if as_json:
                print(json.dumps({"pod": pod, "time": when, "line": text}), flush=True)
            else:
                print(f"{pod} {text}", flush=True)

    if not args.follow:
        lines = [(when, pod, text) for pod, s in pods for when, text in s.lines(pod)]
        for when, pod, text in sorted(lines, key=lambda line: line[0]):
            say(pod, when, text)
        return 0
    threads = [
        threading.Thread(
            target=lambda pod=pod, s=s: [say(pod, *line) for line in s.lines(pod, True)],
            daemon=True,
        )
        for pod, s in pods
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return 0


def events(args: argparse.Namespace) -> int:
    """The experiment's Kubernetes events, oldest first."""
    from rich.markup import escape

    sources = readers(args)
    with answered(args):
        found = sorted(
            (event for source in sources for event in source.reader.events()),
            key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "",
        )
        if args.output == "json":
            print(json.dumps(found, indent=2))
            return 0
        out = console()
        for event in found:
            when = event.get("lastTimestamp") or event.get("eventTime") or ""
            what = f"{event['involvedObject'].get('kind')}/{event['involvedObject'].get('name')}"
            style = "yellow" if event.get("type") == "Warning" else ""
            line = f"{when} {event.get('type', '')} {event.get('reason', '')} {what}"
            out.print(f"[{style}]{escape(line)}[/]" if style else escape(line), end=" ")
            out.print(escape(event.get("message") or ""), soft_wrap=True)
    return 0


def check(args: argparse.Namespace) -> int:
    """The experiment against the stack's cluster, read only (`aichor_iac.check`): a line per
    check; exit 1 when one blocks."""

    from .. import check as checks
    from ..check import cluster
    from ..observe import kubeapi
    from .inputs import expand

    inputs = inputs_of(args)
    objects = expand(inputs).objects
    try:
        kubeconfig, context = kubeapi.stack_connection(inputs.stack_file)
        api = kubeapi.connect(
            kubeconfig=args.kubeconfig or kubeconfig, context=args.context or context
        )
    except kubeapi.Unreachable as error:
        raise ManifestError("aichor-iac check", [Problem("", str(error))]) from None
    with answered(args):
        lines = cluster.run(objects, inputs.settings, api)
    blocked = sum(line.state == "blocked" for line in lines)
    if args.output == "json":
        found = {"checks": [line.as_json() for line in lines], "blocked": blocked}
        print(json.dumps(found, indent=2))
    else:
        console().print(checks.table(lines))
    return 1 if blocked else 0
