"""`status`, `logs` and `events`: what an experiment (or each of a stack's) is doing, read
with a Kubernetes client (lightkube) from the stack's cluster (its kubeconfig and context), or
from a local run's read API (`--local`, `aichor_iac/local/api.py`)."""

from __future__ import annotations

import argparse
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

from ..problems import ManifestError, Problem
from .inputs import inputs_of


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


def readers(args: argparse.Namespace) -> list[tuple[str, Any, str | None, Any]]:
    """Each experiment's name, the reader of its objects where the options say (a local
    run's, else the cluster's), the pod that leads its group restart (if it has one) and the
    experiment."""
    from .. import kubeapi

    inputs = inputs_of(args)
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
            reader = kubeapi.Reader(api, namespace, name)
            found.append((name, reader, _lead(manifest, inputs.settings, name), manifest))
    except kubeapi.Unreachable as error:
        where = f"aichor-iac {args.handler.__name__}"
        raise ManifestError(where, [Problem("", str(error))]) from None
    return found


def _lead(manifest: Any, settings: Any, name: str) -> str | None:
    """The pod that leads the group restart, if the experiment restarts as a group."""
    from .. import planning
    from ..k8s.restart import regroup_of

    regroup = regroup_of(planning.blueprint(manifest, settings, name))
    return regroup.lead.split(".", 1)[0] if regroup else None


def status(args: argparse.Namespace) -> int:
    """Per Job and pod, what each experiment is doing; `--watch` again every 2 seconds."""
    from rich.console import Console, Group
    from rich.live import Live
    from rich.text import Text

    from ..status import report, restart_attempt, table
    from ..sweeps import table as sweep_table

    sources = readers(args)
    settings = inputs_of(args).settings

    def now(source: Any, lead: str | None) -> dict[str, Any]:
        pods = source.pods()
        attempt = None
        if lead and any(p["metadata"]["name"] == lead for p in pods):
            attempt = restart_attempt([text for _, text in source.lines(lead)])
        return report(source.jobs(), pods, datetime.now(timezone.utc), attempt)

    def everything() -> tuple[dict[str, Any], dict[str, Any]]:
        found = {name: now(source, lead) for name, source, lead, _ in sources}
        return found, _sweeps(sources, found, settings)

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
        console = Console(highlight=False)
        if not args.watch:
            console.print(shown())
            return 0
        with Live(shown(), console=console, auto_refresh=False) as live:
            while True:  # (until interrupted)
                time.sleep(2)
                live.update(shown(), refresh=True)
    return 0


def _sweeps(sources: list[Any], found: dict[str, Any], settings: Any) -> dict[str, Any]:
    """Each sweep's results (`sweeps.report`): its trials' states from their entry-point
    Jobs, their metrics from the output of those Jobs' first pods."""
    from .. import planning, sweeps
    from ..k8s.context import Context

    trials: dict[str, list[Any]] = {}
    for name, source, _, manifest in sources:
        if manifest.trial is None:
            continue
        entry = Context(planning.blueprint(manifest, settings, name)).entry_job()
        group = next((g for g in found[name]["groups"] if g["job"] == entry), None)
        if group is None:  # (created once an earlier trial has ended)
            state, lines = "Waiting", []
        else:
            state = {"Complete": "Succeeded", "Failed": "Failed"}.get(group["condition"], "Running")
            ran = [r["pod"] for r in group["pods"] if r["phase"] != "Pending"]
            lines = [text for _, text in source.lines(ran[0])] if ran else []
        trials.setdefault(manifest.trial.sweep, []).append((name, manifest.trial, state, lines))
    return {sweep: sweeps.report(found) for sweep, found in trials.items()}


def logs(args: argparse.Namespace) -> int:
    """Every pod's lines (of each experiment), each after its pod's name, in the order they
    were printed; with `-f`, as they come."""
    with answered(args):
        return _logs(args, [source for _, source, _, _ in readers(args)])
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
    from rich.console import Console
    from rich.markup import escape

    sources = readers(args)
    with answered(args):
        found = sorted(
            (event for _, source, _, _ in sources for event in source.events()),
            key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "",
        )
        if args.output == "json":
            print(json.dumps(found, indent=2))
            return 0
        console = Console(highlight=False)
        for event in found:
            when = event.get("lastTimestamp") or event.get("eventTime") or ""
            what = f"{event['involvedObject'].get('kind')}/{event['involvedObject'].get('name')}"
            style = "yellow" if event.get("type") == "Warning" else ""
            line = f"{when} {event.get('type', '')} {event.get('reason', '')} {what}"
            console.print(f"[{style}]{escape(line)}[/]" if style else escape(line), end=" ")
            console.print(escape(event.get("message") or ""), soft_wrap=True)
    return 0
