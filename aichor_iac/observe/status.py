"""What `aichor-iac status` says of an experiment, from its Jobs and pods as the Kubernetes API
gives them: per Job its condition and counts; per pod its phase, restarts, the main container's
state with its reason (CrashLoopBackOff, ImagePullBackOff, OOMKilled, Error, Completed) and
exit code, why it is not scheduled (the scheduler's message, such as "Insufficient
nvidia.com/gpu"), the GPUs it holds and how long it has run; and the group restart's attempt.
Pure: Kubernetes JSON in, a report (JSON) and a table out.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import datetime
from typing import Any, TypedDict

from rich.table import Table
from rich.text import Text

from ..experiment.state import State, TrainerStatus, signal_name
from ..records.model import Failure
from .progress import STALE_SECONDS, LastReport, seconds_since, summary

GPU = re.compile(r"^(nvidia\.com|amd\.com)/")
JOB_NAME = "batch.kubernetes.io/job-name"
RESTART = re.compile(r"aichor: restart attempt (\d+)")


class PodRow(TypedDict):
    """One pod, as `pod_row` reads it."""

    pod: str
    phase: str
    ready: bool
    node: str | None
    restarts: int
    state: str | None  # waiting, running or terminated
    reason: str | None
    message: str | None
    exit_code: int | None
    gpus: int
    seconds: int | None


class GroupRow(TypedDict):
    """One Job: its last true condition, its counts and its pods."""

    job: str
    condition: str | None
    reason: str | None
    active: int
    ready: int
    succeeded: int
    failed: int
    pods: list[PodRow]


class Progress(TypedDict):
    receivedAt: str  # (the kubelet's time of the receiver's line)
    seconds: int | None
    stale: bool


class FirstFailure(TypedDict):
    """The main container's failure that came first (`first_failure`): its pod, exit code,
    the signal of a code past 128, when, and its last lines (its termination message: what
    it wrote there, else its log's tail, as `FallbackToLogsOnError` has the kubelet keep)."""

    pod: str
    exitCode: int
    signal: str | None
    finishedAt: str | None
    lines: list[str]
    others: int  # the pods that failed too, after it


class Report(TypedDict):
    """An experiment's state (`report`; `status --json` prints it)."""

    groups: list[GroupRow]
    created: str | None
    phases: dict[str, int]
    gpus: int
    restart_attempt: int | None
    failedFirst: FirstFailure | None
    trainerStatus: TrainerStatus | None
    progress: Progress | None


def restart_attempt(lines: list[str]) -> int | None:
    """The group restart's attempt, as the lead's last `restart attempt N` line says."""
    found = [int(m[1]) for line in lines if (m := RESTART.search(line))]
    return found[-1] if found else None


def report(
    jobs: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    now: datetime,
    attempt: int | None = None,
    reported: LastReport | None = None,
) -> Report:
    """The experiment's state: its groups (Jobs) with their pods, the pods by phase, the
    GPUs held, the restart attempt, and its last progress report (`trainerStatus`, in
    Kubeflow Trainer's shape; `progress`: how old it is, stale when over STALE_SECONDS while
    pods run)."""
    groups: list[GroupRow] = []
    for job in sorted(jobs, key=lambda j: j["metadata"]["name"]):
        name, status = job["metadata"]["name"], job.get("status") or {}
        mine = [p for p in pods if (p["metadata"].get("labels") or {}).get(JOB_NAME) == name]
        ended = [c for c in status.get("conditions") or [] if c.get("status") == "True"]
        groups.append(
            {
                "job": name,
                "condition": ended[-1]["type"] if ended else None,
                "reason": (ended[-1].get("reason") or None) if ended else None,
                "active": status.get("active", 0),
                "ready": status.get("ready", 0),
                "succeeded": status.get("succeeded", 0),
                "failed": status.get("failed", 0),
                "pods": [pod_row(p, now) for p in sorted(mine, key=_name)],
            }
        )
    rows = [row for group in groups for row in group["pods"]]
    phases = dict(sorted(Counter(row["phase"] for row in rows).items()))
    age = seconds_since(reported["receivedAt"], now) if reported else None
    running = any((p.get("status") or {}).get("phase") == "Running" for p in pods)
    created = [o["metadata"].get("creationTimestamp") for o in [*jobs, *pods]]
    return {
        "groups": groups,
        "created": min(filter(None, created), default=None),  # its first object's
        "phases": phases,
        "gpus": sum(row["gpus"] for row in rows if row["phase"] == "Running"),
        "restart_attempt": attempt,
        "failedFirst": first_failure(pods),
        "trainerStatus": reported["trainerStatus"] if reported else None,
        "progress": {
            "receivedAt": reported["receivedAt"],
            "seconds": age,
            "stale": running and (age or 0) > STALE_SECONDS,
        }
        if reported
        else None,
    }


def pod_rows(found: Report | None) -> list[PodRow]:
    """Every pod of the report (none without one), Job by Job."""
    return [row for group in found["groups"] for row in group["pods"]] if found else []


def state(found: Report, entry: str) -> State:
    """An experiment's state from its report (`report`): its entry Job's end, else Running
    once one of its pods has started, Pending while its objects exist, Waiting before they
    do (a sweep's trial not created yet)."""
    group = next((g for g in found["groups"] if g["job"] == entry), None)
    if group is not None and group["condition"] in ("Complete", "Failed"):
        return State.SUCCEEDED if group["condition"] == "Complete" else State.FAILED
    if set(found["phases"]) & {"Running", "Succeeded", "Failed"}:
        return State.RUNNING
    return State.PENDING if found["groups"] else State.WAITING


def _name(obj: dict[str, Any]) -> str:
    return obj["metadata"]["name"]


# The annotation that names a pod's main container (kubectl logs and exec read it)
DEFAULT_CONTAINER = "kubectl.kubernetes.io/default-container"


def main_status(pod: dict[str, Any]) -> dict[str, Any]:
    """The status of the pod's main container: the one its annotation names, else its first
    in the spec (the kubelet lists statuses by name: a log shipper's would come first)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    main = annotations.get(DEFAULT_CONTAINER) or containers[0].get("name")
    return next((c for c in statuses if main and c.get("name") == main), statuses[0])


def pod_row(pod: dict[str, Any], now: datetime) -> PodRow:
    """One pod: phase, restarts, its main container's state and why, exit code, GPUs, time."""
    status = pod.get("status") or {}
    container = main_status(pod)
    state = container.get("state") or {}
    kind = next(iter(state), None)
    detail = state.get(kind) or {}
    last = (container.get("lastState") or {}).get("terminated") or {}
    reason, message = detail.get("reason"), detail.get("message")
    scheduling = [c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"]
    if scheduling and scheduling[0].get("status") == "False":
        reason, message = scheduling[0].get("reason"), scheduling[0].get("message")
    begun = _time(detail.get("startedAt") or status.get("startTime"))
    end = _time(detail.get("finishedAt")) or now
    return {
        "pod": _name(pod),
        "phase": status.get("phase", "Unknown"),
        "ready": bool(container.get("ready")),
        "node": (pod.get("spec") or {}).get("nodeName"),
        "restarts": container.get("restartCount", 0),
        "state": kind,
        "reason": reason,
        "message": message,
        "exit_code": detail.get("exitCode", last.get("exitCode")),
        "gpus": sum(
            int(value)
            for c in (pod.get("spec") or {}).get("containers", [])
            for name, value in ((c.get("resources") or {}).get("limits") or {}).items()
            if GPU.match(name) and str(value).isdigit()
        ),
        "seconds": int((end - begun).total_seconds()) if begun else None,
    }


def first_failure(pods: list[dict[str, Any]]) -> FirstFailure | None:
    """The earliest failure of a pod's main container, now or before its last restart. The
    API stamps seconds: within one, a container a signal ended comes before one that exited
    by itself (the others' "Connection closed by peer" follows a peer killed), then by name."""
    found = []
    for pod in pods:
        container = main_status(pod)
        for held in (container.get("lastState"), container.get("state")):
            ended = (held or {}).get("terminated") or {}
            if code := ended.get("exitCode"):
                when = ended.get("finishedAt")
                order = (when is None, when or "", signal_name(code) is None, _name(pod))
                found.append((order, _name(pod), code, when, ended.get("message") or ""))
    if not found:
        return None
    _, first, code, when, message = min(found)
    return {
        "pod": first,
        "exitCode": code,
        "signal": signal_name(code),
        "finishedAt": when,
        "lines": message.rstrip("\n").splitlines(),
        "others": len({name for _, name, *_ in found} - {first}),
    }


def _time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def table(found: Report) -> Table:
    """The report as a terminal table: a line per Job, one per pod below it, and the
    reason's message (a waiting container's, a scheduler's, a termination message) under."""
    out = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("pod", "phase", "restarts", "state", "exit", "gpus", "time"):
        out.add_column(column, justify="left" if column in ("pod", "state") else "right")
    for group in found["groups"]:
        condition = group["condition"] or f"{group['active']} active"
        why = f" ({group['reason']})" if group["reason"] else ""
        out.add_row(Text(f"{group['job']}  {condition}{why}", style="bold"))
        for row in group["pods"]:
            state = " ".join(filter(None, (row["state"], row["reason"])))
            exit_code = "" if row["exit_code"] is None else str(row["exit_code"])
            spent = "" if row["seconds"] is None else _duration(row["seconds"])
            values = (row["phase"], str(row["restarts"]), state, exit_code, str(row["gpus"]))
            out.add_row(f"  {row['pod']}", *values, spent)
            if said := (row["message"] or "").strip().splitlines():
                out.add_row(Text(f"    {said[-1]}", style="dim"))  # (a log's tail: its last)
    if (failure := found["failedFirst"]) is not None:
        first = Failure.of(failure)
        out.add_row(Text(first.said(), style="bold"))
        for line in first.last():
            out.add_row(Text(f"    {line}", style="dim"))
    if (status := found.get("trainerStatus")) is not None:
        out.add_row(Text(f"progress  {_progress(status, found['progress'])}", style="bold"))
    attempt = found["restart_attempt"]
    phases = ", ".join(f"{n} {phase.lower()}" for phase, n in found["phases"].items())
    out.caption = f"{phases}; {found['gpus']} GPUs held" + (
        f"; restart attempt {attempt}" if attempt is not None else ""
    )
    return out


def _progress(status: TrainerStatus, progress: Progress | None) -> str:
    """`50% · 1m 0s left · loss 0.5 (12s ago)`, and `stale` past STALE_SECONDS."""
    seconds, stale = (progress["seconds"], progress["stale"]) if progress else (None, False)
    ago = f" ({_duration(seconds)} ago{', stale' if stale else ''})" if seconds is not None else ""
    return summary(status) + ago


def _duration(seconds: int) -> str:
    """As kubectl shows ages: 45s, 3m12s, 2h5m."""
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60}m"
