"""A cluster for the dashboard's tests (tests/fake_kube.py answering in the API's JSON): the Jobs
`render` makes of a file, a pod each (index 0 of each Job), their logs and events, with hostile
strings wherever a manifest, a pod or a log can put one. `finish` changes its state, as a
cluster's does while a page is open."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import yaml
from fake_kube import Cluster, kubeconfig

from aichor_iac import render

NAMESPACE = "default"
# What an attacker would put in a log line, an event, a metric's name or a parameter's value
HOSTILE = (
    "<script>window.pwned = 'script'</script>",
    "<img src=x onerror=\"window.pwned = 'img'\">",
    '"><svg onload=alert(1)>',
    "{{ 7 * 7 }} </pre></td></tr></table><a href=javascript:alert(1)>click</a>",
)
STARTED = "2026-11-29T10:00:00Z"
KILLED = "\n".join(("step 14", *HOSTILE, "step 15"))  # the last lines of a container killed
COMPLETE = [{"type": "Complete", "status": "True", "reason": "CompletionsReached"}]


def sweep_file(folder: Path) -> Path:
    """A Katib sweep of 3 trials whose categorical parameter's choices are hostile strings."""
    container = {
        "name": "trial",
        "image": "python:3.11-slim",
        "command": ["python", "-c", "print('loss=0.5')", "${trialParameters.choice}"],
    }
    sweep = {
        "apiVersion": "kubeflow.org/v1beta1",
        "kind": "Experiment",
        "metadata": {"name": "hostile"},
        "spec": {
            "objective": {"type": "minimize", "objectiveMetricName": "loss"},
            "algorithm": {"algorithmName": "grid"},
            "parallelTrialCount": 3,
            "maxTrialCount": 3,
            "parameters": [
                {
                    "name": "choice",
                    "parameterType": "categorical",
                    "feasibleSpace": {"list": list(HOSTILE[:3])},
                }
            ],
            "trialTemplate": {
                "primaryContainerName": "trial",
                "trialParameters": [{"name": "choice", "reference": "choice"}],
                "trialSpec": {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "spec": {
                        "template": {"spec": {"restartPolicy": "Never", "containers": [container]}}
                    },
                },
            },
        },
    }
    path = folder / "hostile.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return path


def pod_of(job: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    """The Job's first pod, as the API gives it back."""
    name = job["metadata"]["name"]
    template = job["spec"]["template"]
    labels = {**template["metadata"]["labels"], "batch.kubernetes.io/job-name": name}
    metadata = {
        "name": f"{name}-0-x7k2p",
        "namespace": NAMESPACE,
        "labels": labels,
        "annotations": {"batch.kubernetes.io/job-completion-index": "0"},
        "creationTimestamp": STARTED,
    }
    spec = {**template["spec"], "nodeName": "gpu-node-1"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def container_status(container: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    ready = "running" in state
    found = {"name": container["name"], "ready": ready, "restartCount": 0, "state": state}
    return {**found, "image": container["image"], "imageID": ""}


def running(container: dict[str, Any]) -> dict[str, Any]:
    found = container_status(container, {"running": {"startedAt": STARTED}})
    return {"phase": "Running", "startTime": STARTED, "containerStatuses": [found]}


def restarted(container: dict[str, Any]) -> dict[str, Any]:
    """Running again after its container was killed (a lost node's SIGKILL), its log's tail
    (the termination message FallbackToLogsOnError keeps) hostile."""
    status = running(container)
    killed = {"exitCode": 137, "reason": "Error", "finishedAt": STARTED, "message": KILLED}
    status["containerStatuses"][0].update(restartCount=1, lastState={"terminated": killed})
    return status


def unschedulable() -> dict[str, Any]:
    """A pod the scheduler cannot place, its message hostile."""
    condition = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": f"0/4 nodes are available: {HOSTILE[1]}",
    }
    return {"phase": "Pending", "conditions": [condition]}


def event(number: int, obj: dict[str, Any], reason: str, message: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"e{number}", "namespace": NAMESPACE},
        "involvedObject": {"kind": obj["kind"], "name": obj["metadata"]["name"]},
        "reason": reason,
        "message": message,
        "type": "Warning" if reason == "FailedScheduling" else "Normal",
        "lastTimestamp": STARTED,
    }


def cluster_of(path: Path) -> Cluster:
    """The file's Jobs on a cluster: the first trial running with hostile lines in its log (and
    in the last lines of its container's first run, killed), the others pending (unschedulable, with a hostile message); events for each pod."""
    jobs = [o for o in render(path) if o["kind"] == "Job"]
    pods, logs, events = [], {}, []
    numbers = itertools.count()
    for index, job in enumerate(jobs):
        container = job["spec"]["template"]["spec"]["containers"][0]
        job["status"] = {"active": 1}
        pod = pod_of(job, restarted(container) if index == 0 else unschedulable())
        pods.append(pod)
        lines = [f"{STARTED} {line}" for line in (*HOSTILE, "loss=0.5")]
        logs[pod["metadata"]["name"], ""] = lines
        reason = "Started" if index == 0 else "FailedScheduling"
        events.append(event(next(numbers), pod, reason, HOSTILE[-1 - index]))
    served = {"batch/v1/jobs": jobs, "v1/pods": pods, "v1/events": events}
    return Cluster(namespace=NAMESPACE, served=served, logs=logs)


def finish(cluster: Cluster) -> None:
    """Every Job complete, its pod succeeded: what a page shows next, without a reload."""
    for job, pod in zip(cluster.served["batch/v1/jobs"], cluster.served["v1/pods"], strict=True):
        job["status"] = {"succeeded": 1, "conditions": COMPLETE}
        ended = {"exitCode": 0, "reason": "Completed", "startedAt": STARTED, "finishedAt": STARTED}
        status = container_status(pod["spec"]["containers"][0], {"terminated": ended})
        pod["status"] = {"phase": "Succeeded", "startTime": STARTED, "containerStatuses": [status]}


def kubeconfig_file(folder: Path, url: str) -> Path:
    path = folder / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig(url)))
    return path
