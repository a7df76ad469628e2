"""Local runs: every replica of a rendered experiment as local processes, the way Kubernetes
would run its pods (`LocalCluster`), and what Kubernetes does with a pod template on the way
(downward API values, `$(VAR)` expansion of env values and commands).

Needs Linux and root (network namespaces with `ip netns`, `unshare`, bind mounts): each pod
gets an address of its own on a bridge, its own host name, /tmp and volumes. The commands run
with this machine's programs and Python environment, not the image's: a smoke test of the
experiment's code paths (rendezvous, env, ordering, following) before it costs GPUs."""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from shlex import quote as q
from typing import Any

INDEX_PATH = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"


def expand(text: str, mapping: dict[str, str]) -> str:
    """Kubernetes' expansion (k8s.io/kubernetes third_party/forked/golang/expansion): `$(VAR)`
    becomes the value of an earlier variable, `$$` becomes `$`, anything else stays."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2 : end]
                    out.append(mapping.get(name, f"$({name})"))
                    i = end + 1
                    continue
            out.append("$" + nxt)
            i += 2
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


def container_env(
    job: dict[str, Any],
    index: int,
    container: str | None = None,
    pod_ip: str | None = None,
    secrets: dict[tuple[str, str], str] | None = None,
) -> dict[str, str]:
    """The env Kubernetes gives a container of pod `index` of an Indexed Job; `secrets` holds
    the values of (Secret name, key) references."""
    spec = job["spec"]["template"]["spec"]
    main = _container(spec, container)
    env: dict[str, str] = {}
    for entry in main.get("env", []):
        if "valueFrom" in entry:
            source = entry["valueFrom"]
            if "fieldRef" in source:
                path = source["fieldRef"]["fieldPath"]
                env[entry["name"]] = {
                    INDEX_PATH: str(index),
                    "status.podIP": pod_ip or f"10.0.0.{index + 1}",
                    "metadata.namespace": job["metadata"]["namespace"],
                    # the Job controller names pod i `<job>-<i>-<5 random characters>`
                    "metadata.name": f"{job['metadata']['name']}-{index}-"
                    + hashlib.sha1(f"{job['metadata']['name']}{index}".encode()).hexdigest()[:5],
                }[path]
            elif "secretKeyRef" in source and secrets and _key(source) in secrets:
                env[entry["name"]] = secrets[_key(source)]
            else:  # (a Secret of the user's: not here)
                env[entry["name"]] = f"<{entry['name']} from {sorted(source)[0]}>"
        else:
            env[entry["name"]] = expand(entry.get("value", ""), env)
    env.setdefault("JOB_COMPLETION_INDEX", str(index))  # the Job controller adds it otherwise
    env["HOSTNAME"] = f"{job['metadata']['name']}-{index}"  # the pod's host name
    return env


def _key(source: dict[str, Any]) -> tuple[str, str]:
    """The (Secret name, key) an env value's `secretKeyRef` names."""
    return source["secretKeyRef"]["name"], source["secretKeyRef"]["key"]


def _container(pod_spec: dict[str, Any], name: str | None) -> dict[str, Any]:
    containers = pod_spec["containers"] + pod_spec.get("initContainers", [])
    return next(c for c in containers if name is None or c["name"] == name)


class LocalCluster:
    """Run every replica of a rendered experiment as local processes, the way Kubernetes would
    run its pods: native sidecars (init containers with `restartPolicy: Always`) beside the
    others, init containers in turn, then the main containers, each with its env and host name.

    Each pod gets a network namespace of its own (`ip netns`, root only) with its own address
    on a bridge, a private /tmp, and its volumes mounted where the pod spec says: projected
    Secret and ConfigMap files with their modes, an `emptyDir` of its own, and each
    PersistentVolumeClaim as one directory every pod that claims it shares (`claim()`). One
    /etc/hosts, shared by all pods and trusted alone (as the cluster DNS is for its own names),
    resolves every pod host and every Service. A pod's names enter that file once it is
    scheduled (it has an address: the headless Service publishes not-ready addresses) and
    leave it when its main container has exited, its sidecars have had TERM (then KILL after
    the grace period) and its processes are killed, as a finished pod leaves the Service's
    DNS records. Deployment pods run from the start until the cluster is left. The Job
    controller's `parallelism` holds, and so does a gang scheduler's: a pod of a PodGroup is
    scheduled only once `minMember` pods of that group exist. `secrets` gives the values of
    the generated Secret's keys (they are never rendered).

    `run()` creates every Job at once; `start(job)` creates one, for callers that create them
    in an order (tests/pulumi_up.py), and `job_status(job)` reports what the Job controller
    would (`active`, `ready`, `succeeded`, `failed`, `conditions`).
    """

    GRACE_SECONDS = 30

    def __init__(
        self,
        objects: list[dict[str, Any]],
        env: dict[str, str],
        secrets: dict[str, str] | None = None,
        on_line: Callable[[str, str], None] | None = None,
        workdir: Path | None = None,
        private: bool = False,
        kueue_quota: int | None = None,
    ):
        self.jobs = [o for o in objects if o["kind"] == "Job"]
        # Kueue: a Job with a queue-name label is suspended until its Workload (the Job's pods
        # at once) fits the queue's quota of pods (None: any); finished, it frees its share.
        self.kueue_quota = kueue_quota
        self.admitted: dict[str, int] = {}
        self.deployments = [o for o in objects if o["kind"] == "Deployment"]
        self.services = [o for o in objects if o["kind"] == "Service"]
        self.config = {
            o["metadata"]["name"]: o.get("data", {}) for o in objects if o["kind"] == "ConfigMap"
        }
        self.secrets = {
            (o["metadata"]["name"], key): value
            for o in objects
            if o["kind"] == "Secret"
            for key, value in (secrets or {}).items()
        }
        self.env = env
        self.on_line = on_line  # (pod[/container], line) as each line is printed
        self.tails: list[threading.Thread] = []  # the threads handing lines to on_line
        self.workdir = workdir or Path.cwd()  # where commands run (an image's working dir)
        self.lock = threading.Lock()
        self.results: dict[str, subprocess.CompletedProcess] = {}
        self.id = uuid.uuid4().hex[:6]
        self.root = Path(
            tempfile.mkdtemp(prefix="aichor-pods-", dir="/var/tmp")
        )  # not under /tmp: each pod gets its own /tmp
        # `ip netns exec` mounts /etc/netns/<ns>/* over /etc; in a mount namespace of our own
        # (`private`: a user namespace's) the hosts file is mounted over /etc/hosts once.
        self.private = private
        self.etc = Path("/etc/netns")
        self.pods = [(job, i) for job in self.jobs for i in range(job["spec"]["completions"])]
        self.servers = [(d, i) for d in self.deployments for i in range(d["spec"]["replicas"])]
        # The Job controller keeps at most `parallelism` pods of a Job running at once.
        self.slots = {
            job["metadata"]["name"]: threading.BoundedSemaphore(job["spec"]["parallelism"])
            for job in self.jobs
        }
        # PodGroup name -> (minMember, whether succeeded pods count: Volcano's do)
        self.gangs = {
            o["metadata"]["name"]: (int(o["spec"]["minMember"]), "volcano" in o["apiVersion"])
            for o in objects
            if o["kind"] == "PodGroup"
        }
        self.created: set[str] = set()  # Job pods the Job controller has made
        every = self.servers + self.pods
        self.ips = {_pod(w, i): f"10.77.0.{n + 2}" for n, (w, i) in enumerate(every)}
        self.live = {_pod(d, i) for d, i in self.servers}  # Job pods: once scheduled
        # pending → init → running → succeeded | failed, per Job pod
        self.state = {_pod(job, i): "pending" for job, i in self.pods}
        self.started: dict[str, list[threading.Thread]] = {}
        self.closed = False
        self.made: list[Path] = []
        self.processes: dict[str, list[subprocess.Popen]] = {pod: [] for pod in self.ips}

    @staticmethod
    def available() -> bool:
        """Whether this process may make network namespaces (root): it makes one and deletes
        it, named for this call alone (two probes at once, a test process each, must not
        see each other's as a refusal)."""
        name = f"aichor-probe-{uuid.uuid4().hex[:12]}"
        try:
            made = subprocess.run(["ip", "netns", "add", name], capture_output=True).returncode == 0
        except FileNotFoundError:
            return False
        if made:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        return made

    def claim(self, name: str) -> Path:
        """The directory standing for a PersistentVolumeClaim (it outlives every pod)."""
        path = self.root / "claims" / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def exec(self, pod: str, *command: str) -> subprocess.CompletedProcess:
        """Run a command in a pod's network namespace (as `kubectl exec` would)."""
        argv = ["ip", "netns", "exec", self._ns(pod), *command]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)

    def _ns(self, pod: str | None = None) -> str:
        return f"aichor-{self.id}-" + ("switch" if pod is None else str(list(self.ips).index(pod)))

    def __enter__(self) -> LocalCluster:
        def ip(*args: str, ns: str | None = None) -> None:
            prefix = ["ip", "netns", "exec", ns] if ns else []
            subprocess.run([*prefix, "ip", *args], check=True, capture_output=True)

        self._mount_points()
        switch = self._ns()
        ip("netns", "add", switch)
        ip("link", "add", "br0", "type", "bridge", ns=switch)
        ip("link", "set", "br0", "up", ns=switch)
        hosts = self.root / "hosts"
        hosts.write_text("")
        if self.private:
            (self.root / "nsswitch.conf").write_text("hosts: files\n")
            for name in ("hosts", "nsswitch.conf"):
                if Path("/etc", name).exists():
                    subprocess.run(
                        ["mount", "--bind", self.root / name, f"/etc/{name}"], check=True
                    )
        for n, pod in enumerate(self.ips):
            ns = self._ns(pod)
            ip("netns", "add", ns)
            ip("link", "set", "lo", "up", ns=ns)
            outside = f"a{self.id}{n}"
            ip("link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns", ns)
            ip("link", "set", outside, "netns", switch)
            ip("link", "set", outside, "master", "br0", "up", ns=switch)
            ip("addr", "add", f"{self.ips[pod]}/24", "dev", "eth0", ns=ns)
            ip("link", "set", "eth0", "up", ns=ns)
            # A pod's default route, as every pod network gives one: programs that find their
            # own address by the route out (Ray's node IP) find eth0's.
            ip("route", "add", "default", "dev", "eth0", ns=ns)
            if not self.private:  # one hosts file for every pod (hard links)
                etc = self.etc / ns
                etc.mkdir(parents=True, exist_ok=True)
                (etc / "nsswitch.conf").write_text("hosts: files\n")
                os.link(hosts, etc / "hosts")
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
        for pod in self.ips:
            subprocess.run(["ip", "netns", "del", self._ns(pod)], check=False)
            shutil.rmtree(self.etc / self._ns(pod), ignore_errors=True)
        subprocess.run(["ip", "netns", "del", self._ns()], check=False)
        self._remove_files()

    def _remove_files(self) -> None:
        """The pods' files, and the mount points made for them."""
        shutil.rmtree(self.root, ignore_errors=True)
        for path in reversed(self.made):
            path.rmdir()

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
        for tail in list(self.tails):
            tail.join(5)

    def start(
        self, name: str, timeout: float = 120, held: dict[str, tuple[str, str]] | None = None
    ) -> None:
        """Create the Job `name`: its pods from now on, as the Job controller makes them."""
        job = next(j for j in self.jobs if j["metadata"]["name"] == name)
        threads = [
            threading.Thread(
                target=self._replica,
                args=(job, i, (held or {}).get(_pod(job, i)), timeout),
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
        job = next(j for j in self.jobs if j["metadata"]["name"] == name)
        states = [self.state[_pod(job, i)] for i in range(job["spec"]["completions"])]
        status: dict[str, Any] = {
            "active": sum(s in ("init", "running") for s in states),
            "ready": sum(self.ready(_pod(job, i)) for i in range(len(states))),
            "succeeded": states.count("succeeded"),
            "failed": states.count("failed"),
        }
        if ended := _ended(job, states):
            status["conditions"] = [{"type": ended, "status": "True"}]
        return {k: v for k, v in status.items() if v}  # the controller omits zero counts

    def _job_ended(self, name: str) -> bool:
        job = next(j for j in self.jobs if j["metadata"]["name"] == name)
        return _ended(job, [self.state[_pod(job, i)] for i in range(job["spec"]["completions"])])

    def ready(self, pod: str) -> bool:
        """Whether the pod is Ready: its main container runs and its readiness probe (a TCP
        port, the only kind rendered) accepts a connection from the node."""
        if self.state.get(pod) != "running":
            return False
        job = next(j for j, i in self.pods if _pod(j, i) == pod)
        probe = job["spec"]["template"]["spec"]["containers"][0].get("readinessProbe")
        if not probe:
            return True
        port = probe["tcpSocket"]["port"]
        connect = f"import socket; socket.create_connection(('{self.ips[pod]}', {port}), 2)"
        return self.exec(pod, sys.executable, "-c", connect).returncode == 0

    def _replica(
        self, job: dict[str, Any], index: int, hold: tuple[str, str] | None, timeout: float
    ) -> None:
        deadline = time.monotonic() + timeout
        while hold and hold[1] not in self._output(hold[0]) and time.monotonic() < deadline:
            time.sleep(0.2)
        while not self._admitted(job):  # Kueue keeps the Job suspended
            if self.closed:
                return
            time.sleep(0.1)
        with self.slots[job["metadata"]["name"]]:  # the Job controller makes the pod
            pod, gang = _pod(job, index), gang_of(job)
            with self.lock:
                self.created.add(pod)
            while gang and not self._gang_holds(gang):  # not scheduled before its gang
                if self.closed:
                    return
                time.sleep(0.1)
            if self.closed:
                return
            with self.lock:  # scheduled: it has an address, the Service publishes it
                self.state[pod] = "init"
                self.live.add(pod)
                self._write()
            spec = job["spec"]["template"]["spec"]
            sidecars = []
            for init in spec.get("initContainers", []):
                if init.get("restartPolicy") == "Always":
                    sidecars.append(self._start(job, index, init["name"]))
                    continue
                result = self._wait(self._start(job, index, init["name"]))
                if result.returncode != 0:
                    self._stop(sidecars)
                    self._finish(pod, result)
                    return
            main = self._start(job, index, spec["containers"][0]["name"])
            self.state[pod] = "running"
            result = self._wait(main)
            self._stop(sidecars)
            self._finish(pod, result)

    def _admitted(self, job: dict[str, Any]) -> bool:
        """Whether Kueue has admitted the Job (or it is queued nowhere): its Workload counts
        the Job's pods at once, min(parallelism, completions), as Kueue's `podsCount`."""
        name, spec = job["metadata"]["name"], job["spec"]
        if self._admitted_already(job):
            return True
        with self.lock:
            if name not in self.admitted:
                pods = min(spec["parallelism"], spec["completions"])
                used = sum(self.admitted.values())
                if self.kueue_quota is not None and used + pods > self.kueue_quota:
                    return False
                self.admitted[name] = pods
            return True

    def _gang_holds(self, gang: str) -> bool:
        """Whether the gang scheduler schedules the gang's pods: `minMember` of them exist."""
        return self._gang_count(gang) >= self.gangs[gang][0]

    def _gang_count(self, gang: str) -> int:
        """The gang's pods that count towards `minMember`: made by the Job controller and, as
        the coscheduling plugin sees them, not ended (kube-scheduler's pod informer leaves
        Succeeded and Failed pods out); Volcano counts succeeded ones too."""
        ended = ("failed",) if self.gangs[gang][1] else ("succeeded", "failed")
        with self.lock:
            members = [
                pod
                for job, i in self.pods
                if gang_of(job) == gang and (pod := _pod(job, i)) in self.created
            ]
            return sum(self.state[pod] not in ended for pod in members)

    def why_pending(self, pod: str) -> str:
        """Why a pending pod is not running yet, as `kubectl describe` would put it."""
        job = next(j for j, i in self.pods if _pod(j, i) == pod)
        if not self._admitted_already(job):
            return "its Job is suspended until Kueue admits it"
        if pod not in self.created:
            return f"not created: the Job runs {job['spec']['parallelism']} pods at a time"
        gang = gang_of(job)
        if gang and not self._gang_holds(gang):
            size = self.gangs[gang][0]
            return f"unschedulable: PodGroup {gang} has {self._gang_count(gang)} of {size} pods"
        return "scheduled"

    def _admitted_already(self, job: dict[str, Any]) -> bool:
        """Whether the Job is queued nowhere, or Kueue has admitted it already."""
        labels = job["metadata"].get("labels") or {}
        return KUEUE_QUEUE not in labels or job["metadata"]["name"] in self.admitted

    def _server(self, deployment: dict[str, Any], index: int) -> None:
        """A Deployment's pod: every container at once, until the cluster is left."""
        spec = deployment["spec"]["template"]["spec"]
        for container in spec["containers"]:
            self._start(deployment, index, container["name"])

    def _stop(self, sidecars: list[subprocess.Popen]) -> None:
        """What the kubelet does to native sidecars once the main container has ended: TERM
        to each container's first process, KILL after the grace period."""
        for process in sidecars:
            _signal_init(process, signal.SIGTERM)
        for process in sidecars:
            try:
                process.wait(self.GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                _signal_init(process, signal.SIGKILL)
                process.wait()

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
        pod = _pod(workload, index)
        spec = workload["spec"]["template"]["spec"]
        main = _container(spec, name)
        env = container_env(workload, index, name, self.ips[pod], self.secrets)
        command = [expand(part, env) for part in main["command"] + main.get("args", [])]
        private = self.root / pod / "tmp"
        # What the test itself runs from (a checkout or virtualenv under /tmp) stays visible
        # in the pod's private /tmp, as an image's own files would be.
        tmp = [(f"/tmp/{top}", str(private / top), False) for top in _under_tmp(self.workdir)]
        tmp += [(str(private), "/tmp", False)]
        volumes = []
        for mount in main.get("volumeMounts", []):
            source = self._volume(pod, spec, mount["name"])
            if source is not None:  # (its mount point was made by _mount_points)
                volumes.append((str(source), mount["mountPath"], bool(mount.get("readOnly"))))
        # A host name of its own (a UTS namespace), as a pod has: gethostname() is the pod's;
        # processes of its own (a PID namespace, as a container has): `ps`, `pkill` or
        # `ray stop` see this container's alone, and its command is its first process; the
        # working directory as its image's copy (an overlay: what it writes stays its own).
        own = self._own_copy(pod, name)
        setup = f"hostname {pod} && {_binds(tmp)} && {own} && {_binds(volumes)}"
        argv = ["ip", "netns", "exec", self._ns(pod), *CONTAINER]
        argv += ["/bin/sh", "-c", f'{setup} && exec "$@"']
        argv += ["pod", *_privileges(main.get("securityContext", {})), *command]
        # Output goes to files as it is printed, so that a held pod can watch for a line.
        out, err = (self.root / pod / f"{name}.{kind}" for kind in ("out", "err"))
        with out.open("w") as stdout, err.open("w") as stderr:
            process = subprocess.Popen(
                argv, env={**self.env, **env}, stdout=stdout, stderr=stderr, cwd=self.workdir
            )
        process.paths = (out, err)  # type: ignore[attr-defined]
        with self.lock:
            self.processes[pod].append(process)
        if self.on_line is not None:
            main_name = spec["containers"][0]["name"]
            prefix = pod if name == main_name else f"{pod}/{name}"
            tail = threading.Thread(target=self._tail, args=(process, prefix), daemon=True)
            tail.start()
            with self.lock:
                self.tails.append(tail)
        return process

    def _own_copy(self, pod: str, container: str) -> str:
        """Shell that lays an overlay over the working directory, so that the container reads
        the manifest's directory (the image built from it) and keeps what it writes to
        itself, as each container on a cluster has its own copy of its image; then goes
        there. Where no overlay can be made, the directory is shared (and it says so)."""
        shared = "aichor: the working directory is shared with the other pods (no overlay)"
        workdir = q(str(self.workdir))
        if self.workdir.resolve() == Path("/"):
            return f"echo {q(shared)} >&2 && cd /"
        own = self.root / pod / "image" / container  # (no comma or colon: safe in -o)
        lower, upper, work = (q(str(own / part)) for part in ("lower", "upper", "work"))
        options = q(f"lowerdir={own / 'lower'},upperdir={own / 'upper'},workdir={own / 'work'}")
        overlay = (
            f"mkdir -p {lower} {upper} {work} && mount --bind {workdir} {lower} && "
            f"mount -t overlay overlay -o {options} {workdir}"
        )
        return f"{{ {overlay} || echo {q(shared)} >&2; }} && cd {workdir}"

    def _tail(self, process: subprocess.Popen, prefix: str) -> None:
        """Hand each line a container prints to `on_line` as it comes (both streams)."""
        assert self.on_line is not None
        offsets, partial = [0, 0], ["", ""]
        while True:
            ended = process.poll() is not None
            for k, path in enumerate(process.paths):  # type: ignore[attr-defined]
                try:
                    with path.open("rb") as stream:
                        stream.seek(offsets[k])
                        data = stream.read()
                except FileNotFoundError:  # the cluster was left
                    return
                offsets[k] += len(data)
                *lines, partial[k] = (partial[k] + data.decode(errors="replace")).split("\n")
                for line in lines + ([partial[k]] if ended and partial[k] else []):
                    try:
                        self.on_line(prefix, line)
                    except OSError:  # where lines go is gone (a closed pipe): stop handing
                        return
            if ended:
                return
            time.sleep(0.1)

    @staticmethod
    def _wait(process: subprocess.Popen) -> subprocess.CompletedProcess:
        """A container's end, however long it runs (leaving the cluster kills what still
        runs: the caller's timeout bounds a run)."""
        process.wait()
        out, err = process.paths  # type: ignore[attr-defined]
        # (gone when the cluster was left while this pod still ran)
        text = [f.read_text(errors="replace") if f.exists() else "" for f in (out, err)]
        return subprocess.CompletedProcess(process.args, process.returncode, *text)

    def _mount_points(self) -> None:
        """Bind mounts need their targets to exist: make every directory a pod mounts a volume
        at (a memory-backed emptyDir is not emulated), and remember to remove them."""
        targets = set()
        for workload in self.jobs + self.deployments:
            spec = workload["spec"]["template"]["spec"]
            for container in spec["containers"] + spec.get("initContainers", []):
                for mount in container.get("volumeMounts", []):
                    if _emulated(_volume(spec, mount["name"])):
                        targets.add(Path(mount["mountPath"]))
        for target in sorted(targets):
            for directory in reversed([p for p in (target, *target.parents) if not p.exists()]):
                try:
                    directory.mkdir()
                except OSError as error:  # (nothing else exists yet)
                    self._remove_files()
                    raise LocalUnavailable(
                        f"a pod mounts a volume at {target}, and {directory} cannot be made "
                        f"here: {error.strerror}"
                    ) from None
                self.made.append(directory)

    def _volume(self, pod: str, spec: dict[str, Any], name: str) -> Path | None:
        """Where a volume's files are: a projected (or ConfigMap) volume's, written once per
        pod with their mode; a pod's own emptyDir; a claim's shared directory. None: not emulated
        (a memory-backed /dev/shm)."""
        volume = _volume(spec, name)
        if not _emulated(volume):
            return None
        if "persistentVolumeClaim" in volume:
            return self.claim(volume["persistentVolumeClaim"]["claimName"])
        path = self.root / pod / "volumes" / name
        if "emptyDir" in volume:
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(0o777)
            return path
        with self.lock:
            if path.exists():
                return path
            if "configMap" in volume:  # a ConfigMap's keys (or the items named) as files
                ref = volume["configMap"]
                data = self.config[ref["name"]]
                items = ref.get("items") or [{"key": k, "path": k} for k in data]
                volume = {"projected": {"sources": [{"configMap": {**ref, "items": items}}]}}
            projected = volume["projected"]
            for source in projected["sources"]:
                kind, ref = next(iter(source.items()))
                for item in ref["items"]:
                    if kind == "secret":
                        value = self.secrets[(ref["name"], item["key"])]
                    else:
                        value = self.config[ref["name"]][item["key"]]
                    target = path / item["path"]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_text(value)
                    target.chmod(item.get("mode", projected.get("defaultMode", 0o644)))
        return path

    def _kill(self, pod: str) -> None:
        """What the end of a pod's container does: every process of the pod ends."""
        pids = subprocess.run(
            ["ip", "netns", "pids", self._ns(pod)], capture_output=True, text=True, check=False
        ).stdout.split()
        for pid in pids:
            subprocess.run(["kill", "-9", pid], capture_output=True, check=False)
        for process in self.processes.get(pod, []):
            if process.poll() is None:
                process.kill()
                process.wait()

    def _finish(self, pod: str, result: subprocess.CompletedProcess) -> None:
        self._kill(pod)
        with self.lock:
            self.results[pod] = result
            self.state[pod] = "succeeded" if result.returncode == 0 else "failed"
            self.live.discard(pod)
            job = pod.rsplit("-", 1)[0]
            if job in self.admitted and self._job_ended(job):  # its Workload finished
                del self.admitted[job]
            self._write()

    def _write(self) -> None:
        lines = ["127.0.0.1 localhost"]
        for job, i in self.pods:
            pod = _pod(job, i)
            if pod in self.live:  # (the short name: the kubelet's /etc/hosts line of the pod)
                lines.append(f"{self.ips[pod]} {self._fqdn(job, i)} {pod}")
        for service in self.services:
            selector = service["spec"].get("selector") or {}
            metadata = service["metadata"]
            name = f"{metadata['name']}.{metadata['namespace']}.svc.cluster.local"
            for workload, i in self.servers + self.pods:
                labels = dict(workload["spec"]["template"]["metadata"]["labels"])
                if workload["kind"] == "Job":  # the Job controller labels pods with their index
                    labels["batch.kubernetes.io/job-completion-index"] = str(i)
                if _pod(workload, i) in self.live and selector.items() <= labels.items():
                    lines.append(f"{self.ips[_pod(workload, i)]} {name}")
                    if service["spec"].get("clusterIP") != "None":
                        break  # a ClusterIP: one address, as kube-proxy's virtual IP
        path = self.root / "hosts"
        with path.open("r+") as f:  # in place: every pod's hard link sees this inode
            f.truncate(0)
            f.write("\n".join(lines) + "\n")

    @staticmethod
    def _fqdn(job: dict[str, Any], index: int) -> str:
        spec = job["spec"]["template"]["spec"]
        namespace = job["metadata"]["namespace"]
        return f"{_pod(job, index)}.{spec['subdomain']}.{namespace}.svc.cluster.local"


# `unshare` waits for the container's first process and exits as it did; if `unshare` is
# killed, so is the container.
CONTAINER = ["unshare", "--uts", "--pid", "--fork", "--mount-proc", "--kill-child=KILL"]


def _signal_init(process: subprocess.Popen, number: int) -> None:
    """Signal a container's first process (the child of its `unshare`), as the kubelet does;
    being the first process of its PID namespace, it ignores TERM unless it handles it."""
    with contextlib.suppress(OSError, ValueError):
        children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
        os.kill(int(children[0]), number)


def _binds(mounts: list[tuple[str, str, bool]]) -> str:
    """Shell that bind-mounts each (source, target, read-only) in turn."""
    return " && ".join(
        [
            f"mkdir -p {q(target)} && mount --rbind {q(source)} {q(target)}"
            + (f" && mount -o remount,bind,ro {q(target)}" if read_only else "")
            for source, target, read_only in mounts
        ]
        or ["true"]
    )


def _under_tmp(workdir: Path) -> list[str]:
    """The top folders under /tmp that the pods need to see (a pod's /tmp is its own): the
    working directory and this process's Python, as an image holds its own files."""
    paths = [workdir, Path.cwd(), Path(sys.prefix), Path(sys.executable).resolve()]
    parts = [q.resolve().parts for q in paths]
    return sorted({p[2] for p in parts if p[:2] == ("/", "tmp") and len(p) > 2})


def _privileges(security: dict[str, Any]) -> list[str]:
    """What the container runtime does with a security context: capabilities outside
    `add` are dropped (from the bounding set, so root has them no more) and, without
    privilege escalation, no_new_privs is set. Needs util-linux's setpriv."""

    capabilities = security.get("capabilities", {})
    if capabilities.get("drop") != ["ALL"] or not shutil.which("setpriv"):
        return []
    keep = "".join(f",+{c.lower()}" for c in capabilities.get("add", []))
    command = ["setpriv", f"--bounding-set=-all{keep}", f"--inh-caps=-all{keep}"]
    if security.get("allowPrivilegeEscalation") is False:
        command.append("--no-new-privs")
    return command


def _ended(job: dict[str, Any], states: list[str]) -> str | None:
    """The Job's finished condition (Complete, Failed) from its pods' states, if any."""
    if states.count("succeeded") == len(states):
        return "Complete"
    if states.count("failed") > job["spec"].get("backoffLimit", 6):
        return "Failed"
    return None


def gang_of(job: dict[str, Any]) -> str | None:
    """The PodGroup a Job's pods belong to (coscheduling's label, Volcano's annotation)."""
    metadata = job["spec"]["template"]["metadata"]
    return (metadata.get("labels") or {}).get("scheduling.x-k8s.io/pod-group") or (
        metadata.get("annotations") or {}
    ).get("scheduling.k8s.io/group-name")


def _pod(job: dict[str, Any], index: int) -> str:
    return f"{job['metadata']['name']}-{index}"


def _emulated(volume: dict[str, Any]) -> bool:
    """Whether a local pod gets the volume: all but a memory-backed emptyDir (/dev/shm)."""
    return volume.get("emptyDir", {}).get("medium") != "Memory"


def _volume(pod_spec: dict[str, Any], name: str) -> dict[str, Any]:
    return next(v for v in pod_spec.get("volumes", []) if v["name"] == name)


# --- a local run of an experiment (`aichor-iac run --local`) ---------------------------------


class LocalUnavailable(RuntimeError):
    """This machine cannot run pods locally (what it lacks is the message)."""


def missing() -> list[str]:
    """What this machine lacks for a local run (nothing: it can run one)."""
    lacks = []
    if not sys.platform.startswith("linux"):
        lacks.append("Linux (network namespaces)")
    elif os.geteuid() != 0 and not _user_namespaces():
        lacks.append(
            "root or unprivileged user namespaces, for network namespaces and bind mounts "
            "(run it with sudo, or allow them: sysctl kernel.unprivileged_userns_clone=1 "
            "user.max_user_namespaces=15000; on Ubuntu 24.04 also "
            "kernel.apparmor_restrict_unprivileged_userns=0)"
        )
    lacks += [
        f"`{tool}` ({package})"
        for tool, package in (("ip", "iproute2"), ("unshare", "util-linux"), ("mount", "mount"))
        if shutil.which(tool) is None
    ]
    return lacks


# A user namespace where this user is root, with mount, network and PID namespaces of its
# own: the pods' namespaces, mounts and processes live and die inside it.
UNSHARE = ["unshare", "--user", "--map-root-user", "--mount", "--net", "--pid", "--fork"]


def _user_namespaces() -> bool:
    try:
        return subprocess.run([*UNSHARE, "true"], capture_output=True).returncode == 0
    except FileNotFoundError:
        return False


def run_experiment(
    manifest: Any,
    settings: Any = None,
    *,
    name: str | None = None,
    replicas: int | None = None,
    timeout: float = 3600,
    on_line: Callable[[str, str], None] | None = None,
    on_progress: Callable[[dict[str, str]], None] | None = None,
) -> int:
    """Run every replica of the experiment (a manifest, custom resource or function's) as
    local processes, with the env, host names, ordering, waiting and following they would
    have on the cluster; `replicas` caps each group's count and masks GPUs off. The exit
    status: 0 once every Job the experiment's success needs has succeeded, else the first
    failure's. Commands run in the manifest's directory (AIchor builds the image from the
    repository it is in), else here. As root, the pods' namespaces are made in this
    machine's; otherwise in a user namespace of the run's own. LocalUnavailable when this
    machine cannot (what it lacks). `on_line(pod, line)` gets each line as it is printed,
    `on_progress(states)` each pod's state (pending, init, running, succeeded, failed)
    whenever one changes."""
    from . import engine, planning
    from .settings import Settings

    if lacks := missing():
        raise LocalUnavailable("a local run needs " + ", ".join(lacks))
    settings = settings or Settings()
    if replicas is not None:
        manifest = _capped(manifest, replicas)
    experiment = name or settings.experiment_name or manifest.name or "local"
    plan = planning.blueprint(manifest, settings, experiment).plan
    if plan.endless:
        raise LocalUnavailable(
            "a RayCluster runs until destroyed: run a RayJob (or a manifest) locally"
        )
    objects = engine.render(manifest, settings=settings, name=experiment)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/")}
    if replicas is not None and glob.glob("/dev/nvidia[0-9]*"):
        # A smoke test: no process takes a GPU of this machine. (Only where there are any:
        # Paddle's launcher takes any CUDA_VISIBLE_DEVICES for a GPU job.)
        env["CUDA_VISIBLE_DEVICES"] = ""
    secret = next((o for o in objects if o["kind"] == "Secret"), None)
    source = Path(manifest._source)
    run = Run(
        objects=objects,
        env=env,
        secrets=_secret_values(list((secret or {}).get("stringData", {}))),
        workdir=str(source.parent if source.is_file() else Path.cwd()),  # as AIchor's image
        needed=sorted(f"{experiment}-{role}" for role in plan.completes),
        # The pods others wait to be up (a Ray head, MPI's workers) decide too: their failure
        # leaves the rest waiting, on a cluster up to aichor:peerWaitSeconds.
        gates=sorted(f"{experiment}-{g.role}" for g in plan.groups if g.gates),
        count=sum(g.count for g in plan.groups if g.role in plan.completes),
        timeout=timeout,
    )
    if os.geteuid() == 0:
        return run.drive(on_line, on_progress)
    return _in_user_namespace(run, on_line, on_progress)


@dataclasses.dataclass
class Run:
    """A rendered experiment to run locally: its objects, the pods' base env, the generated
    Secret's values, where commands run, which Jobs' pods (`count` of them) must succeed, and
    which Jobs' failure fails it at once (theirs and the gates')."""

    objects: list[dict[str, Any]]
    env: dict[str, str]
    secrets: dict[str, str]
    workdir: str
    needed: list[str]
    gates: list[str]
    count: int
    timeout: float

    def drive(
        self,
        on_line: Callable[[str, str], None] | None,
        on_progress: Callable[[dict[str, str]], None] | None,
        private: bool = False,
    ) -> int:
        """Create every Job, wait for the result, leave the cluster; the exit status."""
        workdir = Path(self.workdir)
        cluster = LocalCluster(self.objects, self.env, self.secrets, on_line, workdir, private)
        with _terminated_as_exit(), cluster:
            for job in cluster.jobs:
                cluster.start(job["metadata"]["name"], self.timeout)
            deadline, states = time.monotonic() + self.timeout, {}
            codes: list[int] = []  # the exit codes of the pods that must succeed
            failures: list[int] = []  # the deciding pods' failures, in the order they ended
            deciding = {*self.needed, *self.gates}
            while time.monotonic() < deadline:  # until the result is known: done, or a failure
                if on_progress is not None and states != cluster.state:
                    states = dict(cluster.state)
                    on_progress(states)
                results = list(cluster.results.items())
                codes = [r.returncode for p, r in results if job_of(p) in self.needed]
                # (a pod runs once here: no Job retries)
                failures = [
                    r.returncode for p, r in results if r.returncode and job_of(p) in deciding
                ]
                if len(codes) == self.count or failures:
                    break
                time.sleep(0.2)
            if not failures:  # the followers stop by themselves: let them, briefly
                cluster.settle(timeout=10)
            if on_progress is not None:
                on_progress(dict(cluster.state))
        if failures:  # a signal's death as a shell reports it (128 + the signal)
            return 128 - failures[0] if failures[0] < 0 else failures[0]
        return 0 if len(codes) == self.count else 124  # done, or the timeout was reached


def _in_user_namespace(
    run: Run,
    on_line: Callable[[str, str], None] | None,
    on_progress: Callable[[dict[str, str]], None] | None,
) -> int:
    """Without root: the run in a child process inside a user namespace (`_child`), the
    rendered experiment on its standard input, its lines and progress back as JSON lines. The
    child leaving (or being killed) ends every pod with it: they are in its PID namespace."""
    root = tempfile.mkdtemp(prefix="aichor-root-", dir="/var/tmp")  # the child's own root
    code = f"import aichor_iac.local as local; local._child({root!r})"
    # --kill-child: a TERM to the child if `unshare` is ended, so that it leaves cleanly
    argv = [*UNSHARE, "--mount-proc", "--kill-child=TERM", sys.executable, "-c", code]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, root, ignore_errors=True)  # (the mount was the child's)
        child = stack.enter_context(
            subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
            )
        )
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write(json.dumps(dataclasses.asdict(run)))
        child.stdin.close()
        try:
            for message in child.stdout:
                kind, *value = json.loads(message)
                if kind == "line" and on_line is not None:
                    on_line(*value)
                elif kind == "progress" and on_progress is not None:
                    on_progress(*value)
                elif kind == "unavailable":
                    raise LocalUnavailable(*value)
        finally:
            if child.poll() is None:
                child.terminate()
            status = child.wait()
    return status


def _child(root: str) -> None:
    """The run inside the user namespace (root there): a root directory of its own, so that a
    volume can be mounted where no directory exists yet (`/aichor/function`), then the run."""
    run = Run(**json.load(sys.stdin))
    lock = threading.Lock()

    def send(*message: Any) -> None:
        with lock:
            print(json.dumps(message), flush=True)

    _own_root(Path(root))
    try:
        status = run.drive(
            lambda pod, line: send("line", pod, line),
            lambda states: send("progress", states),
            private=True,
        )
    except LocalUnavailable as error:
        send("unavailable", str(error))
        status = 2
    sys.exit(status)


def _own_root(root: Path) -> None:
    """Change root to a tmpfs holding a bind mount of each entry of `/` (an empty tmpfs at
    /run, for `ip netns`): this namespace's root may then make directories at the top, where volumes
    are mounted. The tmpfs is unbindable, so that binding /var (where it is) skips it."""
    subprocess.run(["mount", "-t", "tmpfs", "aichor-root", root], check=True)
    subprocess.run(["mount", "--make-unbindable", root], check=True)
    for entry in sorted(os.scandir("/"), key=lambda e: e.name):
        target = root / entry.name
        if entry.is_symlink():
            target.symlink_to(os.readlink(entry.path))
        elif entry.name == "run":  # (a mount of its own: `ip netns` binds /run/netns)
            target.mkdir()
            subprocess.run(["mount", "-t", "tmpfs", "aichor-run", target], check=True)
        elif not entry.is_dir():
            target.touch()
            subprocess.run(["mount", "--bind", entry.path, target], check=True)
        else:
            target.mkdir()
            subprocess.run(["mount", "--rbind", entry.path, target], check=True)
    cwd = os.getcwd()
    os.chroot(root)
    os.chdir(cwd)


def job_of(pod: str) -> str:
    """The Job a pod (`<job>-<index>`) belongs to."""
    return pod.rsplit("-", 1)[0]


@contextlib.contextmanager
def _terminated_as_exit() -> Iterator[None]:
    """SIGTERM (a `timeout`, a closed terminal) ends the run as Ctrl-C does: the cluster is
    left cleanly (its processes killed, its namespaces and mounts removed)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the cleanup is not interrupted again
        raise SystemExit(128 + signum)

    before = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def _capped(manifest: Any, replicas: int) -> Any:
    """The experiment with at most `replicas` replicas per group (pool; a jobset type's Jobs
    and pods per Job) and no GPUs (a Ray node then offers none), nothing else changed."""

    spec = manifest.spec

    def capped(group: Any) -> Any:
        accelerators = group.resources.accelerators.model_copy(update={"gpu": None})
        update = {
            "count": min(group.count, replicas),
            "resources": group.resources.model_copy(update={"accelerators": accelerators}),
        }
        if hasattr(group, "completions"):  # a jobset type: pods per Job too
            update["completions"] = min(group.completions, replicas)
            update["parallelisms"] = min(group.parallelisms, update["completions"])
        return group.model_copy(update=update)

    types = spec.types.model_copy()
    for type_name, group in spec.types.present().items():
        value = [capped(g) for g in group] if isinstance(group, list) else capped(group)
        if type_name in type(types).model_fields:
            types.__dict__[type_name] = value  # (the models are frozen)
        else:  # a jobset's own type names are the model's extra fields
            types.__pydantic_extra__[type_name] = value
    capped_spec = spec.model_copy(update={"types": types})
    capped_spec._origin = spec.origin
    result = manifest.model_copy(update={"spec": capped_spec})
    result._source, result._lines = manifest._source, manifest._lines
    return result


def _secret_values(keys: list[str]) -> dict[str, str]:
    """Values for the experiment's generated Secret (Pulumi generates them on a cluster)."""
    import secrets as random

    values = {key: random.token_hex(24) for key in keys}
    if "ssh-privatekey" in keys:
        if shutil.which("ssh-keygen") is None:
            raise LocalUnavailable("an MPI experiment's key pair needs `ssh-keygen` (openssh)")
        with tempfile.TemporaryDirectory() as directory:
            key = Path(directory) / "id"
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True
            )
            values["ssh-privatekey"] = key.read_text()
            values["ssh-publickey"] = key.with_suffix(".pub").read_text()
    return values
