"""A run read back from what was kept of it as a cluster is read (`observe.kubeapi.Reader`'s
calls): the Jobs, pods and events last seen, and the logs kept, of one experiment of the run
(its record here: `Recorded`; its pods' parts in a stack's store: `observe.resumed`)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from . import store
from .model import Change

INSTANCE = "app.kubernetes.io/instance"


class Kept:
    """The experiment `experiment` of what was kept of a run: its objects as the read API gave
    them (kind -> objects), and `log(pod, container)`: a container's lines, each
    `<time> <text>`."""

    def __init__(
        self, objects: dict[str, Any], experiment: str, log: Callable[[str, str], list[str]]
    ) -> None:
        self.objects, self.experiment, self.log = objects, experiment, log

    def _mine(self, kind: str, labels: dict[str, str] | None = None) -> list[dict[str, Any]]:
        wanted = labels or {INSTANCE: self.experiment}
        return [
            o
            for o in self.objects.get(kind, [])
            if wanted.items() <= (o["metadata"].get("labels") or {}).items()
        ]

    def jobs(self, labels: dict[str, str] | None = None) -> list[dict[str, Any]]:
        return self._mine("jobs", labels)

    def pods(self) -> list[dict[str, Any]]:
        return self._mine("pods")

    def events(self) -> list[dict[str, Any]]:
        names = {o["metadata"]["name"] for o in [*self.jobs(), *self.pods()]}
        mine = [e for e in self.objects.get("events", []) if e["involvedObject"]["name"] in names]
        return sorted(mine, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")

    def lines(
        self, pod: str, follow: bool = False, container: str | None = None, tail: int | None = None
    ) -> Iterator[tuple[str, str]]:
        """The kept lines of the pod's main container (or `container`), each with its time;
        `follow` changes nothing: the pod has ended."""
        found = next((p for p in self.pods() if p["metadata"]["name"] == pod), None)
        if found is None:
            return
        container = container or found["spec"]["containers"][0]["name"]
        kept = self.log(pod, container)
        for line in kept[-tail:] if tail else kept:
            when, _, text = line.partition(" ")
            yield when, text


class Recorded(Kept):
    """The experiment `experiment` of the run kept in `folder`."""

    def __init__(self, folder: Path, experiment: str) -> None:
        super().__init__(_cluster(folder), experiment, functools.partial(store.read_log, folder))
        self.folder = folder

    def changes(self) -> tuple[Change, ...]:
        """Its pods' state changes, in the order they happened."""
        names = {p["metadata"]["name"] for p in self.pods()}
        return tuple(Change(**c) for c in store.read_states(self.folder) if c["pod"] in names)


def _cluster(folder: Path) -> dict[str, Any]:
    """The run's kept objects, read once for all its experiments (again once rewritten)."""
    try:
        stamp = (folder / store.CLUSTER).stat().st_mtime_ns
    except OSError:
        stamp = 0
    return _read(folder, stamp)


@functools.lru_cache(maxsize=4)
def _read(folder: Path, stamp: int) -> dict[str, Any]:
    return store.read_cluster(folder)
