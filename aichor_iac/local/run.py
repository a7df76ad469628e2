"""A local run of an experiment, or of a stack's experiments (`aichor-iac run --local`):
render them, run their pods on a `LocalCluster` (as root here, else in a user namespace of
the run's own: `namespaced`) in the order `pulumi up` creates them (`driving`), and decide
each one's result as the cluster would (`parts`)."""

from __future__ import annotations

import collections
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..records import store
from . import host
from .driving import Run
from .growth import Grow, Growth, rendered
from .host import LocalUnavailable
from .namespaced import in_user_namespace
from .parts import HELD_BACK, Outcome, failed_first
from .prepare import base_env, capped_to, check_entrypoints, progress_hosts, secret_values

LAST_LINES = 80  # of the failing pod, in LocalRunFailed


class LocalRunFailed(Exception):
    """A local run that failed: its exit status (as a shell reports a process's), the pod
    whose failure decided it (None: the run's timeout) and that pod's last lines."""

    def __init__(self, experiment: str, status: int, pod: str | None, lines: list[str]):
        self.experiment, self.status, self.pod, self.lines = experiment, status, pod, lines
        why = (
            failed_first((status, pod))
            if pod
            else "pulumi up failed first: it was not created"
            if (status, pod) == HELD_BACK
            else "the run's timeout was reached"
        )
        shown = "".join(f"\n{pod} {line}" for line in lines)
        super().__init__(
            f"{experiment} failed ({status}): {why}{'; its last lines:' if shown else ''}{shown}"
        )


def run_experiment(
    manifest: Any,
    settings: Any = None,
    *,
    name: str | None = None,
    replicas: int | None = None,
    timeout: float = 3600,
    on_line: Callable[[str, str], None] | None = None,
    on_progress: Callable[[Mapping[str, str]], None] | None = None,
    entrypoints: dict[str, list[str]] | None = None,
    record: Path | None = None,
    source: str = "",
) -> list[tuple[str, str]]:
    """Run every replica of the experiment (what `render` takes: an Experiment, or a
    manifest's or custom resource's path) as local processes, with the env, host names,
    ordering, waiting and following they would have on the cluster; `replicas` caps each
    group's count and masks GPUs off. It succeeds once every Job the experiment's success
    needs has succeeded; else LocalRunFailed, with the failing pod's last lines. Commands run
    in the manifest's directory (AIchor builds the image from the repository it is in), else
    here, with the programs of the Python environment running this first on PATH (as an
    activated venv would give them). As root, the pods' namespaces are made in this
    machine's; otherwise in a user namespace of the run's own. LocalUnavailable when this
    machine cannot (what it lacks). The pods' lines, `(pod, line)` in the order printed, are
    returned — or, with `on_line(pod, line)`, handed to it as they come (nothing is kept).
    `on_progress(states)` gets each pod's state whenever one changes. No image is pulled
    here: a container that gives no command runs `entrypoints[image]` (argv). `record`: the
    folder the run's record is kept in as it goes (`records.store`); `source`: the file it
    runs, as it announces itself (default: the manifest's)."""
    from ..doors import experiment_of

    manifest = experiment_of(manifest)
    kept: list[tuple[str, str]] = []
    last: dict[str, collections.deque[str]] = {}

    def line(pod: str, text: str) -> None:
        last.setdefault(pod, collections.deque(maxlen=LAST_LINES)).append(text)
        if on_line is None:
            kept.append((pod, text))
        else:
            on_line(pod, text)

    experiment = name or (settings and settings.experiment_name) or manifest.name_in("local")
    ((status, pod),) = _run(
        [manifest],
        settings,
        [experiment],
        replicas,
        timeout,
        line,
        on_progress,
        entrypoints,
        record=record,
        source=source,
    ).values()
    if status:
        raise LocalRunFailed(experiment, status, pod, list(last.get(pod or "", ())))
    return kept


def run_experiments(
    manifests: Sequence[Any],
    settings: Any = None,
    *,
    stack: str = "local",
    replicas: int | None = None,
    timeout: float = 3600,
    on_line: Callable[[str, str], None] | None = None,
    on_progress: Callable[[Mapping[str, str]], None] | None = None,
    entrypoints: dict[str, list[str]] | None = None,
    grow: Grow | None = None,
    record: Path | None = None,
    source: str = "",
) -> dict[str, Outcome]:
    """The experiments of one stack (`doors.load_all`'s: a sweep's trials, a directory's
    experiments) in one local run, as `run_experiment` runs one, each named by its own name
    and created in the order `pulumi up` creates them: a sweep's trial once the trial it
    waits for has ended (at most parallelTrialCount at once). A failed experiment does not
    stop the others: its Jobs fail, as a Job past its deadline does. Each experiment's
    outcome — (exit status, the pod whose failure decided it) — in the order decided.
    `grow(outcomes)`, told the outcomes so far each time one is decided, gives every
    experiment as known then (a sweep that learns: the trials its results allow), and the
    new ones join the run (`growth`)."""
    if len(manifests) == 1 and grow is None:
        experiment = (settings and settings.experiment_name) or manifests[0].name_in(stack)
        names = [experiment]
    else:  # (each named by its own name, as `components.experiments` names them)
        names = [m.name_in(stack) for m in manifests]
    return _run(
        list(manifests),
        settings,
        names,
        replicas,
        timeout,
        on_line,
        on_progress,
        entrypoints,
        stack,
        grow,
        record,
        source,
    )


def _run(
    manifests: list[Any],
    settings: Any,
    names: list[str],
    replicas: int | None,
    timeout: float,
    on_line: Callable[[str, str], None] | None,
    on_progress: Callable[[Mapping[str, str]], None] | None,
    entrypoints: dict[str, list[str]] | None,
    stack: str = "dev",
    grow: Grow | None = None,
    record: Path | None = None,
    source: str = "",
) -> dict[str, Outcome]:
    """The run of the experiments (`names`: theirs, in `stack`): each one's outcome. With
    `grow`, the run grows as it asks (`growth`)."""
    from ..credentials import sweep_hosts
    from ..settings import Settings

    if lacks := host.missing():
        raise LocalUnavailable("a local run needs " + ", ".join(lacks))
    settings = settings or Settings.default()
    capped = (lambda m: m) if replicas is None else (lambda m: capped_to(m, replicas))
    manifests = [capped(m) for m in manifests]
    started, blueprints = rendered(manifests, settings, names, stack)
    if any(blueprint.plan.endless for blueprint in blueprints):
        raise LocalUnavailable(
            "a RayCluster runs until destroyed: run a RayJob (or a manifest) locally"
        )
    objects = started.objects
    check_entrypoints(objects, entrypoints := entrypoints or {})
    if record is not None:
        store.write_rendered(record, objects)
    keys = {k for o in objects if o["kind"] == "Secret" for k in o.get("stringData", {})}
    # (the certificate names every receiver, a sweep's later trials' too)
    later = sweep_hosts(dict(zip(names, manifests, strict=True)), settings).values()
    hosts = sorted({*progress_hosts(objects), *(h for found in later for h in found)})
    source_file = Path(manifests[0].source)
    run = Run(
        objects=objects,
        env=base_env(masked=replicas is not None),
        secrets=secret_values(sorted(keys), hosts),
        # (as AIchor's image: the manifest's directory)
        workdir=str(source_file.resolve().parent if source_file.is_file() else Path.cwd()),
        parts=started.parts,
        timeout=timeout,
        entrypoints=entrypoints,
        after=started.after,
        gates=started.gates,
        announced=True,
        growing=grow is not None,
        record=None if record is None else str(record),
        source=source or (str(source_file.resolve()) if source_file.is_file() else ""),
    )
    growth = grow and Growth(grow, settings, stack, started, entrypoints, capped)
    if os.geteuid() == 0:
        if growth is not None:
            run.asking(lambda outcomes: run.more.put(growth.batch(outcomes)))
        return run.drive(on_line, on_progress)
    return in_user_namespace(run, on_line, on_progress, growth)
