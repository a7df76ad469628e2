"""The rules a Job's pods follow on a cluster before and after they run, as bookkeeping (no
process here): the Job controller (pod `<job>-<index>`, `parallelism` at a time, Complete or
Failed), a gang scheduler (a pod of a PodGroup is scheduled once `minMember` pods of the
group exist: coscheduling counts pods that have not ended, Volcano succeeded ones too), and
Kueue's admission (a Job with a queue-name label waits until its pods at once fit the quota).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from enum import Enum
from typing import Any

from . import containers

KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"


class PodState(str, Enum):
    """A Job pod's states: pending → init → running → succeeded | failed (their text: the
    local run's progress table's columns)."""

    PENDING = "pending"
    INIT = "init"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value


STATES = tuple(PodState)
ENDED = (PodState.SUCCEEDED, PodState.FAILED)


def pod_name(workload: dict[str, Any], index: int) -> str:
    """A pod's name here, which is its host name too: the template's `hostname` where it
    gives one (a replica's Job of its own), else `<job>-<index>` (an Indexed Job's pod)."""
    hostname = workload["spec"]["template"]["spec"].get("hostname")
    return hostname or f"{workload['metadata']['name']}-{index}"


def indexed(job: dict[str, Any]) -> bool:
    """Whether the Job controller gives the Job's pods a completion index."""
    return job["spec"].get("completionMode") == "Indexed"


def job_of(pod: str) -> str:
    """The group a pod (`<experiment>-<role>-<index>`) belongs to: its Indexed Job, or the
    group whose replicas have a Job each."""
    return pod.rsplit("-", 1)[0]


def owner(job: dict[str, Any]) -> tuple[str, str]:
    """The experiment a Job belongs to and its group (role), from its labels."""
    labels = job["metadata"]["labels"]
    return labels["app.kubernetes.io/instance"], labels["app.kubernetes.io/component"]


def grace_of(job: dict[str, Any]) -> float:
    """How long a Job's pods have, once told TERM, to end (a trainer's checkpoint) before
    KILL: their terminationGracePeriodSeconds, the kubelet's 30 without one."""
    spec = job["spec"]["template"]["spec"]
    return spec.get("terminationGracePeriodSeconds", containers.GRACE_SECONDS)


def gang_of(job: dict[str, Any]) -> str | None:
    """The PodGroup a Job's pods belong to (coscheduling's label, Volcano's annotation)."""
    metadata = job["spec"]["template"]["metadata"]
    return (metadata.get("labels") or {}).get("scheduling.x-k8s.io/pod-group") or (
        metadata.get("annotations") or {}
    ).get("scheduling.k8s.io/group-name")


def condition(states: list[PodState], failed: bool) -> str | None:
    """The Job's finished condition (Complete, Failed) from its pods' states, if any."""
    if failed:
        return "Failed"
    if states.count(PodState.SUCCEEDED) == len(states):
        return "Complete"
    return None


def action(job: dict[str, Any], code: int, disrupted: bool) -> str:
    """What the Job controller does with a pod that failed with `code` (`disrupted`: it has the
    DisruptionTarget condition): the action of its pod failure policy's first matching rule
    (exit codes of the main container), else Count (towards backoffLimit)."""
    for rule in (job["spec"].get("podFailurePolicy") or {}).get("rules", []):
        conditions = {c["type"] for c in rule.get("onPodConditions", []) if c["status"] == "True"}
        if disrupted and "DisruptionTarget" in conditions:
            return rule["action"]
        codes = rule.get("onExitCodes")
        if codes and (code in codes["values"]) == (codes["operator"] == "In") and code:
            return rule["action"]
    return "Count"


class Kueue:
    """Kueue's admission: the Workloads admitted (Job name -> its pods at once) within the
    quota of pods (None: any); a finished Job frees its share (`Controllers.ended`)."""

    def __init__(self, quota: int | None, lock: threading.Lock) -> None:
        self.quota, self.lock = quota, lock
        self.admitted: dict[str, int] = {}

    def admit(self, job: dict[str, Any]) -> bool:
        """Whether Kueue has admitted the Job (or it is queued nowhere), admitting it if its
        Workload fits: it counts the Job's pods at once, min(parallelism, completions), as
        Kueue's `podsCount`."""
        name, spec = job["metadata"]["name"], job["spec"]
        if self.admitted_already(job):
            return True
        with self.lock:
            if name not in self.admitted:
                pods = min(spec["parallelism"], spec["completions"])
                used = sum(self.admitted.values())
                if self.quota is not None and used + pods > self.quota:
                    return False
                self.admitted[name] = pods
            return True

    def admitted_already(self, job: dict[str, Any]) -> bool:
        """Whether the Job is queued nowhere, or Kueue has admitted it already."""
        labels = job["metadata"].get("labels") or {}
        return KUEUE_QUEUE not in labels or job["metadata"]["name"] in self.admitted


class Controllers:
    """Where each Job pod stands (`state`: written here only, `move` and `ended`), and what
    the Job controller, the gang scheduler and Kueue let happen next. `lock` guards it: pods
    move from threads of their own."""

    def __init__(self, objects: list[dict[str, Any]], kueue_quota: int | None = None):
        self.lock = threading.Lock()
        self.jobs: list[dict[str, Any]] = []
        self.pods: list[tuple[dict[str, Any], int]] = []
        self.state: dict[str, PodState] = {}
        self.job_by_pod: dict[str, dict[str, Any]] = {}
        self.created: set[str] = set()  # Job pods the Job controller has made
        # The Job controller keeps at most `parallelism` pods of a Job running at once.
        self.slots: dict[str, threading.BoundedSemaphore] = {}
        # PodGroup name -> (minMember, whether succeeded pods count: Volcano's do)
        self.gangs: dict[str, tuple[int, bool]] = {}
        self.kueue = Kueue(kueue_quota, self.lock)
        # Each Job's failed pods its pod failure policy does not ignore (`.status.failed`, which
        # backoffLimit bounds), and the Jobs that have failed
        self.counted: dict[str, int] = {}
        self.failed: set[str] = set()
        self.reasons: dict[str, str] = {}  # a failed Job's reason, as its condition gives it
        self.add(objects)

    def add(self, objects: list[dict[str, Any]]) -> list[tuple[dict[str, Any], int]]:
        """The Jobs and PodGroups of `objects` known from now on (none created yet); their
        pods, (Job, index) each."""
        # Each Job as the API server keeps it once made: a uid of its own (its pods' keepers'
        # run key), on a copy (the objects given are the caller's, rendered)
        jobs = [
            {**o, "metadata": {**o["metadata"], "uid": str(uuid.uuid4())}}
            for o in objects
            if o["kind"] == "Job"
        ]
        pods = [(job, i) for job in jobs for i in range(job["spec"]["completions"])]
        with self.lock:
            self.jobs.extend(jobs)
            self.pods.extend(pods)
            self.state.update({pod_name(job, i): PodState.PENDING for job, i in pods})
            self.job_by_pod.update({pod_name(job, i): job for job, i in pods})
            for job in jobs:
                name = job["metadata"]["name"]
                self.slots[name] = threading.BoundedSemaphore(job["spec"]["parallelism"])
                self.counted[name] = 0
            for group in (o for o in objects if o["kind"] == "PodGroup"):
                members = int(group["spec"]["minMember"])
                self.gangs[group["metadata"]["name"]] = members, "volcano" in group["apiVersion"]
        return pods

    def job(self, name: str) -> dict[str, Any]:
        return next(j for j in self.jobs if j["metadata"]["name"] == name)

    def job_of_pod(self, pod: str) -> dict[str, Any]:
        return self.job_by_pod[pod]

    def pods_of(self, name: str) -> list[str]:
        job = self.job(name)
        return [pod_name(job, i) for i in range(job["spec"]["completions"])]

    def move(self, pod: str, state: PodState) -> None:
        """A pod's new state, as the kubelet reports it."""
        with self.lock:
            self.state[pod] = state

    def states(self, name: str) -> list[PodState]:
        job = self.job(name)
        return [self.state[pod_name(job, i)] for i in range(job["spec"]["completions"])]

    def status(self, name: str, ready: Callable[[str], bool]) -> dict[str, Any]:
        """The Job's `.status` as the Job controller writes it; `ready(pod)` from its probes."""
        job, states = self.job(name), self.states(name)
        status: dict[str, Any] = {
            "active": sum(s in (PodState.INIT, PodState.RUNNING) for s in states),
            "ready": sum(ready(pod_name(job, i)) for i in range(len(states))),
            "succeeded": states.count(PodState.SUCCEEDED),
            "failed": self.counted[name],
        }
        if ended := condition(states, name in self.failed):
            reason = self.reasons.get(name, "CompletionsReached" if ended == "Complete" else "")
            status["conditions"] = [{"type": ended, "status": "True", "reason": reason}]
        return {k: v for k, v in status.items() if v}  # the controller omits zero counts

    def condition(self, name: str) -> str | None:
        """The Job's finished condition (Complete, Failed), if any."""
        return condition(self.states(name), name in self.failed)

    def gang_holds(self, gang: str) -> bool:
        """Whether the gang scheduler schedules the gang's pods: `minMember` of them exist."""
        return self.gang_count(gang) >= self.gangs[gang][0]

    def gang_count(self, gang: str) -> int:
        """The gang's pods that count towards `minMember`: made by the Job controller and, as
        the coscheduling plugin sees them, not ended (kube-scheduler's pod informer leaves
        Succeeded and Failed pods out); Volcano counts succeeded ones too."""
        ended = (PodState.FAILED,) if self.gangs[gang][1] else ENDED
        with self.lock:
            members = [
                pod
                for job, i in self.pods
                if gang_of(job) == gang and (pod := pod_name(job, i)) in self.created
            ]
            return sum(self.state[pod] not in ended for pod in members)

    def why_pending(self, pod: str) -> str:
        """Why a pending pod is not running yet, as `kubectl describe` would put it."""
        job = self.job_of_pod(pod)
        if not self.kueue.admitted_already(job):
            return "its Job is suspended until Kueue admits it"
        if pod not in self.created:
            return f"not created: the Job runs {job['spec']['parallelism']} pods at a time"
        gang = gang_of(job)
        if gang and not self.gang_holds(gang):
            size = self.gangs[gang][0]
            return f"unschedulable: PodGroup {gang} has {self.gang_count(gang)} of {size} pods"
        return "scheduled"

    def fail(self, name: str, reason: str) -> None:
        """The Job fails (under `lock`) whatever its pods do: its deadline, say."""
        self.failed.add(name)
        self.reasons.setdefault(name, reason)

    def ended(self, pod: str, code: int, disrupted: bool = False, restarts: int = 0) -> bool:
        """A pod's end (under `lock`): its state, its Job's failure as its pod failure policy
        and backoffLimit say (`restarts`: its containers' restarts in place, which an
        `OnFailure` Job counts too), its Workload freed once the Job is done; whether the Job
        controller makes the pod again (a failure the Job survives, of a pod that is not
        restarted in place: `OnFailure` is the kubelet's, which this does not run)."""
        self.state[pod] = PodState.FAILED if code else PodState.SUCCEEDED
        job = self.job_of_pod(pod)
        name = job["metadata"]["name"]
        again = False
        if code:
            verdict = action(job, code, disrupted)
            self.counted[name] += verdict != "Ignore"
            in_place = job["spec"]["template"]["spec"].get("restartPolicy") == "OnFailure"
            retries = self.counted[name] + (restarts if in_place else 0)
            if verdict == "FailJob" or retries > job["spec"].get("backoffLimit", 6):
                self.failed.add(name)
                self.reasons.setdefault(
                    name, "PodFailurePolicy" if verdict == "FailJob" else "BackoffLimitExceeded"
                )
            again = name not in self.failed and not in_place
        if condition(self.states(name), name in self.failed):
            self.kueue.admitted.pop(name, None)  # (a finished Job frees its share)
        return again
