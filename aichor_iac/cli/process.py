"""The command line as a process of its own: Python's cyclic collector kept out of the start-up.

A command's start-up (its imports, the models it builds, the file it reads and checks) makes
some 60,000 objects that live until the process ends. The collector scans them again and again
while they are made, and every one once more as the interpreter exits: 0.15 s of a 0.4 s
`validate` of a TrainJob, measured. So reading waits for no collection (`collector_paused`),
and the program freezes what is alive when the command is done (`ended`): the memory goes
back to the system with the process. Long commands (`run --local`, `status --watch`) collect
as usual once their start-up is over.
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


def ended() -> None:
    """The process is about to end: what is alive is frozen, so that the interpreter's
    collections at exit do not scan it (the memory goes back to the system with the process).
    Never in a process that goes on: what it frees later in cycles would stay."""
    gc.freeze()
