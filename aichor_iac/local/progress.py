"""A local run's progress as a table: each Job's pods by state (`kubectl get jobs` with the
pods' phases), and each experiment's last progress report as a bar, below the pods' lines on
a terminal."""

from __future__ import annotations

from collections import Counter

from rich.console import Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table

from ..experiment.state import TrainerStatus
from ..observe.progress import summary
from .jobs import STATES, job_of

BAR_WIDTH = 30


def progress(
    states: dict[str, str], reports: dict[str, TrainerStatus] | None = None
) -> Table | Group:
    """The table for `states` (pod -> state), and a bar per experiment of `reports` (its
    last `trainerStatus`): its percentage, time left and metrics."""
    table = jobs_table(states)
    if not reports:
        return table
    bars = Table.grid(padding=(0, 1))
    for name, status in reports.items():
        done = status.get("progressPercentage")
        bar: RenderableType = (
            ProgressBar(total=100, completed=done, width=BAR_WIDTH) if done is not None else ""
        )
        bars.add_row(name, bar, summary(status))
    return Group(table, bars)


def jobs_table(states: dict[str, str]) -> Table:
    """Each Job's pods by state (`states`: pod -> state)."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("job", *STATES):
        table.add_column(column, justify="left" if column == "job" else "right")
    jobs: dict[str, Counter[str]] = {}
    for pod, state in states.items():
        jobs.setdefault(job_of(pod), Counter())[state] += 1
    for job, counts in jobs.items():
        table.add_row(job, *(str(counts[state]) if counts[state] else "·" for state in STATES))
    return table
