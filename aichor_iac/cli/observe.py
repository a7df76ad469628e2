"""`status`, `logs` and `events`: what an experiment is doing, read with a Kubernetes client
(lightkube) from the stack's cluster (its kubeconfig and context), or from a local run's read API
(`--local`, `aichor_iac/local/api.py`)."""

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


def reader(args: argparse.Namespace) -> Any:
    """The experiment's objects, where the options say: a local run's, else the cluster's."""
    from .. import kubeapi

    inputs = inputs_of(args)
    try:
        if args.local:
            url, namespace = kubeapi.local_url(inputs.name)
            api = kubeapi.connect(url=url)
        else:
            kubeconfig, context = kubeapi.stack_connection(inputs.stack_file)
            api = kubeapi.connect(
                kubeconfig=args.kubeconfig or kubeconfig, context=args.context or context
            )
            namespace = inputs.settings.namespace
    except kubeapi.Unreachable as error:
        where = f"aichor-iac {args.handler.__name__}"
        raise ManifestError(where, [Problem("", str(error))]) from None
    return kubeapi.Reader(api, namespace, inputs.name), _lead(inputs)


def _lead(inputs: Any) -> str | None:
    """The pod that leads the group restart, if the experiment restarts as a group."""
    from .. import planning
    from ..k8s.restart import regroup_of

    regroup = regroup_of(planning.blueprint(inputs.manifest, inputs.settings, inputs.name))
    return regroup.lead.split(".", 1)[0] if regroup else None


def status(args: argparse.Namespace) -> int:
    """Per Job and pod, what the experiment is doing; `--watch` again every 2 seconds."""
    from rich.console import Console
    from rich.live import Live

    from ..status import report, restart_attempt, table

    source, lead = reader(args)

    def now() -> dict[str, Any]:
        pods = source.pods()
        attempt = None
        if lead and any(p["metadata"]["name"] == lead for p in pods):
            attempt = restart_attempt([text for _, text in source.lines(lead)])
        return report(source.jobs(), pods, datetime.now(timezone.utc), attempt)

    with answered(args):
        if args.output == "json":
            print(json.dumps(now(), indent=2))
            return 0
        console = Console(highlight=False)
        if not args.watch:
            console.print(table(now()))
            return 0
        with Live(table(now()), console=console, auto_refresh=False) as live:
            while True:  # (until interrupted)
                time.sleep(2)
                live.update(table(now()), refresh=True)
    return 0


def logs(args: argparse.Namespace) -> int:
    """Every pod's lines, each after its pod's name, in the order they were printed; with
    `-f`, as they come."""
    with answered(args):
        return _logs(args, *reader(args))
    return 0


def _logs(args: argparse.Namespace, source: Any, _: Any) -> int:
    pods = sorted(p["metadata"]["name"] for p in source.pods())
    as_json = args.output == "json"
    lock = threading.Lock()

    def say(pod: str, when: str, text: str) -> None:
        with lock:
            if as_json:
                print(json.dumps({"pod": pod, "time": when, "line": text}), flush=True)
            else:
                print(f"{pod} {text}", flush=True)

    if not args.follow:
        lines = [(when, pod, text) for pod in pods for when, text in source.lines(pod)]
        for when, pod, text in sorted(lines, key=lambda line: line[0]):
            say(pod, when, text)
        return 0
    threads = [
        threading.Thread(
            target=lambda pod=pod: [say(pod, *line) for line in source.lines(pod, True)],
            daemon=True,
        )
        for pod in pods
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

    source, _ = reader(args)
    with answered(args):
        found = source.events()
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
