"""`PodRunner`: what the kubelet does with a scheduled pod on the local node: its init
containers in turn (native sidecars started beside), its main container (restarted in place
with the back-off where asked), then its end (sidecars stopped with TERM and, after the grace
period, KILL; its processes killed; its names withdrawn), and the run's report of it."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from ..k8s import tensorboard
from . import containers, probes
from .jobs import Controllers, PodState, grace_of
from .kubelet import BACKOFF_SECONDS, MAX_BACKOFF_SECONDS, Capacity, Records
from .node import Node

# Whether a Job's failed OnFailure containers restart in place, as the kubelet restarts them
InPlace = Callable[[dict[str, Any]], bool]


class PodRunner:
    """The pods of `controllers`' Jobs on `node`. `closed` once the cluster is left: a pod's
    wait ends, and what ends then is the run's end, not a failure of its own."""

    def __init__(
        self, controllers: Controllers, node: Node, capacity: Capacity, in_place: InPlace
    ) -> None:
        self.controllers, self.node, self.lock = controllers, node, controllers.lock
        # What the API reports (`kubelet`); the node's extended resources; whether a Job's
        # failed OnFailure containers restart in place (the kubelet's), else its pod fails
        self.records, self.capacity, self.in_place = Records(), capacity, in_place
        self.live = {p for p in node.ips if p not in controllers.state}  # (Deployments': at once)
        self.disrupted: set[str] = set()  # pods being deleted as a drain would
        self.closed = False
        # The run's report: each pod's main container's result, the pods whose log shipper did
        # not ship all (`_stop`), when each pod last ended (time.monotonic)
        self.results: dict[str, subprocess.CompletedProcess] = {}
        self.unshipped: set[str] = set()
        self.ended_at: dict[str, float] = {}

    def scheduled(self, pod: str) -> None:
        """The pod has an address: the Service publishes it, its names enter the hosts file."""
        self.controllers.move(pod, PodState.INIT)
        with self.lock:
            self.live.add(pod)
            self.node.hosts(self.live)

    def run(self, job: dict[str, Any], index: int, pod: str) -> bool:
        """A scheduled pod's containers: init containers in turn (native sidecars started
        beside), then the main one; then its end. Whether its Job makes it again."""
        spec = job["spec"]["template"]["spec"]
        sidecars: dict[str, subprocess.Popen] = {}
        self.node.egress.start(pod)  # (the stores its keeper writes to)
        for init in spec.get("initContainers", []):
            if init.get("restartPolicy") == "Always":
                sidecars[init["name"]] = self.node.start(job, index, init["name"])
                containers.started(sidecars[init["name"]])  # (before the next one starts)
                if not probes.started_up(self, job, index, init, sidecars):
                    self._stop(pod, sidecars)
                    return False  # (the cluster was left while it waited)
                continue
            result = containers.wait(self.node.start(job, index, init["name"]))
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
        containers.stop(list(sidecars.values()), grace_of(self.controllers.job_of_pod(pod)))
        shipper = sidecars.get(tensorboard.SHIPPER_CONTAINER)
        if shipper is not None and shipper.returncode and not self.closed:
            self.unshipped.add(pod)
            if self.node.on_line is not None:
                said = f"aichor-iac: TensorBoard logs not all shipped ({shipper.returncode})"
                self.node.on_line(f"{pod}/{tensorboard.SHIPPER_CONTAINER}", said)

    def _main(self, job: dict[str, Any], index: int, pod: str) -> subprocess.CompletedProcess:
        """The main container's run, and (`in_place`, restartPolicy OnFailure) its
        runs again after each failure, with the kubelet's back-off, as long as the Job's
        backoffLimit allows: it counts the restarts of all the Job's containers."""
        spec, delay = job["spec"]["template"]["spec"], BACKOFF_SECONDS
        name, limit = spec["containers"][0]["name"], job["spec"].get("backoffLimit", 6)
        while True:
            main = self.node.start(job, index, name)
            self.controllers.move(pod, PodState.RUNNING)
            self.records.started(pod, name)
            probes.watching(self, job, index, main)
            result = containers.wait(main)
            said = self.node.files.ended_message(pod, spec["containers"][0], result.returncode)
            self.records.ended(pod, result.returncode, said)
            in_place = self.in_place(job) and spec.get("restartPolicy") == "OnFailure"
            if not result.returncode or not in_place or pod in self.disrupted:
                return result
            spent = self.records.restarts(self.controllers.pods_of(job["metadata"]["name"]))
            if spent >= limit or self.closed:
                return result
            self.records.backing_off(pod, name, delay)
            if not self.sleep(delay):
                return result
            delay = min(delay * 2, MAX_BACKOFF_SECONDS)

    def _finish(self, pod: str, result: subprocess.CompletedProcess) -> bool:
        """The pod's end: its processes killed, its names withdrawn; whether its Job makes
        it again."""
        self.node.kill(pod)
        with self.lock:
            disrupted = pod in self.disrupted
            self.disrupted.discard(pod)
            self.capacity.free(pod)
            job = self.controllers.job_of_pod(pod)["metadata"]["name"]
            was = self.controllers.condition(job)
            restarts = self.records.restarts(self.controllers.pods_of(job))
            again = self.controllers.ended(pod, result.returncode, disrupted, restarts)
            if (now := self.controllers.condition(job)) and now != was:
                self.records.job_ended(job, now, self.controllers.reasons.get(job, ""))
            self.ended_at[pod] = time.monotonic()
            self.results[pod] = result  # (last: a reader without the lock sees it all)
            self.live.discard(pod)
            self.node.hosts(self.live)
        return again

    def renew(self, pod: str) -> None:
        """A pod made again starts afresh: pending, with its own /tmp, image copy and files."""
        self.controllers.move(pod, PodState.PENDING)
        self.node.renew(pod)

    def serve(self, deployment: dict[str, Any], index: int) -> None:
        """A Deployment's pod: every container at once, until the cluster is left."""
        spec = deployment["spec"]["template"]["spec"]
        for container in spec["containers"]:
            self.node.start(deployment, index, container["name"])

    def evict(self, pod: str) -> None:
        """Delete a running pod as a node drain or a preemption does: it gets the
        DisruptionTarget condition, its containers TERM and, after the grace period, KILL;
        its Job makes it again without counting a failure (where its pod failure policy
        ignores disruptions)."""
        with self.lock:
            self.disrupted.add(pod)
        self.records.event("Pod", pod, "Killing", "Stopping pod (DisruptionTarget)")
        self.stop([pod])

    def stop(self, pods: list[str]) -> None:
        """The pods' processes stopped as a deleted pod's are (TERM, then KILL after its
        grace period), while the caller goes on."""
        for pod in pods:
            args = (self.node.running([pod]), grace_of(self.controllers.job_of_pod(pod)))
            threading.Thread(target=containers.stop, args=args, daemon=True).start()

    def sleep(self, seconds: float) -> bool:
        """Wait `seconds`; False if the cluster is left first."""
        until = time.monotonic() + seconds
        return self.until(lambda: time.monotonic() >= until)

    def until(self, condition: Callable[[], bool]) -> bool:
        """Wait for `condition`; False if the cluster is left first."""
        while not condition():
            if self.closed:
                return False
            time.sleep(0.1)
        return not self.closed
