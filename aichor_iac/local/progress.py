"""A local run's progress as a table: each Job's pods by state (`kubectl get jobs` with the
pods' phases), below the pods' lines on a terminal."""

from __future__ import annotations

from collections import Counter

from rich.table import Table

from .jobs import STATES, job_of


def progress(states: dict[str, str]) -> Table:
    """The table for `states` (pod -> state)."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("job", *STATES):
        table.add_column(column, justify="left" if column == "job" else "right")
    jobs: dict[str, Counter[str]] = {}
    for pod, state in states.items():
        jobs.setdefault(job_of(pod), Counter())[state] += 1
    for job, counts in jobs.items():
        table.add_row(job, *(str(counts[state]) if counts[state] else "·" for state in STATES))
    return table
