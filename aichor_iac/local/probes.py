"""A container's probes as the kubelet runs them on the local node: `exec` inside the running
container (its mount, host name, network and PID namespaces, with its env, through
`nsenter`), `tcpSocket` and `httpGet` from the node to the pod's address. A named port is the
container's port of that name. A native sidecar's startup probe holds the pod's next
container (`started_up`); a main container's startup and liveness probes kill it when they
fail (`watch`)."""

from __future__ import annotations

import subprocess
import sys
import threading
from typing import Any, Protocol

from . import containers
from .jobs import grace_of, pod_name
from .kubelet import Records
from .node import Node


class Kubelet(Protocol):
    """What waits for a probe (`pods.PodRunner`)."""

    node: Node
    records: Records

    def sleep(self, seconds: float) -> bool: ...


def passes(
    node: Node,
    pod: str,
    container: dict[str, Any],
    probe: dict[str, Any],
    env: dict[str, str],
    process: subprocess.Popen | None,
) -> bool:
    """Whether `probe` of `container` (of `pod`, running as `process`) passes now."""
    timeout = float(probe.get("timeoutSeconds", 1))
    if "exec" in probe:
        return process is not None and _in_container(
            process, probe["exec"]["command"], env, timeout
        )
    action = probe.get("tcpSocket") or probe.get("httpGet") or {}
    port = _port(container, action.get("port"))
    if port is None:
        return False
    where = (node.ips[pod], port)
    if "tcpSocket" in probe:
        check = f"import socket; socket.create_connection({where!r}, {timeout})"
    else:
        url = f"http://{where[0]}:{port}{action.get('path') or '/'}"
        check = f"import urllib.request as u; u.urlopen({url!r}, timeout={timeout})"
    return node.exec(pod, sys.executable, "-c", check).returncode == 0


def _port(container: dict[str, Any], port: Any) -> int | None:
    if isinstance(port, int):
        return port
    named = [p["containerPort"] for p in container.get("ports", []) if p.get("name") == port]
    return named[0] if named else None


def _in_container(
    process: subprocess.Popen, command: list[str], env: dict[str, str], timeout: float
) -> bool:
    """Whether `command` exits 0 inside the running container `process` (False once it has
    ended, or past `timeout`)."""
    if (pid := containers.first_process(process)) is None:
        return False
    # (--root, --wd: the container's own, where a run without root has a root of its own)
    argv = ["nsenter", f"--target={pid}", "--mount", "--uts", "--net", "--pid", "--root", "--wd"]
    argv += ["--", *command]
    try:
        done = subprocess.run(argv, env=env, cwd="/", capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


def started_up(
    kubelet: Kubelet,
    job: dict[str, Any],
    index: int,
    init: dict[str, Any],
    sidecars: dict[str, subprocess.Popen],
) -> bool:
    """A native sidecar's startup probe waited for, as the kubelet waits before it starts the
    pod's next container: tried every periodSeconds; a sidecar that ends is started again
    (restartPolicy Always), one past failureThreshold failures killed and started again.
    False if the cluster is left first."""
    if (probe := init.get("startupProbe")) is None:
        return True
    node, name, pod = kubelet.node, init["name"], pod_name(job, index)
    env = {**node.env, **node.env_of(job, index, name)}
    failures = 0
    if not kubelet.sleep(probe.get("initialDelaySeconds", 0)):
        return False
    while not passes(node, pod, init, probe, env, sidecars[name]):
        failures += 1
        if sidecars[name].poll() is None and failures >= probe.get("failureThreshold", 3):
            kubelet.records.event("Pod", pod, "Unhealthy", f"Startup probe failed: {name}")
            grace = probe.get("terminationGracePeriodSeconds", grace_of(job))  # (the pod's)
            containers.stop([sidecars[name]], grace)
        if sidecars[name].poll() is not None:
            sidecars[name] = node.start(job, index, name)
            containers.started(sidecars[name])
            failures = 0
        if not kubelet.sleep(probe.get("periodSeconds", 10)):
            return False
    return True


def watching(kubelet: Kubelet, job: dict[str, Any], index: int, process: subprocess.Popen) -> None:
    """`watch` the main container `process` beside it (a thread of its own)."""
    watcher = threading.Thread(target=watch, args=(kubelet, job, index, process), daemon=True)
    watcher.start()


def watch(kubelet: Kubelet, job: dict[str, Any], index: int, process: subprocess.Popen) -> None:
    """The main container's startup and liveness probes while it runs, as the kubelet runs
    them: the startup probe every periodSeconds until it passes (the liveness probe waits for
    it), then the liveness probe. failureThreshold failures in a row of either kill the
    container (TERM, KILL after the probe's or the pod's grace period); its pod's
    restartPolicy then says whether it starts again."""
    container = job["spec"]["template"]["spec"]["containers"][0]
    node, name, pod = kubelet.node, container["name"], pod_name(job, index)
    env = {**node.env, **node.env_of(job, index, name)}
    for kind in ("startupProbe", "livenessProbe"):
        if (probe := container.get(kind)) is None:
            continue
        if not kubelet.sleep(probe.get("initialDelaySeconds", 0)):
            return
        failures = 0
        while process.poll() is None:
            if passes(node, pod, container, probe, env, process):
                if kind == "startupProbe":
                    break
                failures = 0
            else:
                failures += 1
            if failures >= probe.get("failureThreshold", 3):
                said = f"{kind.removesuffix('Probe').capitalize()} probe failed: {name}"
                kubelet.records.event("Pod", pod, "Unhealthy", said, warning=True)
                containers.stop(
                    [process], probe.get("terminationGracePeriodSeconds", grace_of(job))
                )
                return
            if not kubelet.sleep(probe.get("periodSeconds", 10)):
                return
