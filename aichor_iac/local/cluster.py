"""`LocalCluster`: every pod of a rendered experiment as local processes, with the life a pod
has on a cluster: created by its Job's rules (`jobs.Controllers`), scheduled once its gang
holds and the node has what it asks (an address, a host name in the shared hosts file), run
by the kubelet (`pods.PodRunner`) on this machine as the node (`node.Node`)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from . import containers
from .host import network_namespaces
from .jobs import Controllers, PodState, gang_of, grace_of, owner, pod_name
from .kubelet import Capacity
from .node import Node
from .pods import PodRunner


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
        rejoining: Collection[tuple[str, str]] = (),
    ):
        self.controllers = Controllers(objects, kueue_quota)
        self.jobs, self.pods = self.controllers.jobs, self.controllers.pods
        self.state, self.lock = self.controllers.state, self.controllers.lock
        deployments = [o for o in objects if o["kind"] == "Deployment"]
        self.servers = [(d, i) for d in deployments for i in range(d["spec"]["replicas"])]
        self.node = Node(
            objects,
            self.servers + self.pods,
            env,
            secrets or {},
            on_line,
            workdir or Path.cwd(),
            private,
            entrypoints or {},
        )
        capacity = Capacity(allocatable)
        # A local run is a smoke test: a failed container's pod fails at once, unless asked
        # (`kubelet_restarts`) or an elastic job's member (`rejoining`: the others train on)
        rejoins = frozenset(rejoining)
        self.kubelet = PodRunner(
            self.controllers,
            self.node,
            capacity,
            lambda job: kubelet_restarts or owner(job) in rejoins,
        )
        self.runner = JobRunner(self.controllers, self.kubelet)
        # What the run's readers look at: the read API, the run's report, the tests
        self.records, self.results = self.kubelet.records, self.kubelet.results
        self.unshipped, self.ended_at = self.kubelet.unshipped, self.kubelet.ended_at
        self.root, self.network, self.ips = self.node.root, self.node.network, self.node.ips
        self.volumes, self.started = self.node.volumes, self.runner.started
        self.claim, self.exec, self.logs = self.node.claim, self.node.exec, self.node.files.logs
        self.termination_message = self.node.files.termination_message
        self.start, self.settle = self.runner.start, self.runner.settle
        self.flush = self.node.flush
        self.evict, self.fail_job = self.kubelet.evict, self.runner.fail_job
        self.on_stopped: list[Callable[[], None]] = []  # (keeps what they printed: a record)

    def add(self, objects: list[dict[str, Any]]) -> None:
        """More objects, while the cluster runs (`pulumi up` creating a sweep's later trials):
        their Jobs can be started from now on. Not a Deployment: its pods serve from the
        cluster's start."""
        if any(o["kind"] == "Deployment" for o in objects):
            raise ValueError("a Deployment is created with the cluster, not added")
        self.node.add(objects, self.controllers.add(objects))

    @property
    def closed(self) -> bool:
        return self.kubelet.closed

    def __enter__(self) -> LocalCluster:
        self.node.__enter__()
        try:
            self.node.hosts(self.kubelet.live)
            for deployment, i in self.servers:
                serve = threading.Thread(target=self.kubelet.serve, args=(deployment, i))
                serve.daemon = True
                serve.start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        """The run's end (decided, or Ctrl-C): every pod still running is stopped as a
        deleted pod is, TERM and its grace period before KILL (a trainer's checkpoint on
        TERM completes); a second Ctrl-C while they end kills them at once."""
        self.kubelet.closed = True
        try:
            stop_all(self.node)
            self.flush()  # (what the pods printed in their grace period, handed on)
            for keep in self.on_stopped:  # (and kept, before their files go)
                keep()
        finally:
            for pod in self.ips:
                self.node.kill(pod)
            for thread in (t for threads in self.started.values() for t in threads):
                thread.join(10)  # each sees its processes end before their files go
            self.node.__exit__(*exc)

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

    def job_status(self, name: str) -> dict[str, Any]:
        """The Job's `.status` as the Job controller writes it, Ready from the pods' probes."""
        return self.controllers.status(name, self.ready)

    def why_pending(self, pod: str) -> str:
        """Why a pending pod is not running yet, as `kubectl describe` would put it."""
        return self.controllers.why_pending(pod)

    def ready(self, pod: str) -> bool:
        """Whether the pod is Ready: its main container runs and its readiness probe (a TCP
        port, the only kind rendered) accepts a connection from the node."""
        if self.state.get(pod) != PodState.RUNNING:
            return False
        job = self.controllers.job_of_pod(pod)
        probe = job["spec"]["template"]["spec"]["containers"][0].get("readinessProbe")
        if not probe:
            return True
        port = probe["tcpSocket"]["port"]
        connect = f"import socket; socket.create_connection(('{self.ips[pod]}', {port}), 2)"
        return self.exec(pod, sys.executable, "-c", connect).returncode == 0


class JobRunner:
    """The Job controller's side of a run: each Job's pods made (a thread each) as its rules
    let them (`jobs.Controllers`), placed by the scheduler, run by the kubelet (`PodRunner`),
    made again after a failure the Job survives; and a Job failed past its deadline."""

    def __init__(self, controllers: Controllers, kubelet: PodRunner) -> None:
        self.controllers, self.kubelet, self.lock = controllers, kubelet, controllers.lock
        self.records, self.node = kubelet.records, kubelet.node
        self.started: dict[str, list[threading.Thread]] = {}

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

    def settle(self, timeout: float) -> None:
        """Wait (at most `timeout` per pod) for every started pod to end, and for every line
        printed to be handed on."""
        for threads in list(self.started.values()):
            for thread in threads:
                thread.join(timeout)
        self.node.flush()

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
        self.records.job_ended(name, "Failed", reason)
        self.kubelet.stop(pods)

    def _replica(
        self, job: dict[str, Any], index: int, hold: tuple[str, str] | None, timeout: float
    ) -> None:
        """One pod of a Job, from its creation to its end."""
        deadline = time.monotonic() + timeout
        while (
            hold and hold[1] not in self.node.files.output(hold[0]) and time.monotonic() < deadline
        ):
            time.sleep(0.2)
        if not self.kubelet.until(lambda: self.controllers.kueue.admit(job)):  # Kueue: suspended
            return
        with self.controllers.slots[job["metadata"]["name"]]:  # the Job controller makes it
            pod, gang = pod_name(job, index), gang_of(job)
            with self.lock:
                if self.controllers.condition(job["metadata"]["name"]):
                    return  # (failed before this pod was made)
                self.controllers.created.add(pod)
            while True:  # the pod, then each one made again after a failure
                self.records.created(job["metadata"]["name"], pod)
                if not self.kubelet.until(lambda: self._placed(job, pod, gang)):
                    return  # (never scheduled before its gang, or the resources it asks)
                self.kubelet.scheduled(pod)
                self.records.scheduled(job["metadata"]["namespace"], pod)
                if not self.kubelet.run(job, index, pod) or self.kubelet.closed:
                    return
                self.kubelet.renew(pod)

    def _placed(self, job: dict[str, Any], pod: str, gang: str | None) -> bool:
        """Whether the scheduler places the pod: its gang holds, the node has what it asks."""
        if gang and not self.controllers.gang_holds(gang):
            self.records.unschedulable(pod, self.controllers.why_pending(pod))
            return False
        with self.lock:
            why = self.kubelet.capacity.fits(pod, job["spec"]["template"]["spec"])
        if why:
            self.records.unschedulable(pod, why)
        return why is None


def stop_all(node: Node) -> None:
    """Every pod's running containers on `node` stopped at once, as a deleted pod's are (TERM,
    KILL after the pod's grace period: `containers.stop`)."""
    stopping = [
        threading.Thread(
            target=containers.stop,
            args=(node.running([pod_name(w, i)]), grace_of(w)),
            daemon=True,
        )
        for w, i in node.workloads
        if pod_name(w, i) in node.processes
    ]
    for thread in stopping:
        thread.start()
    for thread in stopping:
        thread.join()
