"""`Node`: this machine as the node a local run's pods run on: a directory for their files, a
network namespace each on one bridge with the shared hosts file, the volumes they mount, and
every container's processes, their lines handed on as they are printed."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import containers, egress, volumes
from .downward import container_argv, container_env, container_of
from .jobs import pod_name
from .network import Network, records

# A failed container's log tail as the kubelet keeps it for `FallbackToLogsOnError`
# (kubernetes pkg/kubelet/container: MaxContainerTerminationMessageLogLines, ...LogLength)
TAIL_LINES, TAIL_BYTES = 80, 2048


class Node:
    """The node of the pods of `workloads` ((Job or Deployment, index), each given an address
    in that order), with the objects' Services, ConfigMaps and Secrets. Entered, it has made
    its mount points, the network and each pod's directory; left (or failing half-way
    there), it has undone what it made."""

    def __init__(
        self,
        objects: list[dict[str, Any]],
        workloads: list[tuple[dict[str, Any], int]],
        env: dict[str, str],
        secrets: dict[str, str],
        on_line: Callable[[str, str], None] | None,
        workdir: Path,
        private: bool,
        entrypoints: dict[str, list[str]],
    ) -> None:
        self.workloads, self.services = list(workloads), list[dict[str, Any]]()
        self.env, self.on_line = env, on_line  # (pod[/container], line) as each is printed
        self.workdir = workdir  # where commands run (an image's working dir)
        self.entrypoints = entrypoints  # image -> what it runs without a command
        # not under /tmp: each pod gets its own /tmp
        self.root = Path(tempfile.mkdtemp(prefix="aichor-pods-", dir="/var/tmp"))
        self.network = Network(self.root, [pod_name(w, i) for w, i in workloads], private)
        self.ips = self.network.ips
        self.files = PodFiles(self.root)  # (what each pod's containers wrote)
        self.volumes = volumes.Volumes(self.root, secrets)  # (the Secrets' values)
        self.volumes.add(objects)
        self.secrets = self.volumes.secrets
        self.mount_points = volumes.MountPoints([w for w, i in workloads if i == 0])
        self.lock = threading.Lock()  # guards `processes` and `tails`
        self.processes: dict[str, list[subprocess.Popen]] = {pod: [] for pod in self.ips}
        self.services.extend(o for o in objects if o["kind"] == "Service")
        # each container's process and the thread handing its lines to on_line
        self.tails: list[tuple[subprocess.Popen, threading.Thread]] = []
        self._made = contextlib.ExitStack()
        self.egress = egress.Egress(objects, self.root, self.network)  # (the stores)

    def __enter__(self) -> Node:
        with contextlib.ExitStack() as made:
            made.callback(shutil.rmtree, self.root, ignore_errors=True)
            made.enter_context(self.mount_points)
            made.callback(self.network.down)  # (a namespace not made yet is no error)
            self.network.up()
            made.enter_context(self.egress)
            for pod in self.ips:
                (self.root / pod / "tmp").mkdir(parents=True)
            self._made = made.pop_all()
        return self

    def __exit__(self, *exc: object) -> None:
        self._made.close()

    def add(
        self, objects: list[dict[str, Any]], workloads: list[tuple[dict[str, Any], int]]
    ) -> None:
        """More objects, created after the node was set up (`pulumi up` creating a sweep's
        later trials): their pods' namespaces, directories and mount points made now."""
        self.volumes.add(objects)
        self.services.extend(o for o in objects if o["kind"] == "Service")
        self.mount_points.add([w for w, i in workloads if i == 0])
        pods = [pod_name(w, i) for w, i in workloads]
        self.network.add(pods)
        with self.lock:
            self.workloads.extend(workloads)
            self.processes.update({pod: [] for pod in pods})
        for pod in pods:
            (self.root / pod / "tmp").mkdir(parents=True)

    def claim(self, name: str) -> Path:
        """The directory standing for a PersistentVolumeClaim (it outlives every pod)."""
        return self.volumes.claim(name)

    def exec(self, pod: str, *command: str) -> subprocess.CompletedProcess:
        """Run a command in a pod's network namespace (as `kubectl exec` would)."""
        return self.network.exec(pod, *command)

    def env_of(self, workload: dict[str, Any], index: int, name: str) -> dict[str, str]:
        """The env the spec gives container `name` of pod `index` (the node's beside it)."""
        pod = pod_name(workload, index)
        log = {"AICHOR_TERMINATION_LOG": str(self.root / pod / f"{name}.termination-log")}
        return {**container_env(workload, index, name, self.ips[pod], self.secrets), **log}

    def start(self, workload: dict[str, Any], index: int, name: str) -> subprocess.Popen:
        """Container `name` of a workload's pod `index`, started; its lines handed on."""
        pod = pod_name(workload, index)
        spec = workload["spec"]["template"]["spec"]
        main, env = container_of(spec, name), self.env_of(workload, index, name)
        command = container_argv(main, env, self.entrypoints)
        mounts = []
        for mount in main.get("volumeMounts", []):
            source = self.volumes.source(pod, spec, mount["name"])
            if source is not None:  # (its mount point: volumes.MountPoints)
                mounts.append((str(source), mount["mountPath"], bool(mount.get("readOnly"))))
        security = main.get("securityContext", {})
        process = containers.launch(
            self.network.ns(pod), pod, name, command, {**self.env, **env}, mounts, security,
            self.root, self.workdir,
        )  # fmt: skip
        # every line, with when it was printed (the API's pod logs), and to on_line
        prefix = pod if name == spec["containers"][0]["name"] else f"{pod}/{name}"
        args = (process, prefix, self.on_line, self.root / pod / f"{name}.log")
        tail = threading.Thread(target=containers.tail, args=args, daemon=True)
        with self.lock:
            self.processes[pod].append(process)
        tail.start()
        with self.lock:  # (started first: `settle` joins each one listed)
            self.tails.append((process, tail))
        return process

    def flush(self) -> None:
        """Every line the containers that have ended printed, handed on (a server's container
        runs until the cluster is left)."""
        with self.lock:
            tails = list(self.tails)
        for process, tail in tails:
            if process.poll() is not None:
                tail.join(5)

    def running(self, pods: list[str]) -> list[subprocess.Popen]:
        """The processes of `pods` that have not ended."""
        with self.lock:
            return [p for pod in pods for p in self.processes[pod] if p.poll() is None]

    def kill(self, pod: str) -> None:
        """What the end of a pod's container does: every process of the pod ends. Each
        container's `unshare` first, which takes its container with it (`--kill-child`) and
        says nothing; killed after its child (the namespace's processes in pid order, which
        wraps), it reported the child's SIGKILL: `unshare: sigprocmask unblock failed`."""
        for process in self.processes.get(pod, []):
            if process.poll() is None:
                process.kill()
                process.wait()
        self.network.kill(pod)  # (whatever else runs in the pod's network namespace)
        self.egress.stop(pod)

    def renew(self, pod: str) -> None:
        """A pod made again starts afresh: its own /tmp, image copy and files are new."""
        for path in (self.root / pod).iterdir():
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        (self.root / pod / "tmp").mkdir()

    def hosts(self, live: set[str]) -> None:
        """The hosts file: each pod of `live`'s names, and each Service's addresses."""
        lines = records(self.workloads, self.services, live, self.ips)
        self.network.hosts(lines + self.egress.hosts())


class PodFiles:
    """What a pod's containers wrote, under the node's `root`: their output, their termination
    messages."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def output(self, pod: str) -> str:
        """What a pod's containers have printed so far."""
        logs = sorted((self.root / pod).glob("*.out"))
        return "".join(log.read_text(errors="replace") for log in logs)

    def logs(self, pod: str, container: str) -> str:
        """What one container of a pod has printed (stdout and stderr, in the order written)."""
        path = self.root / pod / f"{container}.out"
        return path.read_text(errors="replace") if path.exists() else ""

    def ended_message(self, pod: str, container: dict[str, Any], code: int) -> str:
        """A container's termination message at its end, as its policy says (the log's tail
        of a failed one under `FallbackToLogsOnError`)."""
        policy = container.get("terminationMessagePolicy")
        tail = bool(code) and policy == "FallbackToLogsOnError"
        return self.termination_message(pod, container["name"], tail)

    def termination_message(self, pod: str, container: str, tail: bool = False) -> str:
        """What a container wrote to its termination message file (`/dev/termination-log`);
        `tail` (a failure under `FallbackToLogsOnError`), its log's tail when it wrote none,
        as the kubelet keeps it: the last 80 lines, at most 2 KiB."""
        path = self.root / pod / f"{container}.termination-log"
        written = path.read_text(errors="replace") if path.exists() else ""
        if written or not tail:
            return written
        lines = self.logs(pod, container).splitlines(keepends=True)[-TAIL_LINES:]
        return "".join(lines).encode()[-TAIL_BYTES:].decode(errors="ignore")
