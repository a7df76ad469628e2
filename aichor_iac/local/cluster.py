"""`LocalCluster`: every pod of a rendered experiment as local processes, with the life a pod
has on a cluster: created by its Job's rules (`jobs`), scheduled (an address, a host name in
the shared hosts file), its init containers in turn, native sidecars beside its main
container, then ended (sidecars signalled, processes killed, its names withdrawn)."""

from __future__ import annotations

import base64
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..engine import REDACTED
from ..k8s import tensorboard
from . import containers, volumes
from .downward import container_argv, container_env, container_of
from .host import LocalUnavailable, network_namespaces
from .jobs import Controllers, gang_of, pod_name
from .kubelet import BACKOFF_SECONDS, MAX_BACKOFF_SECONDS, Capacity, Records
from .network import Network, records


class LocalCluster:
    """Run every replica of a rendered experiment as local processes, the way Kubernetes would
    run its pods: native sidecars (init containers with `restartPolicy: Always`) beside the
    others, init containers in turn, then the main containers, each with its env and host name.

    Each pod gets a network namespace of its own (`ip netns`, root only) with its own address
    on a bridge, a private /tmp, and its volumes mounted where the pod spec says (`volumes`).
    One /etc/hosts, shared by all pods, resolves every pod host and every Service. A pod's
    names enter that file once it is scheduled (it has an address: the headless Service
    publishes not-ready addresses) and leave it when its main container has exited, its
    sidecars have had TERM (then KILL after the grace period) and its processes are killed,
    as a finished pod leaves the Service's DNS records. Deployment pods run from the start
    until the cluster is left. The Job controller's `parallelism`, a gang scheduler's
    `minMember` and Kueue's quota (`kueue_quota` pods; None: any) hold (`jobs.Controllers`).
    `secrets` gives the values of the generated Secret's keys (they are never rendered: a
    Secret's redacted value takes the value of its key there, a given one is kept);
    `entrypoints` what an image runs when a container gives no command (no image is pulled).

    `run()` creates every Job at once; `start(job)` creates one, for callers that create them
    in an order (tests/pulumi_up.py), and `job_status(job)` reports what the Job controller
    would (`active`, `ready`, `succeeded`, `failed`, `conditions`).
    """

    GRACE_SECONDS = 30
    available = staticmethod(network_namespaces)

    def __init__(
        self,
        objects: list[dict[str, Any]],
        env: dict[str, str],
        secrets: dict[str, str] | None = None,
        on_line: Callable[[str, str], None] | None = None,
        workdir: Path | None = None,
        private: bool = False,
        kueue_quota: int | None = None,
        entrypoints: dict[str, list[str]] | None = None,
        allocatable: dict[str, int] | None = None,
        kubelet_restarts: bool = False,
    ):
        self.controllers = Controllers(objects, kueue_quota)
        self.jobs, self.pods = self.controllers.jobs, self.controllers.pods
        self.state, self.lock = self.controllers.state, self.controllers.lock
        self.deployments = [o for o in objects if o["kind"] == "Deployment"]
        self.services = [o for o in objects if o["kind"] == "Service"]
        self.env = env
        self.on_line = on_line  # (pod[/container], line) as each line is printed
        # each container's process and the thread handing its lines to on_line
        self.tails: list[tuple[subprocess.Popen, threading.Thread]] = []
        self.workdir = workdir or Path.cwd()  # where commands run (an image's working dir)
        self.entrypoints = entrypoints or {}  # image -> what it runs without a command
        self.results: dict[str, subprocess.CompletedProcess] = {}
        self.unshipped: set[str] = set()  # pods whose log shipper did not ship all (`_stop`)
        # not under /tmp: each pod gets its own /tmp
        self.root = Path(tempfile.mkdtemp(prefix="aichor-pods-", dir="/var/tmp"))
        self.servers = [(d, i) for d in self.deployments for i in range(d["spec"]["replicas"])]
        every = [pod_name(w, i) for w, i in self.servers + self.pods]
        self.network = Network(self.root, every, private)
        self.ips = self.network.ips
        config = {
            o["metadata"]["name"]: o.get("data", {}) for o in objects if o["kind"] == "ConfigMap"
        }
        self.secrets = {
            (o["metadata"]["name"], key): (secrets or {}).get(key, "")
            if value == REDACTED
            else value
            for o in objects
            if o["kind"] == "Secret"
            for key, value in _secret_data(o).items()
        }
        self.volumes = volumes.Volumes(self.root, config, self.secrets)
        self.live = {pod_name(d, i) for d, i in self.servers}  # Job pods: once scheduled
        self.started: dict[str, list[threading.Thread]] = {}
        self.closed = False
        self.mount_points = volumes.MountPoints(self.jobs + self.deployments)
        self.processes: dict[str, list[subprocess.Popen]] = {pod: [] for pod in self.ips}
        self.disrupted: set[str] = set()  # pods being deleted as a drain would
        # What the API reports (`kubelet`); the node's extended resources; whether a failed
        # OnFailure container restarts in place (the kubelet's), else its pod fails at once
        self.records, self.capacity = Records(), Capacity(allocatable)
        self.kubelet_restarts = kubelet_restarts
        self.ended_at: dict[str, float] = {}  # when each pod last ended (time.monotonic)

    def claim(self, name: str) -> Path:
        """The directory standing for a PersistentVolumeClaim (it outlives every pod)."""
        return self.volumes.claim(name)

    def exec(self, pod: str, *command: str) -> subprocess.CompletedProcess:
        """Run a command in a pod's network namespace (as `kubectl exec` would)."""
        return self.network.exec(pod, *command)

    def __enter__(self) -> LocalCluster:
        try:
            self.mount_points.__enter__()
        except LocalUnavailable:
            self.mount_points.__exit__()
            shutil.rmtree(self.root, ignore_errors=True)
            raise
        self.network.up()
        for pod in self.ips:
            (self.root / pod / "tmp").mkdir(parents=True)
        self._write()
        for deployment, i in self.servers:
            threading.Thread(target=self._server, args=(deployment, i), daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.closed = True
        for pod in self.ips:
            self._kill(pod)
        for thread in (t for threads in self.started.values() for t in threads):
            thread.join(10)  # each sees its processes end before their files go
        self.network.down()
        shutil.rmtree(self.root, ignore_errors=True)
        self.mount_points.__exit__()

    def run(
        self, timeout: float = 120, held: dict[str, tuple[str, str]] | None = None
    ) -> dict[str, subprocess.CompletedProcess]:
        """Start every Job's replicas at once and return each one's main container result by
        pod name. `held` keeps a pod pending, as a node still scaling up would, until another
        pod has printed a line: {pod: (other pod, text)} (bounded by `timeout`)."""
        for job in self.jobs:
            self.start(job["metadata"]["name"], timeout, held)
        self.settle(timeout)
        return self.results

    def settle(self, timeout: float) -> None:
        """Wait (at most `timeout` per pod) for every started pod to end, and for every line
        printed to be handed on."""
        for threads in list(self.started.values()):
            for thread in threads:
                thread.join(timeout)
        for process, tail in list(self.tails):
            if process.poll() is not None:  # (a server's container runs until the cluster is left)
                tail.join(5)

    def start(
        self, name: str, timeout: float = 120, held: dict[str, tuple[str, str]] | None = None
    ) -> None:
        """Create the Job `name`: its pods from now on, as the Job controller makes them."""
        job = self.controllers.job(name)
        threads = [
            threading.Thread(
                target=self._replica,
                args=(job, i, (held or {}).get(pod_name(job, i)), timeout),
                daemon=True,
            )
            for i in range(job["spec"]["completions"])
        ]
        with self.lock:
            self.started[name] = threads
        for thread in threads:
            thread.start()

    def job_status(self, name: str) -> dict[str, Any]:
        """The Job's `.status` as the Job controller writes it, Ready from the pods' probes."""
        return self.controllers.status(name, self.ready)

    def why_pending(self, pod: str) -> str:
        """Why a pending pod is not running yet, as `kubectl describe` would put it."""
        return self.controllers.why_pending(pod)

    def ready(self, pod: str) -> bool:
        """Whether the pod is Ready: its main container runs and its readiness probe (a TCP
        port, the only kind rendered) accepts a connection from the node."""
        if self.state.get(pod) != "running":
            return False
        job = self.controllers.job_of_pod(pod)
        probe = job["spec"]["template"]["spec"]["containers"][0].get("readinessProbe")
        if not probe:
            return True
        port = probe["tcpSocket"]["port"]
        connect = f"import socket; socket.create_connection(('{self.ips[pod]}', {port}), 2)"
        return self.exec(pod, sys.executable, "-c", connect).returncode == 0

    def _replica(
        self, job: dict[str, Any], index: int, hold: tuple[str, str] | None, timeout: float
    ) -> None:
        """One pod of a Job, from its creation to its end."""
        deadline = time.monotonic() + timeout
        while hold and hold[1] not in self._output(hold[0]) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not self._until(lambda: self.controllers.admit(job)):  # Kueue: suspended
            return
        with self.controllers.slots[job["metadata"]["name"]]:  # the Job controller makes it
            pod, gang = pod_name(job, index), gang_of(job)
            with self.lock:
                if self.controllers.condition(job["metadata"]["name"]):
                    return  # (failed before this pod was made)
                self.controllers.created.add(pod)
            while True:  # the pod, then each one made again after a failure
                self.records.created(job["metadata"]["name"], pod)
                if not self._until(lambda: self._placed(job, pod, gang)):
                    return  # (never scheduled before its gang, or the resources it asks)
                with self.lock:  # scheduled: it has an address, the Service publishes it
                    self.state[pod] = "init"
                    self.live.add(pod)
                    self._write()
                self.records.scheduled(job["metadata"]["namespace"], pod)
                if not self._run_pod(job, index, pod) or self.closed:
                    return
                self._renew(pod)

    def _placed(self, job: dict[str, Any], pod: str, gang: str | None) -> bool:
        """Whether the scheduler places the pod: its gang holds, the node has what it asks."""
        if gang and not self.controllers.gang_holds(gang):
            self.records.unschedulable(pod, self.controllers.why_pending(pod))
            return False
        with self.lock:
            why = self.capacity.fits(pod, job["spec"]["template"]["spec"])
        if why:
            self.records.unschedulable(pod, why)
        return why is None

    def _sleep(self, seconds: float) -> bool:
        """Wait `seconds`; False if the cluster is left first."""
        until = time.monotonic() + seconds
        return self._until(lambda: time.monotonic() >= until)

    def _until(self, condition: Callable[[], bool]) -> bool:
        """Wait for `condition`; False if the cluster is left first."""
        while not condition():
            if self.closed:
                return False
            time.sleep(0.1)
        return not self.closed

    def _run_pod(self, job: dict[str, Any], index: int, pod: str) -> bool:
        """A scheduled pod's containers: init containers in turn (native sidecars started
        beside), then the main one; then its end. Whether its Job makes it again."""
        spec = job["spec"]["template"]["spec"]
        sidecars: dict[str, subprocess.Popen] = {}
        for init in spec.get("initContainers", []):
            if init.get("restartPolicy") == "Always":
                sidecars[init["name"]] = self._start(job, index, init["name"])
                containers.started(sidecars[init["name"]])  # (before the next one starts)
                continue
            result = containers.wait(self._start(job, index, init["name"]))
            if result.returncode != 0:
                self._stop(pod, sidecars)
                return self._finish(pod, result)
        result = self._main(job, index, pod)
        self._stop(pod, sidecars)
        return self._finish(pod, result)

    def _stop(self, pod: str, sidecars: dict[str, subprocess.Popen]) -> None:
        """The pod's native sidecars stopped, as the kubelet stops them. A log shipper that
        did not end well (it gave up, or the grace period's KILL came first) lost logs: the
        pod is `unshipped`, which Kubernetes would not count, and a local run does (unless
        it was the run's own end that killed it: the run was decided by then)."""
        containers.stop(list(sidecars.values()), self.GRACE_SECONDS)
        shipper = sidecars.get(tensorboard.SHIPPER_CONTAINER)
        if shipper is not None and shipper.returncode and not self.closed:
            self.unshipped.add(pod)
            if self.on_line is not None:
                said = f"aichor-iac: TensorBoard logs not all shipped ({shipper.returncode})"
                self.on_line(f"{pod}/{tensorboard.SHIPPER_CONTAINER}", said)

    def _main(self, job: dict[str, Any], index: int, pod: str) -> subprocess.CompletedProcess:
        """The main container's run, and (`kubelet_restarts`, restartPolicy OnFailure) its
        runs again after each failure, with the kubelet's back-off, as long as the Job's
        backoffLimit (which counts them) allows."""
        spec, delay = job["spec"]["template"]["spec"], BACKOFF_SECONDS
        name, limit = spec["containers"][0]["name"], job["spec"].get("backoffLimit", 6)
        while True:
            main = self._start(job, index, name)
            self.state[pod] = "running"
            self.records.started(pod, name)
            result = containers.wait(main)
            self.records.ended(pod, result.returncode, self.termination_message(pod, name))
            in_place = self.kubelet_restarts and spec.get("restartPolicy") == "OnFailure"
            if not result.returncode or not in_place or pod in self.disrupted:
                return result
            if self.records.pod(pod).restarts >= limit or self.closed:
                return result
            self.records.backing_off(pod, name, delay)
            if not self._sleep(delay):
                return result
            delay = min(delay * 2, MAX_BACKOFF_SECONDS)

    def evict(self, pod: str) -> None:
        """Delete a running pod as a node drain or a preemption does: it gets the
        DisruptionTarget condition, its containers TERM and, after the grace period, KILL;
        its Job makes it again without counting a failure (where its pod failure policy
        ignores disruptions)."""
        with self.lock:
            self.disrupted.add(pod)
            running = [p for p in self.processes[pod] if p.poll() is None]
        self.records.event("Pod", pod, "Killing", "Stopping pod (DisruptionTarget)")
        threading.Thread(
            target=containers.stop, args=(running, self.GRACE_SECONDS), daemon=True
        ).start()

    def fail_job(self, name: str, reason: str) -> None:
        """Fail the Job as the Job controller fails one past its activeDeadlineSeconds: its
        Failed condition (`reason`), its running pods stopped (TERM, then KILL after the grace
        period), none made again."""
        with self.lock:
            if self.controllers.condition(name):
                return
            self.controllers.fail(name, reason)
            pods = [
                p
                for p, job in self.controllers.job_by_pod.items()
                if job["metadata"]["name"] == name
            ]
            running = [r for p in pods for r in self.processes[p] if r.poll() is None]
        self.records.job_ended(name, "Failed", reason)
        threading.Thread(
            target=containers.stop, args=(running, self.GRACE_SECONDS), daemon=True
        ).start()

    def termination_message(self, pod: str, container: str) -> str:
        """What a container wrote to its termination message file (`/dev/termination-log`)."""
        path = self.root / pod / f"{container}.termination-log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _renew(self, pod: str) -> None:
        """A pod made again starts afresh: its own /tmp, image copy and files are new."""
        with self.lock:
            self.state[pod] = "pending"
        for path in (self.root / pod).iterdir():
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        (self.root / pod / "tmp").mkdir()

    def _server(self, deployment: dict[str, Any], index: int) -> None:
        """A Deployment's pod: every container at once, until the cluster is left."""
        spec = deployment["spec"]["template"]["spec"]
        for container in spec["containers"]:
            self._start(deployment, index, container["name"])

    def _output(self, pod: str) -> str:
        """What a pod's containers have printed so far."""
        logs = sorted((self.root / pod).glob("*.out"))
        return "".join(log.read_text(errors="replace") for log in logs)

    def logs(self, pod: str, container: str) -> str:
        """What one container of a pod has printed (stdout and stderr)."""
        return "".join(
            (self.root / pod / f"{container}.{kind}").read_text(errors="replace")
            for kind in ("out", "err")
            if (self.root / pod / f"{container}.{kind}").exists()
        )

    def _start(self, workload: dict[str, Any], index: int, name: str) -> subprocess.Popen:
        """Container `name` of a workload's pod `index`, started; its lines handed on."""
        pod = pod_name(workload, index)
        spec = workload["spec"]["template"]["spec"]
        main = container_of(spec, name)
        env = container_env(workload, index, name, self.ips[pod], self.secrets)
        env["AICHOR_TERMINATION_LOG"] = str(self.root / pod / f"{name}.termination-log")
        command = container_argv(main, env, self.entrypoints)
        mounts = []
        for mount in main.get("volumeMounts", []):
            source = self.volumes.source(pod, spec, mount["name"])
            if source is not None:  # (its mount point: volumes.MountPoints)
                mounts.append((str(source), mount["mountPath"], bool(mount.get("readOnly"))))
        process = containers.launch(
            self.network.ns(pod),
            pod,
            name,
            command,
            {**self.env, **env},
            mounts,
            main.get("securityContext", {}),
            self.root,
            self.workdir,
        )
        with self.lock:
            self.processes[pod].append(process)
        # every line, with when it was printed (the API's pod logs), and to on_line
        prefix = pod if name == spec["containers"][0]["name"] else f"{pod}/{name}"
        stamped = self.root / pod / f"{name}.log"
        args = (process, prefix, self.on_line, stamped)
        tail = threading.Thread(target=containers.tail, args=args, daemon=True)
        tail.start()
        with self.lock:
            self.tails.append((process, tail))
        return process

    def _kill(self, pod: str) -> None:
        """What the end of a pod's container does: every process of the pod ends. Each
        container's `unshare` first, which takes its container with it (`--kill-child`) and
        says nothing; killed after its child (the namespace's processes in pid order, which
        wraps), it reported the child's SIGKILL: `unshare: sigprocmask unblock failed`."""
        for process in self.processes.get(pod, []):
            if process.poll() is None:
                process.kill()
                process.wait()
        self.network.kill(pod)  # (whatever else runs in the pod's network namespace)

    def _finish(self, pod: str, result: subprocess.CompletedProcess) -> bool:
        """The pod's end: its processes killed, its names withdrawn; whether its Job makes
        it again."""
        self._kill(pod)
        with self.lock:
            disrupted = pod in self.disrupted
            self.disrupted.discard(pod)
            self.capacity.free(pod)
            job = self.controllers.job_of_pod(pod)["metadata"]["name"]
            was = self.controllers.condition(job)
            again = self.controllers.ended(pod, result.returncode, disrupted)
            if (now := self.controllers.condition(job)) and now != was:
                self.records.job_ended(job, now, self.controllers.reasons.get(job, ""))
            self.ended_at[pod] = time.monotonic()
            self.results[pod] = result  # (last: a reader without the lock sees it all)
            self.live.discard(pod)
            self._write()
        return again

    def _write(self) -> None:
        """The hosts file: each scheduled pod's names, and each Service's addresses."""
        workloads = self.servers + self.pods
        self.network.hosts(records(workloads, self.services, self.live, self.ips))


def _secret_data(secret: dict[str, Any]) -> dict[str, str]:
    """A Secret's values by key, as the kubelet gives them (`data` decoded)."""
    data = {
        key: value if value == REDACTED else base64.b64decode(value).decode(errors="replace")
        for key, value in (secret.get("data") or {}).items()
    }
    return {**data, **(secret.get("stringData") or {})}
