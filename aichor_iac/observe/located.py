"""Where this machine's `run --local` of an experiment or a sweep is read (issue 66): its run,
while one runs (the read API it announced), else the newest record of its runs
(`records.store`). One place for a sweep: every trial of it read from the same run."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..records import store
from ..records.model import Record
from . import kubeapi


@dataclass(frozen=True)
class Located:
    """A live run's read API (`url`, `namespace`), or a kept run (`folder`, `record`)."""

    url: str | None = None
    namespace: str | None = None
    folder: Path | None = None
    record: Record | None = None

    @property
    def where(self) -> str:
        """What tells two places apart (a run again is somewhere else)."""
        return self.url or f"record:{self.folder.name if self.folder else ''}"


def located(name: str, names: Sequence[str], path: str = "") -> Located | None:
    """Where the experiment or sweep `name` (its experiments or trials `names`; of the file
    at `path`) is read now: the run one of them announced (a run of it goes on), else the
    newest record of its runs, else None."""
    for each in names:
        try:
            url, namespace = kubeapi.local_url(each, path)
        except kubeapi.Unreachable:
            continue
        return Located(url=url, namespace=namespace)
    found = store.latest(name, path)
    return Located(folder=found[0], record=found[1]) if found else None
