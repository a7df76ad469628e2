"""The command line as a process of its own: Python's cyclic collector kept out of the start-up.

A command's start-up (its imports, the models it builds, the file it reads and checks) makes
some 60,000 objects that live until the process ends. The collector scans them again and again
while they are made, and every one once more as the interpreter exits: 0.15 s of a 0.4 s
`validate` of a TrainJob, measured. So reading waits for no collection (`collector_paused`),
and the program freezes what is alive when the command is done (`ended`): the memory goes
back to the system with the process. Long commands (`run --local`, `status --watch`) collect
as usual once their start-up is over; a batch (`render`, `preview`) makes its objects with no
collection at all when the process ends with it (`batch`).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic collection inside (the collector as it was after): for a start-up's bursts of
    objects that all stay alive."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


# Whether the process ends with its command (`command` says so), and whether `batch` turned
# the collector off
_PROCESS: dict[str, bool] = {"ends": False, "paused": False}


def ends_with_command() -> None:
    _PROCESS["ends"] = True


def batch() -> None:
    """From here to the end of a process that ends with its command, no cyclic collection: a
    render's objects (the expansion's millions, most of them garbage in cycles once it is
    done) all live until it ends, when the memory goes back to the system; the collector's
    passes over them were a tenth of a 1,000-trial sweep's render (benchmarks/sweeps.py), for
    some 10% more peak memory. In a process that goes on (a test, a program calling `main`),
    nothing changes."""
    if _PROCESS["ends"] and gc.isenabled():
        gc.disable()
        _PROCESS["paused"] = True


def ended() -> None:
    """The process is about to end: what is alive is frozen, so that the interpreter's
    collections at exit do not scan it (the memory goes back to the system with the process),
    and the collector is as it was before `batch`. Never in a process that goes on: what it
    frees later in cycles would stay."""
    gc.freeze()
    if _PROCESS["paused"]:
        gc.enable()
