"""Progress reports as people read them: Kubeflow Trainer's `trainerStatus` (the latest report
of an experiment's receiver, `k8s/receiver.py`) in a few words."""

from __future__ import annotations

import json
from typing import Any

from ..k8s import receiver


def reported(line: str) -> dict[str, Any] | None:
    """The `trainerStatus` of a receiver's output line, or None for any other line."""
    if not line.startswith(receiver.LINE):
        return None
    try:
        status = json.loads(line[len(receiver.LINE) :]).get("trainerStatus")
    except (ValueError, AttributeError):
        return None
    return status if isinstance(status, dict) else None


def summary(status: dict[str, Any]) -> str:
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
