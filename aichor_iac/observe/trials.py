"""The trials of a sweep that learns that a stack's Pulumi program creates (issue 54): those
its results allow, read from the cluster (`history.settled`) at each `pulumi up`; with
`aichor:history` (issue 67), a trial the cluster no longer has (`pulumi destroy`, a Job's TTL)
is read back from the stack's store, so that the sweep goes on from its result instead of
asking it again.

A trial is read from the store when the cluster has none of its Jobs and the sweep's newest
run there holds its entry pod with an exit (its command ended) and the values it is asked
with now (a sweep whose file changed is another sweep). A trial whose pod was stopped before
its command ended (a destroy while it ran) is not: it is made again, with the same values."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ..experiment.model import Experiment
from ..experiment.state import State
from ..experiment.trial import Ended, Result
from ..problems import ManifestError, Problem
from ..records.reader import Kept
from ..settings import Settings
from ..sweeps.results import TrialRun
from . import kubeapi, stored
from .history import Source, settled, source_of

WHERE = "aichor:history"  # (a source read from the store: its `where`)


class Resumed:
    """A stack's store, read once when a trial's Jobs are missing from the cluster."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._read: tuple[stored.Source, dict[str, list[stored.Part]]] | None = None

    def newest(self, sweep: str) -> tuple[stored.Source, list[stored.Part]]:
        """The store, and the parts of the sweep's newest run there (none: it has none)."""
        if self._read is None:
            why = "a sweep that learns reads its ended trials there when their Jobs are gone"
            read, kept = stored.read_parts(self.settings, f"Pulumi config ({why})")
            self._read = read, {run[0].group: run for run in stored.runs(kept)}
        read, by_sweep = self._read
        return read, by_sweep.get(sweep, [])

    def instead(self, source: Source) -> Source:
        """The trial `source` reads, from the store if it ended there and the cluster has none
        of its Jobs; else `source` itself."""
        trial = source.trial
        if trial is None or not trial.learns or source.reader.jobs():
            return source
        read, run = self.newest(trial.sweep)
        mine = [p for p in run if p.about["experiment"] == source.name]
        entry = next((p for p in mine if p.about.get("entry")), None)
        if entry is None or not entry.about.get("exits"):
            return source  # (never ran, or stopped before its command ended: made again)
        if (entry.about.get("trial") or {}).get("parameters") != dict(trial.values):
            return source  # (another sweep's: its file changed)
        logs = stored.logs_of(mine, stored.contents(mine, read))
        started = min(p.about["started"] for p in mine)

        def log(pod: str, container: str) -> list[str]:
            return [f"{started} {line}" for line in logs.get((pod, container), [])]

        reader = Kept(stored.objects_of(mine), source.name, log)
        return dataclasses.replace(source, reader=reader, where=WHERE)


def asked(
    load_all: Callable[[Ended], tuple[Experiment, ...]],
    settings: Settings,
    stack: str,
    api: Any,
) -> tuple[Experiment, ...]:
    """The experiments `load_all` reads, with the trials their sweeps' results on the cluster
    (through `api`) allow: what the Pulumi program creates, step by step, as trials end. With
    `aichor:history`, a trial that ended there and whose Jobs are gone (`Resumed`) is read
    from there, and given as kept (`Trial.kept`: not created again)."""
    last: list[tuple[Experiment, ...]] = []  # (the manifests read last: of the trials that
    # ended which `settled` ends with, so the file is not read again)
    store = Resumed(settings) if settings.history else None

    def load(ended: Ended) -> list[Source]:
        last[:] = [load_all(ended)]
        namespace = settings.namespace
        found = [source_of(m, m.name_in(stack), settings, api, namespace) for m in last[0]]
        return [store.instead(s) for s in found] if store else found

    sources, _, trials, ended = settled(load)
    _none_lost(sources, trials, kubeapi.Reader(api, settings.namespace, ""))
    kept = {s.name: ended[s.name] for s in sources if s.where == WHERE and s.name in ended}
    return _with_kept(last[0], kept, stack) if kept else last[0]


def _with_kept(
    manifests: tuple[Experiment, ...], kept: dict[str, Result], stack: str
) -> tuple[Experiment, ...]:
    """The experiments, the trials of `kept` as ones that ended before (`Trial.kept`), each
    other trial of their sweeps knowing the first one the stack makes (`Trial.first`)."""
    first: dict[str, int] = {}
    for manifest in manifests:
        if (trial := manifest.trial) is not None and manifest.name_in(stack) not in kept:
            first.setdefault(trial.sweep, trial.index)
    found = []
    for manifest in manifests:
        trial, name = manifest.trial, manifest.name_in(stack)
        if trial is not None and name in kept:
            manifest = manifest.as_trial(dataclasses.replace(trial, kept=State(kept[name].state)))
        elif trial is not None and trial.sweep in first:
            manifest = manifest.as_trial(dataclasses.replace(trial, first=first[trial.sweep]))
        found.append(manifest)
    return tuple(found)


def _none_lost(sources: list[Source], trials: dict[str, list[TrialRun]], cluster: Any) -> None:
    """A ManifestError if a sweep has trials on the cluster (read by `cluster`, a
    `kubeapi.Reader`) that its results, as read now, no longer allow (their pods, and the
    lines they printed, deleted): Pulumi would delete them, and the trials they were asked
    from could not be asked again."""
    known = {s.name for s in sources}
    for sweep, each in trials.items():
        trial = each[0].place
        if not trial.learns:
            continue
        jobs = cluster.jobs({trial.label: sweep})
        there = {j["metadata"]["labels"].get("app.kubernetes.io/instance") for j in jobs}
        if lost := sorted(n for n in there if n and n not in known):
            reason = (
                f"trials {', '.join(lost)} of sweep {sweep} are on the cluster, and the results "
                "they were asked from can no longer be read (the pods of the trials before "
                "them, deleted?): nothing is created or deleted; delete those trials' Jobs, "
                "or the stack, to start the sweep again"
            )
            raise ManifestError(sweep, [Problem("spec", reason)])


def from_cluster(
    load_all: Callable[[Ended], tuple[Experiment, ...]],
    settings: Settings,
    stack: str,
    kubeconfig: Any = None,
    context: str | None = None,
) -> tuple[Experiment, ...]:
    """`asked` on the cluster the Kubernetes provider is given (`kubernetes:kubeconfig` and
    `kubernetes:context`, else the current kubeconfig context): what the Pulumi program of a
    sweep that depends on its results creates. A cluster that cannot be read is a
    ManifestError: the program creates nothing rather than fewer trials."""
    from httpx2 import HTTPError
    from lightkube.core.exceptions import ApiError

    from ..problems import ManifestError, Problem

    why = "a sweep that depends on its results reads them from its cluster"
    try:
        config, named = kubeapi.provider_connection(kubeconfig, context)
        return asked(load_all, settings, stack, kubeapi.connect(kubeconfig=config, context=named))
    except kubeapi.Unreachable as error:
        said = f"{why}: {error}"
    except (ApiError, HTTPError) as error:
        said = f"{why}, which answered: {error}"
    raise ManifestError("Pulumi config", [Problem("kubernetes:kubeconfig", said)])
