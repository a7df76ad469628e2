"""Progress reports as people read them: Kubeflow Trainer's `trainerStatus` (the latest report
of an experiment's receiver, `pods/receiver.py`) in a few words."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, TypedDict, cast

from ..experiment.state import TrainerStatus
from ..pods import receiver

INDEX = "batch.kubernetes.io/job-completion-index"
JOB_NAME = "batch.kubernetes.io/job-name"
STALE_SECONDS = 300  # a report older than this while pods run is marked stale
TAIL = 20  # the receiver's last lines read for its last report


def reported(line: str) -> TrainerStatus | None:
    """The `trainerStatus` of a receiver's output line, or None for any other line."""
    if not line.startswith(receiver.LINE):
        return None
    try:
        status = json.loads(line[len(receiver.LINE) :]).get("trainerStatus")
    except (ValueError, AttributeError):
        return None
    # (the receiver printed it once it had checked it: pods/receiver.parsed)
    return cast("TrainerStatus", status) if isinstance(status, dict) else None


def receiver_pod(pods: list[dict[str, Any]], entry_job: str, container: str) -> str | None:
    """The entry Job's first pod that carries the receiver (the newest, if it was replaced)."""
    found = [
        p
        for p in pods
        if (p["metadata"].get("labels") or {}).get(JOB_NAME) == entry_job
        and (p["metadata"].get("annotations") or {}).get(INDEX, "0") == "0"
        and any(c["name"] == container for c in (p.get("spec") or {}).get("initContainers", []))
    ]
    found.sort(key=lambda p: p["metadata"].get("creationTimestamp") or "")
    return found[-1]["metadata"]["name"] if found else None


class LastReport(TypedDict):
    trainerStatus: TrainerStatus
    receivedAt: str  # (the kubelet's time of the receiver's line)


def last_report(lines: list[tuple[str, str]]) -> LastReport | None:
    """The last report of a receiver's lines (each with the kubelet's time): its
    `trainerStatus` and when the receiver took it."""
    for when, text in reversed(lines):
        if (status := reported(text)) is not None:
            return {"trainerStatus": status, "receivedAt": when}
    return None


def seconds_since(when: str, now: datetime) -> int | None:
    """How long ago an RFC 3339 time was (the kubelet's nanoseconds cut to microseconds)."""
    try:
        head, _, fraction = when.rstrip("Z").partition(".")
        stamp = datetime.fromisoformat(f"{head}.{fraction[:6] or '0'}+00:00")
    except ValueError:
        return None
    return max(0, int((now - stamp).total_seconds()))


def summary(status: TrainerStatus) -> str:
    """`45% · 2m 0s left · loss 0.15 · accuracy 0.92` (what the report holds, in that order)."""
    words = []
    if (percent := status.get("progressPercentage")) is not None:
        words.append(f"{percent}%")
    if (left := status.get("estimatedRemainingSeconds")) is not None:
        words.append(f"{duration(left)} left")
    words += [f"{m['name']} {m['value']}" for m in status.get("metrics", [])]
    return " · ".join(words) or "reported"


def duration(seconds: int) -> str:
    hours, rest = divmod(int(seconds), 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {seconds}s" if minutes else f"{seconds}s"
