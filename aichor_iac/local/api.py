"""The local cluster's read API: the few endpoints of the Kubernetes API that `aichor-iac
status`, `logs` and `events` read — pods, Jobs, events and a pod's log, in Kubernetes' own
JSON — over HTTP on 127.0.0.1, so that the Kubernetes client reads a local run as it reads a
cluster (`LocalApi`). A run announces its address in a file of this user's (`announce`), where
`--local` finds it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from ..observe.kubeapi import announcements
from .cluster import LocalCluster
from .egress import pump
from .jobs import ENDED, PodState, indexed, pod_name

INDEX = "batch.kubernetes.io/job-completion-index"
PHASES = {
    PodState.PENDING: "Pending",
    PodState.INIT: "Pending",
    PodState.RUNNING: "Running",
    PodState.SUCCEEDED: "Succeeded",
    PodState.FAILED: "Failed",
}
ROUTES = {
    "pods": re.compile(r"/api/v1/namespaces/([^/]+)/pods\Z"),
    "log": re.compile(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/log\Z"),
    "jobs": re.compile(r"/apis/batch/v1/namespaces/([^/]+)/jobs\Z"),
    "events": re.compile(r"/api/v1/namespaces/([^/]+)/events\Z"),
}


def stamp(when: float | None) -> str | None:
    """A time as the API gives it (RFC 3339, seconds)."""
    return None if when is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))


def served(obj: Any, key: str = "") -> Any:
    """An object as the API server gives it back: quantities (resources, emptyDir sizes) as
    strings, whatever number the manifest wrote."""
    if isinstance(obj, dict):
        return {k: served(v, k) for k, v in obj.items()}
    if isinstance(obj, list):
        return [served(v, key) for v in obj]
    quantity = key in ("sizeLimit", "storage", "cpu", "memory", "ephemeral-storage") or "/" in key
    return str(obj) if quantity and isinstance(obj, int | float) else obj


def pod_object(cluster: LocalCluster, job: dict[str, Any], index: int) -> dict[str, Any]:
    """The pod as the API server gives it: the Job's template with the Job controller's
    labels and annotations, and its status (phase, scheduling, main container state)."""
    name, template = pod_name(job, index), job["spec"]["template"]
    job_name = job["metadata"]["name"]
    labels = {**(template["metadata"].get("labels") or {}), "job-name": job_name}
    labels["batch.kubernetes.io/job-name"] = job_name
    annotations = dict(template["metadata"].get("annotations") or {})
    if indexed(job):
        labels[INDEX] = annotations[INDEX] = str(index)
    record = cluster.records.pods.get(name)
    phase = PHASES[cluster.state[name]]
    status: dict[str, Any] = {"phase": phase, "conditions": _conditions(record, phase)}
    if record is not None and record.scheduled:
        status["startTime"] = stamp(record.scheduled)
        status["containerStatuses"] = [_container(template["spec"], record, phase)]
    metadata = {
        "name": name,
        "namespace": job["metadata"]["namespace"],
        "labels": labels,
        "annotations": annotations,
        "creationTimestamp": stamp(record.created if record else time.time()),
    }
    spec = (
        {**template["spec"], "nodeName": "local"} if status.get("startTime") else template["spec"]
    )
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}
    return served(pod)


def _conditions(record: Any, phase: str) -> list[dict[str, Any]]:
    if record is None or not (record.scheduled or record.unschedulable):
        return []
    if not record.scheduled:
        return [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": record.unschedulable,
            }
        ]
    ready = "True" if phase == "Running" and not record.waiting else "False"
    return [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": ready}]


def _container(spec: dict[str, Any], record: Any, phase: str) -> dict[str, Any]:
    """The main container's status: waiting (creating, CrashLoopBackOff), running or
    terminated (exit code, reason, termination message), its restarts and last state."""
    main = spec["containers"][0]
    if record.waiting:
        state: dict[str, Any] = {
            "waiting": {"reason": record.waiting[0], "message": record.waiting[1]}
        }
    elif phase == "Running" and record.started:
        state = {"running": {"startedAt": stamp(record.started)}}
    elif record.exit_code is not None:
        state = {
            "terminated": _terminated(
                record.exit_code, record.message, record.started, record.finished
            )
        }
    else:
        state = {"waiting": {"reason": "PodInitializing"}}
    status = {
        "name": main["name"],
        "image": main.get("image", ""),
        "imageID": "",
        "ready": phase == "Running" and "running" in state,
        "restartCount": record.restarts,
        "started": "running" in state,
        "state": state,
    }
    if record.last:
        status["lastState"] = {"terminated": _terminated(*record.last)}
    return status


def _terminated(code: int, message: str, started: float | None, finished: float | None) -> dict:
    found = {
        "exitCode": code,
        "reason": "Completed" if code == 0 else "Error",
        "startedAt": stamp(started),
        "finishedAt": stamp(finished),
    }
    return {**found, "message": message} if message else found


def job_object(cluster: LocalCluster, job: dict[str, Any]) -> dict[str, Any]:
    return served({**job, "status": cluster.job_status(job["metadata"]["name"])})


def event_objects(cluster: LocalCluster, namespace: str) -> list[dict[str, Any]]:
    """The events, oldest first, as core/v1 Events."""
    with cluster.records.lock:
        events = list(cluster.records.events)
    sources = {"Job": "job-controller", "Scheduled": "default-scheduler"}
    return [
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{e.name}.{i:016x}", "namespace": namespace},
            "involvedObject": {"kind": e.kind, "name": e.name, "namespace": namespace},
            "reason": e.reason,
            "message": e.message,
            "type": "Warning" if e.warning else "Normal",
            "count": 1,
            "firstTimestamp": stamp(e.when),
            "lastTimestamp": stamp(e.when),
            "source": {
                "component": sources.get(e.kind)
                or ("default-scheduler" if "Scheduling" in e.reason else "kubelet")
            },
        }
        for i, e in enumerate(events)
    ]


def log_lines(cluster: LocalCluster, pod: str, container: str, follow: bool) -> Iterator[str]:
    """The container's lines as the kubelet keeps them (`<RFC 3339 time> <line>`), and, with
    `follow`, the next ones until the pod has ended."""
    path, offset = cluster.root / pod / f"{container}.log", 0
    while True:
        ended = cluster.state.get(pod) in ENDED
        with contextlib.suppress(FileNotFoundError), path.open() as log:
            log.seek(offset)
            for line in iter(log.readline, ""):
                if not line.endswith("\n"):
                    break
                offset += len(line.encode())
                yield line
        if not follow or ended or cluster.closed:
            return
        time.sleep(0.1)


WATCHED = 5.0  # seconds: more than two reads of a watcher that reads every 2


class LocalApi:
    """The read API of `cluster` (whose objects are in `namespace`), served while entered;
    `url` is its address."""

    def __init__(self, cluster: LocalCluster, namespace: str, unix: str | None = None) -> None:
        """On 127.0.0.1, or on the Unix socket `unix` (a run in a network namespace of its
        own, which its parent forwards: `forwarded`)."""
        self.cluster, self.namespace = cluster, namespace
        server: socketserver.BaseServer
        if unix is None:
            server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
            self.url = f"http://127.0.0.1:{server.server_address[1]}"
        else:
            server = _UnixServer(unix, _handler(self))
            self.url = f"unix:{unix}"
        self.server = server
        self.asked = -WATCHED  # (time.monotonic() of the last request)

    def linger(self) -> None:
        """A run being watched (a dashboard, `status --watch`: read in the last WATCHED
        seconds) serves its end WATCHED seconds more, so that its watchers read it."""
        if time.monotonic() - self.asked < WATCHED:
            time.sleep(WATCHED)

    def __enter__(self) -> LocalApi:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, path: str, query: dict[str, list[str]]) -> tuple[str, Any]:
        """What GET `path` gives: ("json", object), ("lines", iterator) or ("missing", why)."""
        cluster, one = self.cluster, lambda key, default="": query.get(key, [default])[0]
        self.asked = time.monotonic()
        if path == "/version":
            return "json", {"major": "1", "minor": "34", "gitVersion": "v1.34.0+local"}
        routed = [(k, m) for k, r in ROUTES.items() if (m := r.match(path))]
        if not routed or routed[0][1][1] != self.namespace:
            return "missing", f"the local cluster does not serve {path}"
        kind, found = routed[0]
        wanted = _selector(one("labelSelector"))
        if kind == "pods":
            pods = [pod_object(cluster, job, i) for job, i in cluster.pods]
            items = [p for p in pods if wanted.items() <= p["metadata"]["labels"].items()]
            return "json", {"apiVersion": "v1", "kind": "PodList", "items": items}
        if kind == "jobs":
            jobs = [job_object(cluster, job) for job in cluster.jobs]
            items = [j for j in jobs if wanted.items() <= j["metadata"]["labels"].items()]
            return "json", {"apiVersion": "batch/v1", "kind": "JobList", "items": items}
        if kind == "events":
            items = event_objects(cluster, self.namespace)
            return "json", {"apiVersion": "v1", "kind": "EventList", "items": items}
        pod = found[2]
        if pod not in cluster.state:
            return "missing", f'pods "{pod}" not found'
        job = cluster.controllers.job_of_pod(pod)
        container = one("container") or job["spec"]["template"]["spec"]["containers"][0]["name"]
        lines = log_lines(cluster, pod, container, one("follow") == "true")
        if one("timestamps") != "true":
            lines = (line.split(" ", 1)[1] for line in lines)
        return "lines", lines


def _selector(text: str) -> dict[str, str]:
    """An equality label selector (`a=b,c=d`) as the labels it asks for."""
    pairs = [part.split("=", 1) for part in text.split(",") if "=" in part]
    return {k.strip().rstrip("="): v.strip().lstrip("=") for k, v in pairs}


def _handler(api: LocalApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlparse(self.path)
            kind, body = api.answer(url.path, parse_qs(url.query))
            if kind == "missing":
                status = {"kind": "Status", "apiVersion": "v1", "status": "Failure"}
                self._send(404, "application/json", json.dumps({**status, "message": body}))
            elif kind == "json":
                self._send(200, "application/json", json.dumps(body))
            else:
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                with contextlib.suppress(OSError):  # (a reader that stopped following)
                    for line in body:
                        self.wfile.write(line.encode())
                        self.wfile.flush()

        def _send(self, code: int, kind: str, text: str) -> None:
            data = text.encode()
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:  # (quiet: the run's output is the pods')
            pass

    return Handler


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


@contextlib.contextmanager
def forwarded(unix: str) -> Iterator[str]:
    """An address on this side's 127.0.0.1 whose connections are passed to the Unix socket
    `unix` (an API served inside a run's own network namespace), while entered."""

    class Pass(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as inner:
                inner.connect(unix)
                back = threading.Thread(target=pump, args=(inner, self.request), daemon=True)
                back.start()
                pump(self.request, inner)
                back.join()

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Pass)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def announce(experiment: str, url: str, namespace: str, source: str = "") -> Iterator[None]:
    """While the run lasts, `<announcements>/<experiment>@<pid>.json` gives its API's address
    (and the file it runs, `source`): two runs at once, of one file or of two, each its own."""
    folder = announcements()
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / f"{experiment}@{os.getpid()}.json"
    said = {"url": url, "namespace": namespace, "pid": os.getpid(), "source": source}
    path.write_text(json.dumps(said))
    try:
        yield
    finally:
        path.unlink(missing_ok=True)
