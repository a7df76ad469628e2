"""A rendered run on the local cluster (`Run`): its Jobs created in the order `pulumi up`
creates them (`_Creation`), each experiment's outcome decided as its pods end, its read API
announced for `status --local`; a growing run's Batches taken as they come (`growth`)."""

from __future__ import annotations

import contextlib
import dataclasses
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ..k8s import awaits
from .api import LocalApi, announce
from .cluster import LocalCluster
from .growth import Batch
from .jobs import PodState, owner
from .parts import HELD_BACK, TIMED_OUT, Outcome, Part
from .prepare import Gate
from .recording import Recorder


@dataclasses.dataclass
class Run:
    """A rendered experiment to run locally: its objects, the pods' base env, the generated
    Secret's values, where commands run, which groups' pods (`count` of them) must succeed,
    and which groups' failure fails it at once (theirs and the gates'), and what the
    images' entrypoints are (`entrypoints`: image -> argv, for containers that give no
    command)."""

    objects: list[dict[str, Any]]
    env: dict[str, str]
    secrets: dict[str, str]
    workdir: str
    parts: list[Part]  # its experiments, and what decides each
    timeout: float
    entrypoints: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    # Job -> the Jobs it is created after, once their awaits hold (as `pulumi up` does)
    after: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    # experiment -> its gate: created unless its sweep has failed (`prepare.sweep_gates`)
    gates: dict[str, Gate] = dataclasses.field(default_factory=dict)
    # Whether the run announces its read API for `status --local` (under each part's name)
    announced: bool = False
    # Where a run in a user namespace of its own (a network of its own) serves that API: a
    # Unix socket its parent forwards from this side's 127.0.0.1 and announces
    api_socket: str | None = None
    # Whether it grows: each decided outcome is told (`asking`), and a Batch comes back on
    # `more`, of what that outcome lets be created (`growth`)
    growing: bool = False
    # The folder its record is kept in as it runs (`recording`), if it is kept
    record: str | None = None
    # The file it runs (absolute), announced with its API: a run of another file whose
    # experiments have the same names is not read for it
    source: str = ""

    def __post_init__(self) -> None:
        self.parts = [p if isinstance(p, Part) else Part(**p) for p in self.parts]  # (JSON)
        self.more: queue.Queue[Batch] = queue.Queue()
        self.asked = 0  # outcomes told whose Batch has not come yet
        self.ask: Callable[[dict[str, Outcome]], None] = lambda outcomes: None

    def asking(self, ask: Callable[[dict[str, Outcome]], None]) -> None:
        """Who is told the outcomes so far each time one is decided (a growing run)."""
        self.ask = ask

    @property
    def namespace(self) -> str:
        return self.objects[0]["metadata"].get("namespace", "default")

    def drive(
        self,
        on_line: Callable[[str, str], None] | None,
        on_progress: Callable[[Mapping[str, str]], None] | None,
        private: bool = False,
    ) -> dict[str, Outcome]:
        """Create every Job, wait for each experiment's outcome, leave the cluster; the
        outcomes, in the order they were decided (an experiment undecided at the timeout
        last). One experiment's failure ends a run of one; of several (a sweep), its Jobs
        fail as a Job past its deadline does, and the others go on."""
        cluster = LocalCluster(
            self.objects,
            self.env,
            self.secrets,
            on_line,
            Path(self.workdir),
            private,
            entrypoints=self.entrypoints,
            rejoining={(p.name, role) for p in self.parts for role in p.rejoining},
        )
        with (
            _terminated_as_exit(),
            cluster,
            _served(self, cluster) as announced,
            _recorded(self, cluster) as record,  # (its end kept before it is unannounced)
        ):
            creating = _Creation(cluster, self.after, self.gates, self.timeout)
            deadline, states = time.monotonic() + self.timeout, dict[str, PodState]()
            outcomes: dict[str, Outcome] = {}
            while time.monotonic() < deadline and not self._ended(outcomes):
                record()
                decided = len(outcomes)
                self._take(cluster, creating, announced, outcomes)
                creating.advance()
                if on_progress is not None and states != cluster.state:
                    states = dict(cluster.state)
                    on_progress(states)
                failed = self._decide(cluster, outcomes)
                if failed and len(self.parts) == 1 and not self.growing:
                    break
                for job in (cluster.controllers.job(n) for n in creating.held_back()):
                    outcomes.setdefault(owner(job)[0], HELD_BACK)
                if self.growing and len(outcomes) > decided:
                    cluster.flush()  # (the lines of the pods that ended: told first)
                    self.asked += 1
                    self.ask(dict(outcomes))
                time.sleep(0.2)
            if not any(code for code, _ in outcomes.values()):  # the followers stop by
                cluster.settle(timeout=10)  # themselves: let them, briefly
            if on_progress is not None:
                on_progress(dict(cluster.state))
        for pod in sorted(cluster.unshipped):  # (said as it happened: not a success here)
            experiment = owner(cluster.controllers.job_of_pod(pod))[0]
            if outcomes.get(experiment, (1, None))[0] == 0:
                outcomes[experiment] = (1, pod)
        return {**outcomes, **{p.name: TIMED_OUT for p in self.parts if p.name not in outcomes}}

    def _ended(self, outcomes: dict[str, Outcome]) -> bool:
        """Every experiment decided, and (growing) no Batch still to come of the last."""
        return len(outcomes) >= len(self.parts) and self.asked == 0

    def _take(
        self,
        cluster: LocalCluster,
        creating: _Creation,
        announced: Callable[[list[Part]], None],
        outcomes: dict[str, Outcome],
    ) -> None:
        """Each Batch that has come: its objects added to the cluster, its Jobs to be
        created in their order, its experiments decided and announced as the others."""
        while True:
            try:
                batch = self.more.get_nowait()
            except queue.Empty:
                return
            self.asked -= 1
            if not batch.objects:
                continue
            cluster.add(batch.objects)
            self.parts += batch.parts
            self.after |= batch.after  # (the dicts `creating` reads)
            self.gates |= batch.gates
            creating.waiting += batch.jobs
            announced(batch.parts)

    def _decide(self, cluster: LocalCluster, outcomes: dict[str, Outcome]) -> bool:
        """Each undecided experiment's outcome, where the pods' results give it (`outcomes`,
        added to); whether one has failed. The Jobs of one that failed (of several) fail."""
        of = cluster.controllers.job_of_pod
        results = [
            (pod, result.returncode, *owner(of(pod)))
            for pod, result in list(cluster.results.items())
        ]
        failed = False
        for part in (p for p in self.parts if p.name not in outcomes):
            if (outcome := part.outcome(results)) is None:
                continue
            outcomes[part.name] = outcome
            failed = failed or bool(outcome[0])
            if outcome[0] and len(self.parts) > 1:
                for job in cluster.jobs:
                    if owner(job)[0] == part.name:
                        cluster.fail_job(job["metadata"]["name"], "ExperimentFailed")
        return failed


class _Creation:
    """`pulumi up`'s order on the local cluster: a Job is created once every Job it depends
    on is created and its await holds (`awaits`), and, a sweep's trial, unless its sweep has
    failed (its gate). Once an await fails or a gate refuses, `up` fails: nothing more is
    created (what is created runs on)."""

    def __init__(
        self,
        cluster: LocalCluster,
        after: dict[str, list[str]],
        gates: dict[str, Gate],
        timeout: float,
    ):
        self.cluster, self.after, self.gates, self.timeout = cluster, after, gates, timeout
        self.waiting = [job["metadata"]["name"] for job in cluster.jobs]
        self.created: list[str] = []
        self.held: set[str] = set()
        self.failed = False  # `pulumi up` has failed

    def advance(self) -> None:
        for name in [n for n in self.created if n not in self.held]:
            job = self.cluster.controllers.job(name)
            try:
                if awaits.holds(job, self.cluster.job_status(name)):
                    self.held.add(name)
            except awaits.AwaitFailed:
                self.held.add(name)  # (ended: held for good, and `up` fails)
                self.failed = True
        for name in list(self.waiting):
            if self.failed or not {*self.after.get(name, ()), *self._counted(name)} <= self.held:
                continue
            if self._refused(name):
                self.failed = True
                continue
            self.cluster.start(name, self.timeout)
            self.waiting.remove(name)
            self.created.append(name)

    def _gate(self, name: str) -> Gate:
        """The Job's trial's gate: its sweep's limit, and the entry Jobs of the earlier trials
        it counts (it waits until each has ended: `sweep_order.sweep_gate`)."""
        return self.gates.get(owner(self.cluster.controllers.job(name))[0], (0, []))

    def _counted(self, name: str) -> list[str]:
        return self._gate(name)[1]

    def _refused(self, name: str) -> bool:
        """Whether the Job's sweep has failed (as many failed trials as its limit)."""
        limit, counted = self._gate(name)
        status = self.cluster.job_status
        return bool(counted) and sum(awaits.job_failed(status(n)) for n in counted) >= limit

    def held_back(self) -> set[str]:
        """The Jobs that will never be created: `pulumi up` has failed."""
        return set(self.waiting) if self.failed else set()


@contextlib.contextmanager
def _recorded(run: Run, cluster: LocalCluster) -> Iterator[Callable[[], None]]:
    """What keeps the run's record up to date as it goes (`Run.record`), and last when it
    ends, however it ends, while its cluster still holds its pods' files."""
    if run.record is None:
        yield lambda: None
        return
    recorder = Recorder(Path(run.record), cluster, run.namespace)
    try:
        yield recorder.update
    finally:
        cluster.flush()  # (the last lines of the pods that ended, in their logs before kept)
        recorder.update(final=True)
        cluster.on_stopped.append(recorder.last_lines)


@contextlib.contextmanager
def _served(run: Run, cluster: LocalCluster) -> Iterator[Callable[[list[Part]], None]]:
    """The cluster's read API, announced, while the run lasts (`Run.announced`; watched, a
    little longer: `LocalApi.linger`); what announces the experiments a growing run gets."""
    if run.api_socket is not None:  # (announced by the parent: `namespaced`)
        with LocalApi(cluster, run.namespace, run.api_socket) as api:
            yield unannounced
            api.linger()
    elif run.announced:
        with LocalApi(cluster, run.namespace) as api, announcing(run, api.url) as more:
            yield more
            api.linger()  # (still announced)
    else:
        yield unannounced


def unannounced(parts: list[Part]) -> None:
    """Experiments a run does not announce (its parent does, or nobody)."""


@contextlib.contextmanager
def announcing(run: Run, url: str) -> Iterator[Callable[[list[Part]], None]]:
    """The run's read API announced under each of its experiments' names, and what
    announces more (a growing run's), until the run ends."""
    with contextlib.ExitStack() as stack:

        def more(parts: list[Part]) -> None:
            for part in parts:
                stack.enter_context(announce(part.name, url, run.namespace, run.source))

        more(run.parts)
        yield more


@contextlib.contextmanager
def _terminated_as_exit() -> Iterator[None]:
    """SIGTERM (a `timeout`, a closed terminal) ends the run as Ctrl-C does: the cluster is
    left cleanly (its processes killed, its namespaces and mounts removed)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the cleanup is not interrupted again
        raise SystemExit(128 + signum)

    before = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)
