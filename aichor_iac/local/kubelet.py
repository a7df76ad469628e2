"""What the kubelet, the scheduler and the Job controller would report of a local run's pods,
for the read API (`api.py`): each pod's times, its main container's state (running, waiting
in CrashLoopBackOff, terminated with its exit code and termination message) and restarts, why
a pending pod is not scheduled, and the events, oldest first. And the kubelet's two behaviours
the API shows that the rest of the local cluster does not need: restarting a failed container
in place (`restartPolicy: OnFailure`, with its back-off) and leaving a pod unscheduled when the
node lacks an extended resource it asks for (`Capacity`).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

# The kubelet's back-off before restarting a failed container: 10 s, doubled each time, at
# most 5 minutes (kubelet's `MaxContainerBackOff`)
BACKOFF_SECONDS, MAX_BACKOFF_SECONDS = 10.0, 300.0


@dataclass
class PodRecord:
    """One pod as its status says. Times are `time.time()`."""

    created: float = field(default_factory=time.time)
    scheduled: float | None = None
    started: float | None = None  # the main container's current (or last) start
    finished: float | None = None
    exit_code: int | None = None
    message: str = ""  # the termination message
    restarts: int = 0
    waiting: tuple[str, str] | None = None  # (reason, message): CrashLoopBackOff
    last: tuple[int, str, float, float] | None = None  # the previous run: code, message, times
    unschedulable: str | None = None  # the scheduler's message while it cannot place the pod


@dataclass
class Event:
    """A Kubernetes event: what happened to an object, when."""

    kind: str  # of the object: Pod, Job
    name: str
    reason: str
    message: str
    warning: bool = False
    when: float = field(default_factory=time.time)


class Records:
    """Every pod's record and the events, guarded by one lock (pods live in threads)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pods: dict[str, PodRecord] = {}
        self.events: list[Event] = []

    def pod(self, name: str) -> PodRecord:
        with self.lock:
            return self.pods.setdefault(name, PodRecord())

    def restarts(self, pods: list[str]) -> int:
        """The pods' containers' restarts in place (what an OnFailure Job's backoffLimit
        counts, with its failed pods)."""
        return sum(self.pod(pod).restarts for pod in pods)

    def event(self, kind: str, name: str, reason: str, message: str, warning: bool = False) -> None:
        with self.lock:
            self.events.append(Event(kind, name, reason, message, warning))

    def created(self, job: str, pod: str) -> None:
        """The Job controller made the pod (again: a new record)."""
        with self.lock:
            self.pods[pod] = PodRecord()
        self.event("Job", job, "SuccessfulCreate", f"Created pod: {pod}")

    def unschedulable(self, pod: str, why: str) -> None:
        record = self.pod(pod)
        if record.unschedulable != why:
            record.unschedulable = why
            self.event("Pod", pod, "FailedScheduling", why, warning=True)

    def scheduled(self, namespace: str, pod: str) -> None:
        record = self.pod(pod)
        record.unschedulable, record.scheduled = None, time.time()
        self.event("Pod", pod, "Scheduled", f"Successfully assigned {namespace}/{pod} to local")

    def started(self, pod: str, container: str) -> None:
        record = self.pod(pod)
        record.started, record.waiting = time.time(), None
        self.event("Pod", pod, "Started", f"Started container {container}")

    def ended(self, pod: str, code: int, message: str) -> None:
        record = self.pod(pod)
        record.finished, record.exit_code, record.message = time.time(), code, message

    def backing_off(self, pod: str, container: str, delay: float) -> None:
        """The container failed and restarts in place after `delay` seconds."""
        record = self.pod(pod)
        assert record.started is not None and record.finished is not None
        record.last = (record.exit_code or 0, record.message, record.started, record.finished)
        record.restarts += 1
        why = f"back-off {delay:g}s restarting failed container={container} pod={pod}"
        record.waiting, record.exit_code = ("CrashLoopBackOff", why), None
        self.event("Pod", pod, "BackOff", f"Back-off restarting failed container {container}", True)

    def job_ended(self, job: str, condition: str, reason: str) -> None:
        if condition == "Complete":
            self.event("Job", job, "Completed", "Job completed")
        else:
            self.event("Job", job, reason, f"Job has failed: {reason}", warning=True)


class Capacity:
    """The node's allocatable extended resources (e.g. {"nvidia.com/gpu": 0}: a machine
    without GPUs); a pod whose containers ask for more than what is left stays pending, as
    the scheduler leaves it, with the scheduler's message. Resources not named are
    unlimited."""

    def __init__(self, allocatable: dict[str, int] | None = None) -> None:
        self.allocatable = allocatable or {}
        self.used: dict[str, dict[str, int]] = {}  # pod -> what it holds

    def fits(self, pod: str, spec: dict[str, Any]) -> str | None:
        """None once the pod is placed (what it asks is held), else why it cannot be."""
        asks = requests(spec)
        short = [
            name
            for name, total in self.allocatable.items()
            if asks.get(name, 0) + sum(u.get(name, 0) for u in self.used.values()) > total
        ]
        if short:
            return "0/1 nodes are available: " + ", ".join(f"1 Insufficient {r}" for r in short)
        self.used[pod] = asks
        return None

    def free(self, pod: str) -> None:
        self.used.pop(pod, None)


def requests(spec: dict[str, Any]) -> dict[str, int]:
    """The extended resources a pod spec's containers ask for (their limits, as for GPUs)."""
    asks: dict[str, int] = {}
    for container in spec.get("containers", []):
        for name, value in ((container.get("resources") or {}).get("limits") or {}).items():
            if "/" in name and str(value).isdigit():
                asks[name] = asks.get(name, 0) + int(value)
    return asks
