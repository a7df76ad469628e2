"""What the dashboard shows, read in the background: every experiment's state and every sweep's
trials (read as `status --watch` reads them, every 2 seconds), the logs a page follows, the
events and the objects a page asks for. Pages are served from the last read, so a page is as
fast with a slow cluster as with a quick one; a read that fails keeps its reason (the words
`status` says) for the page to show."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from ..observe.history import Source
from ..observe.recorded import series
from ..observe.status import Report, pod_rows
from ..problems import ManifestError
from ..records import store
from ..records.model import Record, Summary
from ..sweeps.results import SweepReport

INTERVAL = 2.0  # seconds between reads, as `status --watch`
RETRY = 0.5  # seconds before a read that failed is tried again (a local run not started yet)
FIRST_READ = 30.0  # seconds a page asked for before the first read waits for it, at most
KEPT_LINES = 5000  # a followed log's last lines, held for pages that open it later
IDLE = 120.0  # seconds after the last page asked for a log before its follower stops
EVENTS_FOR = 2.0  # seconds an experiment's events are served again before being read again

# The experiments as read last (None: not read yet) -> the sources, each one's report
# (`observe.status.report`) and each sweep's (`sweeps.results.report`); a ManifestError says why
# they cannot be read.
Read = Callable[
    [list[Source] | None], tuple[list[Source], dict[str, Report], dict[str, SweepReport]]
]


@dataclass(frozen=True)
class Snapshot:
    """One read of every experiment, or why it failed (then the last good read's rest)."""

    sources: tuple[Source, ...] = ()
    experiments: dict[str, Report] = field(default_factory=dict)  # name -> status report
    sweeps: dict[str, SweepReport] = field(default_factory=dict)  # name -> sweep report
    error: str | None = None  # why the last read failed, in status's words
    read_at: float = 0.0  # when (time.time()); 0: never

    def source(self, name: str) -> Source | None:
        return self._named.get(name)

    @cached_property
    def _named(self) -> dict[str, Source]:
        return {s.name: s for s in self.sources}

    @cached_property
    def judged(self) -> dict[str, str]:
        """Each trial's state as its sweep's table reads it (EarlyStopped among them)."""
        return {r["trial"]: r["state"] for f in self.sweeps.values() for r in f["trials"]}


class Follower:
    """A pod's log, followed in a thread while pages ask for it (IDLE seconds after the last
    ask, it stops; the next ask follows it again from its start): its last KEPT_LINES lines,
    each numbered from 1 so that a page asks only for the ones after those it has."""

    def __init__(self, reader: Any, pod: str) -> None:
        self.reader, self.pod = reader, pod
        self.lines: deque[tuple[int, str, str]] = deque(maxlen=KEPT_LINES)
        self.count, self.ended = 0, False
        self.error: str | None = None
        self.asked = time.monotonic()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._follow, daemon=True, name=f"log {pod}")
        self.thread.start()

    def after(self, seen: int) -> tuple[list[tuple[int, str, str]], bool, str | None]:
        """The lines after the `seen`-th, whether the log has ended, and why it cannot be
        read (while it cannot)."""
        with self.lock:
            self.asked = time.monotonic()
            return [line for line in self.lines if line[0] > seen], self.ended, self.error

    def _follow(self) -> None:
        """Follow until the container ends; on an error (a container not started yet), again
        2 seconds later, past the lines already taken (those of their time up to how many)."""
        last, taken = "", 0  # the last line's time, and how many lines of that time were taken
        while time.monotonic() - self.asked < IDLE:
            try:
                again = 0
                for when, text in self.reader.lines(self.pod, True):
                    if when < last or (when == last and again < taken):
                        again += when == last
                        continue
                    taken = taken + 1 if when == last else 1
                    last, again = when, taken
                    with self.lock:
                        self.count += 1
                        self.lines.append((self.count, when, text))
                        self.error = None
                    if time.monotonic() - self.asked > IDLE:  # (no page follows it now)
                        return
                with self.lock:
                    self.ended = True
                return
            except Exception as error:  # (the API's refusal: said on the page, tried again)
                with self.lock:
                    self.error = _said(error)
            time.sleep(INTERVAL)


class Watch:
    """The experiments, read again every INTERVAL seconds in a thread (`start`), with the
    followers of the logs pages ask for and each experiment's objects (`render`)."""

    def __init__(
        self,
        read: Read,
        render: Callable[[str], str] | None = None,
        kept: Callable[[], list[tuple[Path, Summary]]] | None = None,
    ) -> None:
        """`kept`: the kept runs of the file (`records.store`), newest first (a local run's)."""
        self._read, self._render, self._kept = read, render, kept
        self._snapshot, self._read_once = Snapshot(), threading.Event()
        self._followers: dict[tuple[str, str], Follower] = {}
        self._read_again: dict[tuple[str, str], tuple[float, Any]] = {}
        self._rendered: dict[str, str] = {}
        self._lock = threading.Lock()

    @property
    def snapshot(self) -> Snapshot:
        """The last read. Asked before the first read has ended (a page opened as the dashboard
        starts), it waits for that read: an experiment the file holds is never shown missing
        for not having been read yet."""
        self._read_once.wait(FIRST_READ)
        return self._snapshot

    @snapshot.setter
    def snapshot(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot
        self._read_once.set()

    def start(self) -> Watch:
        threading.Thread(target=self._loop, daemon=True, name="dashboard reads").start()
        return self

    def _loop(self) -> None:
        while True:
            failed = self.refresh().error is not None  # (a run --local a few seconds long
            time.sleep(RETRY if failed else INTERVAL)  # is found while it runs)

    def refresh(self) -> Snapshot:
        """Read every experiment again (the snapshot the pages show from now on)."""
        last = self._snapshot  # (not the property: this read is the one it waits for)
        try:
            sources, found, sweeps = self._read(list(last.sources) if last.read_at else None)
        except ManifestError as error:
            self.snapshot = Snapshot(last.sources, last.experiments, last.sweeps, str(error))
        except Exception as error:  # a bug of ours: its one line, never a traceback
            said = f"internal error: {type(error).__name__}: {error}"
            self.snapshot = Snapshot(last.sources, last.experiments, last.sweeps, said)
        else:
            self.snapshot = Snapshot(tuple(sources), found, sweeps, None, time.time())
        return self.snapshot

    def log(self, experiment: str, pod: str, seen: int) -> tuple[list[Any], bool, str | None, str]:
        """The lines of `pod` (of `experiment`) after the `seen`-th, followed from now on, and
        where they are read (`Source.where`: a page follows a run of it again from its start)."""
        snapshot = self.snapshot
        source = snapshot.source(experiment)
        if source is None or not _has_pod(snapshot, experiment, pod):
            return [], True, f"no pod {pod} in experiment {experiment}", ""
        with self._lock:
            follower = self._followers.get((experiment, pod))
            if (
                follower is None
                or follower.reader is not source.reader  # (read elsewhere now: a run again)
                or (not follower.thread.is_alive() and not follower.ended)
            ):
                follower = self._followers[experiment, pod] = Follower(source.reader, pod)
        return (*follower.after(seen), source.where)

    def events(self, experiment: str) -> list[dict[str, Any]] | str:
        """The experiment's events, oldest first, or why they cannot be read."""
        return self._again("events", experiment, lambda source: source.reader.events(), [])

    def metrics(self, experiment: str) -> dict[str, Any] | str:
        """Every metric of the experiment by step over its whole run (`observe.recorded`:
        its progress reports, and a trial's printed objective metrics), or why not."""

        def read(source: Source) -> dict[str, Any]:
            objective = source.trial.objective if source.trial else None
            found = series(source, objective).items()
            return {name: [[p.step, p.time, p.value] for p in points] for name, points in found}

        return self._again("metrics", experiment, read, {})

    def _again(self, kind: str, experiment: str, read: Callable[[Source], Any], none: Any) -> Any:
        """What `read` gives of the experiment's source, read at most every EVENTS_FOR
        seconds (pages ask every 2), or why it cannot be read."""
        source = self.snapshot.source(experiment)
        if source is None:
            return none
        read_at, found = self._read_again.get((kind, experiment), (0.0, none))
        if time.monotonic() - read_at > EVENTS_FOR:
            try:
                found = read(source)
            except Exception as error:
                found = _said(error)
            self._read_again[kind, experiment] = (time.monotonic(), found)
        return found

    def runs(self) -> list[Summary]:
        """The kept runs of the file, newest first (none of a cluster's)."""
        return [summary for _, summary in self._kept()] if self._kept else []

    def run(self, id: str) -> list[Record]:
        """The records of the file's kept run `id` (none for another file's)."""
        found = [folder for folder, s in (self._kept() if self._kept else []) if s.id == id]
        return store.read_records(found[0]) if found else []

    def render(self, experiment: str) -> str:
        """The experiment's objects as `aichor-iac render` prints them (made once, one at a
        time: Pulumi's engine runs in an event loop of this thread's own)."""
        with self._lock:
            if experiment not in self._rendered and self._render is not None:
                loop = asyncio.new_event_loop()
                asyncio.set_event_loop(loop)
                try:
                    self._rendered[experiment] = self._render(experiment)
                except ManifestError as error:
                    return str(error)
                finally:
                    asyncio.set_event_loop(None)
                    loop.close()
        return self._rendered.get(experiment, "")


def _has_pod(snapshot: Snapshot, experiment: str, pod: str) -> bool:
    return any(row["pod"] == pod for row in pod_rows(snapshot.experiments.get(experiment)))


def _said(error: Exception) -> str:
    """An API's refusal in a few words (the Status's message), else the error's."""
    status = getattr(error, "status", None)
    return getattr(status, "message", None) or f"{type(error).__name__}: {error}"
