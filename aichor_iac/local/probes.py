"""A container's probes as the kubelet runs them on the local node: `exec` inside the running
container (its mount, host name, network and PID namespaces, with its env, through
`nsenter`), `tcpSocket` and `httpGet` from the node to the pod's address. A named port is the
container's port of that name."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from .node import Node


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
    from .containers import first_process

    if (pid := first_process(process)) is None:
        return False
    argv = ["nsenter", f"--target={pid}", "--mount", "--uts", "--net", "--pid", "--", *command]
    try:
        done = subprocess.run(argv, env=env, cwd="/", capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0
