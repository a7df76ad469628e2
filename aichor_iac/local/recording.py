"""A local run's record kept as it runs (`records.store`): the Jobs, pods and events its read
API serves, each pod's state changes, and each container's log once its pod has ended — all
again at the end, while the cluster still holds them, so that `status`, `logs`, `events` and
the dashboard read the run once its pods are gone (`records.reader`)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from ..records import store
from .api import PHASES, event_objects, job_object, pod_object, stamp
from .cluster import LocalCluster
from .jobs import ENDED

EVERY = 2.0  # seconds between two writes of the objects while nothing else changes


class Recorder:
    """Keeps the run in `folder` up to date from `cluster` (whose objects are in
    `namespace`): `update()` as the run goes, `update(final=True)` at its end."""

    def __init__(self, folder: Path, cluster: LocalCluster, namespace: str) -> None:
        self.folder, self.cluster, self.namespace = folder, cluster, namespace
        self.states: dict[str, str] = {}
        self.kept: dict[tuple[str, str], int] = {}  # (pod, container) -> bytes kept
        self.written, self.last = 0.0, ""

    def update(self, final: bool = False) -> None:
        now = time.time()
        states = {pod: PHASES[state] for pod, state in list(self.cluster.state.items())}
        changed = [(p, s) for p, s in sorted(states.items()) if self.states.get(p) != s]
        if changed:
            store.add_states(self.folder, [(stamp(now) or "", p, s) for p, s in changed])
            self.states = states
        if changed or final or now - self.written >= EVERY:
            self._objects()
            self.written = now
        ended = [p for p, s in list(self.cluster.state.items()) if final or s in ENDED]
        for pod in ended:
            self._logs(pod)

    def _objects(self) -> None:
        cluster = self.cluster
        objects = {
            "jobs": [job_object(cluster, job) for job in cluster.jobs],
            "pods": [pod_object(cluster, job, i) for job, i in cluster.pods],
            "events": event_objects(cluster, self.namespace),
        }
        if (text := json.dumps(objects, sort_keys=True)) != self.last:
            store.write_cluster(self.folder, objects)
            self.last = text

    def last_lines(self) -> None:
        """Every pod's logs kept again as they end: once the run's end has stopped the pods
        still running and handed on their last lines, with what they printed in their grace
        period (a checkpoint saved)."""
        for pod in list(self.cluster.state):
            self._logs(pod)

    def _logs(self, pod: str) -> None:
        """The pod's containers' logs, each kept again whenever it has grown."""
        for path in sorted((self.cluster.root / pod).glob("*.log")):
            container, size = path.name[: -len(".log")], path.stat().st_size
            if self.kept.get((pod, container)) != size:
                store.write_log(self.folder, pod, container, path)
                self.kept[(pod, container)] = size
