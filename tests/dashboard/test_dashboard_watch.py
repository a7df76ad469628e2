"""What the dashboard reads in the background (aichor_iac/dashboard/watch.py) and the rows it
shows (views.py): a log followed again after a break takes no line twice; a read that fails
keeps the last one and says why; each experiment's state as a person reads it."""

from __future__ import annotations

import pytest
from waiting import until

from aichor_iac.dashboard import views, watch
from aichor_iac.observe.history import Source
from aichor_iac.problems import ManifestError, Problem

T1, T2 = "2026-11-29T10:00:01Z", "2026-11-29T10:00:02Z"
LINES = [(T1, "a"), (T1, "b"), (T2, "c"), (T2, "d"), (T2, "e")]


class Breaking:
    """A pod's log whose first follows break after 1, then 3 lines (the API hung up)."""

    def __init__(self) -> None:
        self.follows = 0

    def lines(self, pod: str, follow: bool = False):
        self.follows += 1
        for number, line in enumerate(LINES):
            if self.follows < 3 and number == 2 * self.follows - 1:
                raise ConnectionError("the API hung up")
            yield line


def test_a_log_followed_again_takes_no_line_twice(monkeypatch):
    monkeypatch.setattr(watch, "INTERVAL", 0.01)
    follower = watch.Follower(Breaking(), "p")
    lines, _, error = until(lambda: (f := follower.after(0))[1] and f)
    assert [text for _, _, text in lines] == ["a", "b", "c", "d", "e"] and error is None
    assert [n for n, _, _ in follower.after(3)[0]] == [4, 5]


def source(name: str) -> Source:
    return Source(name, None, None, "e-worker", None, "pytorch")


def report(*phases: str, condition: str | None = None) -> dict:
    pods = [{"pod": f"p{i}", "phase": p, "ready": p == "Running"} for i, p in enumerate(phases)]
    groups = [{"job": "e-worker", "condition": condition, "pods": pods}] if phases else []
    counted = {p: phases.count(p) for p in set(phases)}
    return {"groups": groups, "phases": counted, "gpus": 0}


def test_a_failed_read_keeps_the_last_and_says_why():
    answers = iter(
        [
            ([source("e")], {"e": report("Running")}, {}),
            ManifestError("aichor-iac dashboard", [Problem("", "cannot reach the cluster (x)")]),
            ValueError("a bug"),
        ]
    )

    def read(sources):
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    seen = watch.Watch(read)
    assert seen.refresh().error is None
    failed = seen.refresh()
    assert failed.error == "aichor-iac dashboard: cannot reach the cluster (x)"
    assert failed.experiments == {"e": report("Running")}
    assert seen.refresh().error == "internal error: ValueError: a bug"


@pytest.mark.parametrize(
    ("found", "expected"),
    [
        (report(), "Waiting"),
        (report("Pending"), "Pending"),
        (report("Running", "Pending"), "Running"),
        (report("Succeeded", condition="Complete"), "Succeeded"),
        (report("Failed", condition="Failed"), "Failed"),
    ],
)
def test_an_experiment_s_state(found, expected):
    snapshot = watch.Snapshot((source("e"),), {"e": found})
    assert views.shown_state(snapshot, "e") == expected
