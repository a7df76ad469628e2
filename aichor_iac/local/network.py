"""The pods' network: a network namespace per pod (`ip netns`) with its own address on one
bridge and a default route out, and one hosts file every pod reads, trusted alone (as the
cluster DNS is for its own names)."""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

from .jobs import indexed, pod_name


class Network:
    """Each pod of `pods` (in order) gets the address 10.77.0.<n + 2>. In a mount namespace of
    our own (`private`: a user namespace's) the hosts file is mounted over /etc/hosts once;
    otherwise `ip netns exec` mounts /etc/netns/<ns>/hosts, a hard link of it, over /etc."""

    def __init__(self, root: Path, pods: list[str], private: bool):
        self.id = uuid.uuid4().hex[:6]
        self.root, self.private = root, private
        self.ips = {pod: f"10.77.0.{n + 2}" for n, pod in enumerate(pods)}
        self.etc = Path("/etc/netns")

    def ns(self, pod: str | None = None) -> str:
        """The network namespace of a pod (None: the bridge's)."""
        return f"aichor-{self.id}-" + ("switch" if pod is None else str(list(self.ips).index(pod)))

    def exec(self, pod: str, *command: str) -> subprocess.CompletedProcess:
        """Run a command in a pod's network namespace (as `kubectl exec` would)."""
        argv = ["ip", "netns", "exec", self.ns(pod), *command]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)

    def up(self) -> None:
        """The bridge, each pod's namespace on it, and the (empty) hosts file."""
        switch = self.ns()
        _ip("netns", "add", switch)
        _ip("link", "add", "br0", "type", "bridge", ns=switch)
        _ip("link", "set", "br0", "up", ns=switch)
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
            self._plug(pod, f"a{self.id}{n}")

    def _plug(self, pod: str, outside: str) -> None:
        """A pod's namespace, a veth pair from its eth0 to the bridge, its address."""
        ns, switch = self.ns(pod), self.ns()
        _ip("netns", "add", ns)
        _ip("link", "set", "lo", "up", ns=ns)
        _ip("link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _ip("link", "set", outside, "netns", switch)
        _ip("link", "set", outside, "master", "br0", "up", ns=switch)
        _ip("addr", "add", f"{self.ips[pod]}/24", "dev", "eth0", ns=ns)
        _ip("link", "set", "eth0", "up", ns=ns)
        # A pod's default route, as every pod network gives one: programs that find their
        # own address by the route out (Ray's node IP) find eth0's.
        _ip("route", "add", "default", "dev", "eth0", ns=ns)
        if not self.private:  # one hosts file for every pod (hard links)
            etc = self.etc / ns
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "nsswitch.conf").write_text("hosts: files\n")
            os.link(self.root / "hosts", etc / "hosts")

    def add(self, pods: list[str]) -> None:
        """More pods, after `up`: each its address and its namespace on the bridge."""
        for pod in pods:
            n = len(self.ips)
            self.ips[pod] = f"10.77.0.{n + 2}"
            self._plug(pod, f"a{self.id}{n}")

    def loopback(self, pod: str, ips: list[str]) -> None:
        """Addresses of the pod's own loopback, beside 127.0.0.1 (a store's, served there)."""
        for ip in ips:
            if not ipaddress.ip_address(ip).is_loopback:
                argv = ["ip", "addr", "replace", f"{ip}/32", "dev", "lo"]
                subprocess.run(["ip", "netns", "exec", self.ns(pod), *argv], check=True)

    def down(self) -> None:
        for pod in self.ips:
            subprocess.run(["ip", "netns", "del", self.ns(pod)], check=False)
            shutil.rmtree(self.etc / self.ns(pod), ignore_errors=True)
        subprocess.run(["ip", "netns", "del", self.ns()], check=False)

    def kill(self, pod: str) -> None:
        """Every process in the pod's namespace ends."""
        pids = subprocess.run(
            ["ip", "netns", "pids", self.ns(pod)], capture_output=True, text=True, check=False
        ).stdout.split()
        for pid in pids:
            subprocess.run(["kill", "-9", pid], capture_output=True, check=False)

    def hosts(self, lines: list[str]) -> None:
        """The hosts file's records, replaced in place (every pod's hard link sees its inode)
        by one write that never shrinks it: a shorter set is padded with blank lines, which
        resolvers skip. A pod resolving meanwhile reads every record that stays whole; it once
        read an empty file (truncated, then written) and a worker's lookup of its master
        failed."""
        new = ("\n".join(lines) + "\n").encode()
        fd = os.open(self.root / "hosts", os.O_RDWR)
        try:
            os.pwrite(fd, new + b"\n" * max(0, os.fstat(fd).st_size - len(new)), 0)
        finally:
            os.close(fd)


def _ip(*args: str, ns: str | None = None) -> None:
    prefix = ["ip", "netns", "exec", ns] if ns else []
    subprocess.run([*prefix, "ip", *args], check=True, capture_output=True)


def records(
    workloads: list[tuple[dict[str, Any], int]],
    services: list[dict[str, Any]],
    live: set[str],
    ips: dict[str, str],
) -> list[str]:
    """The hosts file's lines, as the cluster DNS answers: each scheduled (`live`) Job pod's
    names (`workloads`: (Job or Deployment, index)), and each Service's addresses (every
    selected pod for a headless one, one for a ClusterIP, as kube-proxy's virtual IP)."""
    lines = ["127.0.0.1 localhost"]
    for job, i in workloads:
        pod = pod_name(job, i)
        if job["kind"] == "Job" and pod in live:
            # (`<pod>.<subdomain>`: what the pods' DNS search path `<namespace>.svc.<domain>`
            # completes; the short name: the kubelet's line)
            subdomain = job["spec"]["template"]["spec"]["subdomain"]
            lines.append(f"{ips[pod]} {_fqdn(job, i)} {pod}.{subdomain} {pod}")
    for service in services:
        selector = service["spec"].get("selector") or {}
        metadata = service["metadata"]
        name = f"{metadata['name']}.{metadata['namespace']}.svc.cluster.local"
        for workload, i in workloads:
            labels = dict(workload["spec"]["template"]["metadata"]["labels"])
            if workload["kind"] == "Job" and indexed(workload):  # (the controller's label)
                labels["batch.kubernetes.io/job-completion-index"] = str(i)
            pod = pod_name(workload, i)
            if pod in live and selector.items() <= labels.items():
                lines.append(f"{ips[pod]} {name}")
                if service["spec"].get("clusterIP") != "None":
                    break  # a ClusterIP: one address, as kube-proxy's virtual IP
    return lines


def _fqdn(job: dict[str, Any], index: int) -> str:
    spec = job["spec"]["template"]["spec"]
    namespace = job["metadata"]["namespace"]
    return f"{pod_name(job, index)}.{spec['subdomain']}.{namespace}.svc.cluster.local"
