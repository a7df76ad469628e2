"""`run --local` keeps its run (issue 66): a folder of its own in the store (`records.store`),
which the local driver keeps up to date as the run goes (`local.recording`), and the run's
records, written as it starts and again as it ends, however it ends (Ctrl-C and SIGTERM: as
Interrupted), from what `status` reads of the kept objects (`observe.recorded`)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from ..experiment.trial import Ended
from ..local.api import stamp
from ..observe import recorded
from ..observe.history import Source
from ..records import store
from ..records.model import Record
from .inputs import Inputs

EVERY = 5.0  # seconds between two writes of the records while the run goes


def now() -> str:
    return stamp(time.time()) or ""


@dataclasses.dataclass
class Keeping:
    """A run being kept: its folder, what is known of it, and who failed first (each
    experiment's deciding pod, told once its outcome is)."""

    args: argparse.Namespace
    inputs: Inputs
    folder: Path
    run: recorded.Run

    def __post_init__(self) -> None:
        self.lock, self.stop = threading.Lock(), threading.Event()
        self.records: list[Record] = []  # (as last written)

    def write(self, ended: bool = False, interrupted: bool = False) -> None:
        """The run's records as its kept objects say now (and, `ended`, that it has); once
        it has ended, only as it ended."""
        from .observe import readers

        run = dataclasses.replace(
            self.run,
            ended=now() if ended else None,
            interrupted=interrupted,
            rendered=store.read_rendered(self.folder),
        )

        def load(ended_trials: Ended) -> list[Source]:
            return readers(self.args, ended_trials, self.folder, self.inputs)

        with self.lock:
            if ended or not self.stop.is_set():
                self.records = recorded.records(load, run)
                store.write_records(self.folder, self.records)

    def written(self) -> None:
        """The records written again every EVERY seconds, until `stop` is set."""
        while not self.stop.wait(EVERY):
            with contextlib.suppress(Exception):  # (a file being written: read next time)
                self.write()

    def decided(self, failed_first: dict[str, tuple[str, int]]) -> None:
        self.run = dataclasses.replace(self.run, failed_first=failed_first)


@contextlib.contextmanager
def kept(args: argparse.Namespace, inputs: Inputs) -> Iterator[Keeping]:
    """The run's keeping, while it runs: its records written first, and last as it ends (a
    run stopped by Ctrl-C or SIGTERM, as Interrupted)."""
    first = inputs.manifests[0]
    folder = store.new_folder(first.trial.sweep if first.trial else inputs.names[0])
    source = Path(inputs.path)
    digest = hashlib.sha256(source.read_bytes()).hexdigest() if source.is_file() else ""
    run = recorded.Run(
        id=folder.name,
        started=now(),
        file=inputs.path,
        path=inputs.absolute,
        digest=digest,
        stack=inputs.stack,
        namespace=inputs.settings.namespace,
    )
    keeping = Keeping(args, inputs, folder, run)
    keeping.write()
    threading.Thread(target=keeping.written, daemon=True).start()
    try:
        with _stopped(keeping):
            yield keeping
    except (KeyboardInterrupt, SystemExit):
        keeping.write(ended=True, interrupted=True)
        raise
    except Exception:
        if (folder / store.CLUSTER).exists():
            keeping.write(ended=True)
        else:  # (it could not start: nothing ran to keep)
            shutil.rmtree(folder, ignore_errors=True)
        raise
    keeping.write(ended=True)


@contextlib.contextmanager
def _stopped(keeping: Keeping) -> Iterator[None]:
    """The records' writes while the run goes, stopped as it ends."""
    try:
        yield
    finally:
        keeping.stop.set()
