"""A stack's runs read back from its store (`aichor:history`; issue 67, docs/stores.md): what
each pod's keeper wrote there (`pods/keeper.py`: a pod's `pod.json`, its log and its progress
reports) made into records of this machine's store, a folder per run (`records.store`), so
that `history` shows them and prints their logs as it does a local run's, after the cluster,
its pods and the stack are gone.

A run is the pods of an experiment (a sweep's: of its trials) that overlapped in time: a run
again starts after the last one's pods have all ended. An experiment's state is its entry
pod's: its main container's last exit (0: Succeeded), none while it runs. A bucket is read with
boto3, a container with azure-storage-blob (the `stores` extra), a folder as files.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
import urllib.parse
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from ..experiment.state import State
from ..experiment.trial import Objective
from ..problems import ManifestError, Problem
from ..records import store
from ..records.model import ExperimentRun, PodRun, Point, Record, add_point, took
from ..settings import Settings
from ..sweeps import results

GCS_ENDPOINT = "https://storage.googleapis.com"
INSTANCE, JOB_NAME = "app.kubernetes.io/instance", "batch.kubernetes.io/job-name"
COMPONENT = "app.kubernetes.io/component"


class Source(Protocol):
    def keys(self, under: str) -> list[str]: ...
    def get(self, key: str) -> bytes: ...


class Folder:
    """A store that is a folder (the volume the pods mount, seen from here)."""

    def __init__(self, root: str) -> None:
        self.root = Path(root)

    def keys(self, under: str) -> list[str]:
        top = self.root / under
        return sorted(str(p.relative_to(self.root)) for p in top.rglob("*") if p.is_file())

    def get(self, key: str) -> bytes:
        return (self.root / key).read_bytes()


class Bucket:
    """An S3-compatible bucket, read with boto3 (credentials as the AWS SDKs find them)."""

    def __init__(self, bucket: str, prefix: str, endpoint: str | None, region: str | None):
        try:
            import boto3
        except ImportError:
            why = "reading a bucket needs boto3: pip install 'aichor-iac[stores]'"
            raise ManifestError("aichor-iac history", [Problem("aichor:history", why)]) from None
        self.client = boto3.client("s3", endpoint_url=endpoint, region_name=region)
        self.bucket, self.prefix = bucket, prefix.strip("/")

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def keys(self, under: str) -> list[str]:
        found, pages = [], self.client.get_paginator("list_objects_v2")
        for page in pages.paginate(Bucket=self.bucket, Prefix=self._key(under)):
            found += [o["Key"] for o in page.get("Contents", [])]
        cut = len(self.prefix) + 1 if self.prefix else 0
        return sorted(k[cut:] for k in found)

    def get(self, key: str) -> bytes:
        return self.client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"].read()


class Blobs:
    """An Azure Blob Storage container, read with azure-storage-blob (the account and its key
    as the Azure CLI finds them: AZURE_STORAGE_ACCOUNT, AZURE_STORAGE_KEY)."""

    def __init__(self, container: str, prefix: str, endpoint: str | None) -> None:
        try:
            from azure.storage.blob import ContainerClient
        except ImportError:
            why = "reading a container needs azure-storage-blob: pip install 'aichor-iac[stores]'"
            raise ManifestError("aichor-iac history", [Problem("aichor:history", why)]) from None
        account = os.environ.get("AZURE_STORAGE_ACCOUNT", "")
        url = endpoint or f"https://{account}.blob.core.windows.net"
        key = {"account_name": account, "account_key": os.environ.get("AZURE_STORAGE_KEY", "")}
        self.client = ContainerClient(url, container, credential=key)
        self.prefix = prefix.strip("/")

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def keys(self, under: str) -> list[str]:
        cut = len(self.prefix) + 1 if self.prefix else 0
        found = self.client.list_blob_names(name_starts_with=self._key(under))
        return sorted(name[cut:] for name in found)

    def get(self, key: str) -> bytes:
        return self.client.download_blob(self._key(key)).readall()


def source(settings: Settings) -> Source:
    """The store `aichor:history` names, as this machine reads it."""
    url = settings.history or ""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "az":
        return Blobs(parts.netloc, parts.path, settings.history_endpoint)
    if parts.scheme in ("s3", "gs"):
        endpoint = settings.history_endpoint or os.environ.get("AWS_ENDPOINT_URL")
        if parts.scheme == "gs":
            endpoint = settings.history_endpoint or GCS_ENDPOINT
        return Bucket(parts.netloc, parts.path, endpoint, settings.history_region)
    return Folder(url.removeprefix("file://"))


@dataclasses.dataclass
class Part:
    """One pod's part of the record: its `pod.json`, and the keys of its log and reports."""

    about: dict[str, Any]
    logs: list[str] = dataclasses.field(default_factory=list)
    reports: list[str] = dataclasses.field(default_factory=list)

    @property
    def group(self) -> str:
        """What its run is named for: its sweep, or its experiment."""
        return (self.about.get("trial") or {}).get("sweep") or self.about["experiment"]


def parts(where: Source, namespace: str) -> list[Part]:
    """Every pod's part kept for the namespace, the first started first."""
    found: dict[str, Part] = {}
    for key in where.keys(f"{namespace}/"):
        place, _, rest = key.rpartition("/pods/")
        pod, _, file = rest.partition("/")
        part = found.setdefault(f"{place}/pods/{pod}", Part({}))
        if file == "pod.json":
            part.about = json.loads(where.get(key))
        elif file.startswith("log/"):
            part.logs.append(key)
        elif file.startswith("reports/"):
            part.reports.append(key)
    kept = [p for p in found.values() if p.about.get("schema") == 1]
    return sorted(kept, key=lambda p: (p.about["started"], p.about["pod"]))


def runs(kept: Iterable[Part]) -> list[list[Part]]:
    """The parts by run, of one sweep or experiment. A pod made again by its Job (its Job's
    uid, the `key`, is the run's) is of the same run; a sweep's run again starts at a trial
    it has (a sweep that resumes goes on with new ones); an experiment's, once every pod of
    the last one has ended."""
    by_group: dict[str, list[list[Part]]] = {}
    for part in kept:
        found = by_group.setdefault(part.group, [])
        if not found or not _of(found[-1], part):
            found.append([])
        found[-1].append(part)
    return [run for each in by_group.values() for run in each]


def _of(run: list[Part], part: Part) -> bool:
    """Whether `part` belongs to `run` (its parts so far)."""
    if part.about.get("key") and part.about["key"] in {p.about.get("key") for p in run}:
        return True
    if part.about.get("trial") is not None:
        index = part.about["trial"]["index"]
        return index not in {p.about["trial"]["index"] for p in run}
    ends = [p.about.get("ended") for p in run]
    return not all(ends) or part.about["started"] <= max(e for e in ends if e)


def experiment_run(
    parts_of: list[Part], lines: Mapping[str, list[str]], reports: list
) -> ExperimentRun:
    """An experiment's run from its pods' parts (`lines`: each pod's; `reports`: its entry
    pod's progress reports)."""
    about = [p.about for p in parts_of]
    entry = next((a for a in about if a.get("entry")), about[0])
    state, reason = _state(entry)
    objective = _objective(entry)
    metrics = _series(reports, lines.get(entry["pod"], []), objective)
    value = None
    if objective is not None:
        status = (reports[-1] if reports else {}).get("trainerStatus")
        value = results.trial_metrics(objective, lines.get(entry["pod"], []), status)[
            objective.metric
        ]
    ended = [a["ended"] for a in about if a.get("ended")]
    return ExperimentRun(
        name=entry["experiment"],
        framework=entry.get("framework", ""),
        state=state,
        reason=reason,
        created=min(a["started"] for a in about),
        ended=max(ended) if state.ended and ended else None,
        images=tuple(sorted({a["image"] for a in about if a.get("image")})),
        parameters=dict((entry.get("trial") or {}).get("parameters") or {}),
        objective=value,
        metrics=metrics,
        pods=tuple(_pod(a) for a in about),
    )


def _state(about: dict[str, Any]) -> tuple[State, str | None]:
    exits = about.get("exits") or []
    if exits:
        code = exits[-1]
        return (State.SUCCEEDED, None) if code == 0 else (State.FAILED, f"exit code {code}")
    if about.get("ended"):
        return State.INTERRUPTED, "its pod ended before its command did"
    return State.RUNNING, None


def _pod(about: dict[str, Any]) -> PodRun:
    exits = about.get("exits") or []
    code = exits[-1] if exits else None
    phase = "Running" if code is None else ("Succeeded" if code == 0 else "Failed")
    return PodRun(
        name=about["pod"],
        job=about.get("job", ""),
        phase=phase,
        exit_code=code,
        reason=None if code is None else ("Completed" if code == 0 else "Error"),
        restarts=max(0, len(exits) - 1),
        seconds=took(about["started"], about.get("ended")),
    )


def _objective(about: dict[str, Any]) -> Objective | None:
    given = about.get("objective")
    if not given:
        return None
    fields: dict[str, Any] = {
        k: tuple(tuple(v) if isinstance(v, list) else v for v in value)
        if isinstance(value, list)
        else value
        for k, value in given.items()
    }
    return Objective(**fields)


def _series(
    reports: list[dict[str, Any]], lines: list[str], objective: Objective | None
) -> dict[str, tuple[Point, ...]]:
    """Each metric by step: each report's, then a trial's printed objective metrics that no
    report gave (as `observe.recorded.series` reads a local run's)."""
    found: dict[str, list[Point]] = {}
    for report in reports:
        status = report.get("trainerStatus") or {}
        for metric in status.get("metrics") or []:
            add_point(found, metric.get("name"), status.get("lastUpdatedTime"), metric.get("value"))
    if objective is not None:
        printed: dict[str, list[Point]] = {}
        for name, values in results.metrics(lines, objective).items():
            for number in values:
                add_point(printed, name, None, number)
        found |= {name: points for name, points in printed.items() if name not in found}
    return {name: tuple(points) for name, points in sorted(found.items())}


# A run's pods' contents, read from the store once: pod -> (its main container's lines, its
# progress reports: each the JSON text its receiver took)
Contents = dict[str, tuple[list[str], list[str]]]


def contents(run: list[Part], read: Source) -> Contents:
    """What each pod of the run printed, and the progress reports it took."""
    found = {}
    for part in run:
        reports = b"".join(read.get(k) for k in part.reports).decode(errors="replace")
        found[part.about["pod"]] = (_lines(read, part), reports.splitlines())
    return found


def logs_of(run: list[Part], said: Contents) -> dict[tuple[str, str], list[str]]:
    """Each container's lines as the read API gives them, by (pod, container): each pod's main
    container's, and the progress receiver's of a pod that took reports (each printed as the
    receiver prints it)."""
    from ..k8s.progress import CONTAINER
    from ..pods.receiver import LINE

    logs = {}
    for part in run:
        pod = part.about["pod"]
        lines, reports = said[pod]
        logs[pod, part.about.get("container", "")] = lines
        if reports:
            logs[pod, CONTAINER] = [LINE + text for text in reports if text]
    return logs


def record_of(run: list[Part], said: Contents, file: str, stack: str) -> Record:
    """A run's record, of its pods' contents (`said`)."""
    lines = {pod: printed for pod, (printed, _) in said.items()}
    by_experiment: dict[str, list[Part]] = {}
    for part in run:
        by_experiment.setdefault(part.about["experiment"], []).append(part)
    made = []
    for mine in sorted(by_experiment.values(), key=_index):
        entry = next((p for p in mine if p.about.get("entry")), mine[0])
        reports = [json.loads(t) for t in said[entry.about["pod"]][1] if t]
        made.append(experiment_run(mine, lines, reports))
    first = run[0].about
    ids = hashlib.sha256(" ".join(sorted(p.about["id"] for p in run)).encode()).hexdigest()
    header: dict[str, Any] = {
        "name": run[0].group,
        "started": min(r.created or "" for r in made),
        "file": file,
        "path": str(Path(file).resolve()) if file else "",
        "digest": _digest(file),
        "stack": first.get("stack") or stack,  # (the pods': the one they were made in)
        "namespace": first["namespace"],
    }
    stamp = header["started"].replace("-", "").replace(":", "")
    header["id"] = f"{stamp}-{header['name'][:40]}-{ids[:6]}"
    if first.get("trial") is None:
        (one,) = made
        return Record(**header, kind="experiment", state=one.state, ended=one.ended, experiment=one)
    return _sweep(header, made, _objective(first))


def _sweep(
    header: dict[str, Any], trials: list[ExperimentRun], objective: Objective | None
) -> Record:
    """A sweep's record: its trials by index, the best of those that succeeded."""
    states = {t.state for t in trials}
    state = State.RUNNING
    if all(s.ended for s in states):
        state = State.SUCCEEDED if State.SUCCEEDED in states else State.FAILED
    done = [t for t in trials if t.state == State.SUCCEEDED and t.objective is not None]
    best = None
    if objective is not None and done:
        pick = min if objective.direction == "minimize" else max
        best = pick(done, key=lambda t: t.objective or 0.0).name  # (done: each has one)
    ended = [t.ended for t in trials if t.ended]
    return Record(
        **header,
        kind="sweep",
        state=state,
        ended=max(ended) if state.ended and ended else None,
        trials=tuple(trials),
        objective=objective.metric if objective else None,
        direction=objective.direction if objective else None,
        best=best,
    )


def _index(parts_of: list[Part]) -> int:
    """A trial's place in its sweep (as its table orders them)."""
    return (parts_of[0].about.get("trial") or {}).get("index", 0)


def _digest(file: str) -> str:
    try:
        return hashlib.sha256(Path(file).read_bytes()).hexdigest() if file else ""
    except OSError:
        return ""


def _lines(read: Source, part: Part) -> list[str]:
    text = b"".join(read.get(k) for k in sorted(part.logs))
    return text.decode(errors="replace").splitlines()


def read_parts(settings: Settings, reader: str) -> tuple[Source, list[Part]]:
    """The stack's store and every pod's part kept there for its namespace; a ManifestError
    at aichor:history (said by `reader`) if it cannot be read."""
    try:
        read = source(settings)
        return read, parts(read, settings.namespace)
    except ManifestError:
        raise
    except Exception as error:  # (boto3's, the folder's: said at the setting)
        why = f"{settings.history} could not be read: {error}"
        raise ManifestError(reader, [Problem("aichor:history", why)]) from None


def fetch(settings: Settings, file: str = "", stack: str = "") -> list[Path]:
    """The stack's runs in its store, kept in this machine's (a run's folder named for the
    run: read again, it is replaced, not doubled); their folders."""
    read, kept = read_parts(settings, "aichor-iac history")
    folders = []
    for run in runs(kept):
        said = contents(run, read)
        record = record_of(run, said, file, stack)
        folder = store.root() / record.id
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        for (pod, container), lines in logs_of(run, said).items():
            _keep_log(folder, pod, container, lines, record.started)
        store.write_cluster(folder, objects_of(run))
        store.write_records(folder, [record])
        folders.append(folder)
    return folders


def _keep_log(folder: Path, pod: str, container: str, lines: list[str], when: str) -> None:
    """A pod's lines as a local run keeps them, each after a time (the run's start: the
    keeper sends no time per line)."""
    with tempfile.NamedTemporaryFile("w", delete=False) as file:
        file.writelines(f"{when} {line}\n" for line in lines)
    try:
        store.write_log(folder, pod, container, Path(file.name))
    finally:
        os.unlink(file.name)


def objects_of(run: list[Part]) -> dict[str, list[dict[str, Any]]]:
    """The run's Jobs and pods as the read API would give them once they ended (what
    `status`, `logs` and `events` read a kept run by): a pod made again by its Job is one
    pod, its exits its restarts; a Job is Complete when its pods' last exits are 0, Failed
    when one is not, running while one runs."""
    pods: dict[str, dict[str, Any]] = {}
    exits: dict[str, list[int]] = {}
    reporting = {p.about["pod"] for p in run if p.reports}  # (its receiver took reports)
    for part in run:  # (the first started first: a pod made again replaces it)
        about = part.about
        exits.setdefault(about["pod"], []).extend(about.get("exits") or [])
        pods[about["pod"]] = _pod_object(about, exits[about["pod"]], about["pod"] in reporting)
    jobs: dict[str, dict[str, Any]] = {}
    for part in run:
        about = part.about
        job = jobs.setdefault(about.get("job", ""), _job_object(about))
        phase = pods[about["pod"]]["status"]["phase"]
        key = {"Succeeded": "succeeded", "Failed": "failed"}.get(phase, "active")
        job["status"][key] = job["status"].get(key, 0) + 1
    for job in jobs.values():
        status = job["status"]
        if not status.get("active"):
            kind, reason = (
                ("Failed", "BackoffLimitExceeded")
                if status.get("failed")
                else ("Complete", "CompletionsReached")
            )  # (as the Job controller says)
            status["conditions"] = [{"type": kind, "status": "True", "reason": reason}]
    return {"jobs": list(jobs.values()), "pods": list(pods.values()), "events": []}


def _job_object(about: dict[str, Any]) -> dict[str, Any]:
    labels = {INSTANCE: about["experiment"], COMPONENT: about.get("role", "")}
    return {
        "metadata": {"name": about.get("job", ""), "labels": labels},
        "status": {"startTime": about["started"]},
    }


def _pod_object(about: dict[str, Any], exits: list[int], reports: bool) -> dict[str, Any]:
    """A pod as the read API gives one: its main container's state from its last exit."""
    labels = {INSTANCE: about["experiment"], JOB_NAME: about.get("job", "")}
    labels[COMPONENT] = about.get("role", "")
    code = exits[-1] if exits else None
    if code is None:
        phase, state = (
            ("Failed", {"terminated": {"reason": "Unknown"}})
            if about.get("ended")
            else ("Running", {"running": {"startedAt": about["started"]}})
        )
    else:
        phase = "Succeeded" if code == 0 else "Failed"
        reason = "Completed" if code == 0 else "Error"
        ended = about.get("ended") or about.get("updated")
        times = {"startedAt": about["started"], "finishedAt": ended}
        state = {"terminated": {"exitCode": code, "reason": reason, **times}}
    container = {
        "name": about.get("container", ""),
        "restartCount": max(0, len(exits) - 1),
        "state": state,
    }
    spec: dict[str, Any] = {"containers": [{"name": about.get("container", "")}]}
    if reports:  # (its receiver's lines: the reports it took)
        from ..k8s.progress import CONTAINER

        spec["initContainers"] = [{"name": CONTAINER, "restartPolicy": "Always"}]
    return {
        "metadata": {
            "name": about["pod"],
            "labels": labels,
            "creationTimestamp": about["started"],
        },
        "spec": spec,
        "status": {"phase": phase, "startTime": about["started"], "containerStatuses": [container]},
    }
