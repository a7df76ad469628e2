"""`status`, `logs` and `events`: what an experiment (or each of a stack's) is doing, read
with a Kubernetes client (lightkube) from the stack's cluster (its kubeconfig and context), or
from a local run's read API (`--local`, `aichor_iac/local/api.py`); `check`: the
experiment against the stack's cluster before it runs; and `up`: `pulumi up` of the stack,
again as its sweeps' results on the cluster allow more trials."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..experiment.model import Experiment
from ..experiment.trial import NONE_ENDED, Ended
from ..observe import history
from ..observe.history import Source, source_of
from ..observe.located import Located, located
from ..problems import ManifestError, Problem
from ..records.reader import Recorded
from .inputs import Inputs, inputs_of
from .report import console

if TYPE_CHECKING:
    from ..dashboard.watch import Watch
    from ..observe.status import Report
    from ..sweeps.results import SweepReport


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


INSTANCE = "app.kubernetes.io/instance"  # (every object of an experiment carries its name)


def readers(
    args: argparse.Namespace,
    ended: Ended = NONE_ENDED,
    kept: Path | None = None,
    inputs: Inputs | None = None,
) -> list[Source]:
    """Each experiment (of `inputs`, else the options'), read where the options say: this
    machine's run of it (`--local`: running, else its newest record; `kept`: that record),
    else the stack's cluster (with the trials of `ended`, those of a sweep that learns that
    they allow)."""
    from ..observe import kubeapi

    inputs = inputs or inputs_of(args)
    if ended:
        inputs = inputs.grown(ended)
    found, api, places = [], None, {}
    try:
        if not args.local and kept is None:
            kubeconfig, context = kubeapi.stack_connection(inputs.stack_file)
            api = kubeapi.connect(
                kubeconfig=args.kubeconfig or kubeconfig, context=args.context or context
            )
        for manifest, name in inputs.each():
            namespace, reader, where = inputs.settings.namespace, None, ""
            if kept is not None:
                reader = Recorded(kept, name)
            elif args.local:  # (a run's, as it announced itself, else its record)
                thing = _thing(manifest, name)
                if thing not in places:
                    places[thing] = _located(inputs, manifest, thing)
                here, where = places[thing], places[thing].where
                if here.url is not None:
                    api, namespace = kubeapi.connect(url=here.url), here.namespace or namespace
                elif here.folder is not None:
                    reader = Recorded(here.folder, name)
            source = source_of(manifest, name, inputs.settings, api, namespace, reader)
            found.append(replace(source, where=where))
    except kubeapi.Unreachable as error:
        cluster = not args.local and kept is None
        if cluster and (kept_there := _stored(args, ended, inputs, str(error))):
            return kept_there
        where = f"aichor-iac {args.handler.__name__}"
        raise ManifestError(where, [Problem("", str(error))]) from None
    if api is not None and inputs.settings.history and (why := _lacking(found[0])):
        return _stored(args, ended, inputs, why) or found
    return found


def _lacking(source: Source) -> str | None:
    """Why the cluster cannot tell of the experiment (it cannot be reached, or it has none of
    its objects: destroyed), else None."""
    from httpx2 import HTTPError

    try:
        return None if source.reader.jobs() else "the cluster has none of its objects"
    except HTTPError as error:
        return f"cannot reach the cluster ({error})"


def _stored(args: argparse.Namespace, ended: Ended, inputs: Inputs, why: str) -> list[Source]:
    """Where the cluster no longer has the experiments: their newest run the stack's pods
    kept in its `aichor:history`, read from there (none without one)."""
    from ..observe import stored

    if not inputs.settings.history or inputs.path == "-":
        return []
    if not stored.fetch(inputs.settings, inputs.path, inputs.stack):
        return []
    print(
        f"aichor-iac: {why}: read from aichor:history ({inputs.settings.history})", file=sys.stderr
    )
    return readers(argparse.Namespace(**{**vars(args), "local": True}), ended, None, inputs)


def _thing(manifest: Experiment, name: str) -> str:
    """What a local run is found by: a trial's sweep, else the experiment."""
    return manifest.trial.sweep if manifest.trial else name


def _located(inputs: Inputs, manifest: Experiment, thing: str) -> Located:
    """Where this machine's run of `thing` is read (its run, else its newest record: said
    once on stderr), else Unreachable naming the file and the sweep."""
    from ..observe.kubeapi import Unreachable

    names = [n for m, n in inputs.each() if _thing(m, n) == thing]
    here = located(thing, names, inputs.absolute)
    if here is None:
        what = f"sweep {thing}" if manifest.trial else thing
        raise Unreachable(
            f"no local run of {what} ({inputs.path}) is running here, and none is recorded: "
            f"aichor-iac run --local {inputs.path}"
        )
    if (record := here.record) is not None and here.where not in _SAID:
        _SAID.add(here.where)
        when = f"ended {record.ended}" if record.ended else f"started {record.started}"
        said = f"{record.state.value}, {when}; aichor-iac history {record.id}"
        print(
            f"aichor-iac: {thing} is not running here: read from its record ({said})",
            file=sys.stderr,
            flush=True,
        )
    return here


def moved(args: argparse.Namespace, inputs: Inputs, sources: list[Source]) -> bool:
    """Whether a local run's experiments are read elsewhere now: a run of them has started
    since they were read (a run again, or the first), or the one read has ended (its record)."""
    if not args.local:
        return False
    things: dict[str, tuple[str, list[str]]] = {}
    for source in sources:
        thing = source.trial.sweep if source.trial else source.name
        things.setdefault(thing, (source.where, []))[1].append(source.name)
    for thing, (where, names) in things.items():
        here = located(thing, names, inputs.absolute)
        if here is not None and here.where != where:
            return True
    return False


_SAID: set[str] = set()  # the records said to be read


def status(args: argparse.Namespace) -> int:
    """Per Job and pod, what each experiment is doing; `--watch` again every 2 seconds."""
    from rich.console import Group
    from rich.live import Live
    from rich.table import Table
    from rich.text import Text

    from ..observe.status import table
    from ..sweeps.plot import plot
    from ..sweeps.results import view as sweep_table

    sources = readers(args)

    def everything() -> tuple[dict[str, Report], dict[str, SweepReport]]:
        nonlocal sources
        sources, found, sweeps = read_state(args, sources)
        if args.plot:  # (again on each --watch refresh)
            plot(sweeps, args.plot)
        return found, sweeps

    def shown() -> Any:
        found, sweeps = everything()
        if len(found) == 1 and not sweeps:
            return table(found.popitem()[1])
        parts: list[tuple[Text, Table | Group]] = [
            (Text(name, style="bold underline"), table(f)) for name, f in found.items()
        ]
        parts += [
            (Text(name, style="bold underline"), sweep_table(f)) for name, f in sweeps.items()
        ]
        return Group(*(item for part in parts for item in part))

    with answered(args):
        if args.output == "json":
            found, sweeps = everything()
            many: dict[str, Any] = {"experiments": found, **({"sweeps": sweeps} if sweeps else {})}
            one = len(found) == 1 and not sweeps
            print(json.dumps(found.popitem()[1] if one else many, indent=2))
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


def read_state(
    args: argparse.Namespace, sources: list[Source]
) -> tuple[list[Source], dict[str, Report], dict[str, SweepReport]]:
    """Each experiment's state and each sweep's results; a sweep that learns read again with
    the trials its results allow, until they allow no more (the sources then)."""
    from ..sweeps import results

    given = iter([sources])  # (read first as they are)

    def load(ended: Ended) -> list[Source]:
        return next(given, None) or readers(args, ended)

    sources, found, trials, _ = history.settled(load)
    return sources, found, {sweep: results.report(each) for sweep, each in trials.items()}


def dashboard(args: argparse.Namespace) -> int:
    """A local web page of the experiments, read as `status` reads them (aichor_iac.dashboard):
    the URL first, then pages served until interrupted."""
    try:
        from ..dashboard.server import serve
    except ImportError as error:
        extra = "pip install 'aichor-iac[dashboard]'"
        missing = (error.name or "a module").split(".")[0]
        reason = f"it needs its extra ({missing} is missing): {extra}"
        raise ManifestError("aichor-iac dashboard", [Problem("", reason)]) from None
    watch, title = watch_of(args)
    try:
        return serve(watch, title, args.host, args.port, args.output == "json")
    except KeyboardInterrupt:
        return 0


def watch_of(args: argparse.Namespace) -> tuple[Watch, str]:
    """What the dashboard shows (`dashboard.watch.Watch`: the experiments read as `status`
    reads them, and each one's objects as `render` prints them), and the file's name."""
    from ..dashboard.watch import Watch
    from ..records import store
    from ..records.model import Summary
    from ..review.output import to_yaml
    from .inputs import expand

    inputs = inputs_of(args)  # (a file that cannot be read: said now, before serving)

    def read(
        sources: list[Source] | None,
    ) -> tuple[list[Source], dict[str, Report], dict[str, SweepReport]]:
        with answered(args):
            if sources is None or moved(args, inputs, sources):  # (a run again, or ended: followed)
                sources = readers(args)
            return read_state(args, sources)
        raise ManifestError("aichor-iac dashboard", [Problem("", "interrupted")])  # (Ctrl-C)

    objects: list[dict[str, Any]] = []

    def render(name: str) -> str:
        """The experiment's objects, of the file's as `render` prints them (made once)."""
        objects[:] = objects or expand(inputs).objects
        mine = [o for o in objects if o["metadata"].get("labels", {}).get(INSTANCE) == name]
        if not mine:  # (a later trial of a sweep that learns: asked as the ones before end)
            return f"# {name} is not among the objects `aichor-iac render` makes of the file now\n"
        return to_yaml(mine)

    def kept() -> list[tuple[Path, Summary]]:
        """This file's kept runs, newest first (the last KEPT_RUNS)."""
        mine = (each for each in store.every_summary() if each[1].path == inputs.absolute)
        return list(itertools.islice(mine, KEPT_RUNS))

    return Watch(read, render, kept if args.local else None), inputs.path


KEPT_RUNS = 20  # the kept runs of a file the dashboard lists


def up(args: argparse.Namespace) -> int:
    """`pulumi up` of the stack in its Pulumi project (`submit.until_done`); with
    `--until-done`, again each time its sweeps' results on the cluster allow more trials
    (`history.settled`, as `status` reads them), until every trial has ended."""
    from .. import submit
    from ..experiment.trial import EARLY_STOPPED, FAILED, SUCCEEDED
    from ..settings import load_stack_file
    from .inputs import project_of

    where = "aichor-iac up"
    if (project := project_of(args.stack_config)) is None:
        reason = "give the stack's file (Pulumi.<stack>.yaml), in its Pulumi project"
        raise ManifestError(where, [Problem("--stack-config", reason)])
    stack = load_stack_file(args.stack_config)[1]

    def read() -> tuple[frozenset[str], bool]:
        sources, _, trials, _ = history.settled(lambda ended: readers(args, ended))
        states = [t.state for each in trials.values() for t in each]
        running = any(s not in (SUCCEEDED, FAILED, EARLY_STOPPED) for s in states)
        return frozenset(s.name for s in sources), running

    ups = None
    with answered(args):
        try:
            ups = submit.until_done(
                stack, project, read if args.until_done else None, poll=args.poll
            )
        except submit.PulumiMissing as error:
            raise ManifestError(where, [Problem("", str(error))]) from None
    if ups is None:  # (Ctrl-C: what is created runs on, and the cluster holds its results)
        print(f"aichor-iac: {stack}: stopped; run it again to go on", file=sys.stderr)
        return 130
    if args.output == "json":
        print(json.dumps({"stack": stack, "ups": ups}))
    else:
        print(f"aichor-iac: {stack}: pulumi up ran {ups} time{'s' * (ups != 1)}", flush=True)
    return 0


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
        threading.Thread(target=_say_all, args=(say, pod, s), daemon=True) for pod, s in pods
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return 0


def _say_all(say: Callable[..., None], pod: str, reader: Any) -> None:
    """Each line of the pod's log as it comes, said (a thread of `logs --follow`)."""
    for line in reader.lines(pod, True):
        say(pod, *line)


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
