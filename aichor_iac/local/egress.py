"""What a local run's pods reach outside their network: the stores the stack names
(`aichor:history`, `aichor:mlflow`: issue 67), as they are reached from the user's shell, a
server on this machine's 127.0.0.1 included, though each pod has a network of its own.

Each store's address is served in every pod's network namespace by a forwarder (`FORWARD`, on
the address the URL names: 127.0.0.1 for a host name, which the hosts file gives as such; an
IP address of the URL's, added to the pod's loopback); each connection it accepts goes through
a Unix socket (which crosses network namespaces) to `Egress` on this side, which connects to
the address as the user's shell would and passes the bytes both ways. TLS goes through
unchanged: the pod's client speaks to the store's own name."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import socketserver
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..k8s import keeping
from .network import Network

# A run in a user namespace: the Unix socket of its parent's side (outside its network)
EGRESS = "AICHOR_IAC_EGRESS"

# The forwarder in a pod's network namespace: argv: the Unix socket, then `ip port host` per
# address. Standard library only (this machine's python3, run with -S).
FORWARD = """\
import socket, sys, threading
path, targets = sys.argv[1], [sys.argv[i:i + 3] for i in range(2, len(sys.argv), 3)]

def pump(source, target):
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            target.sendall(data)
        target.shutdown(socket.SHUT_WR)
    except OSError:
        pass

def serve(listener, host, port):
    while True:
        conn, _ = listener.accept()
        out = socket.socket(socket.AF_UNIX)
        try:
            out.connect(path)
            out.sendall(f"{host} {port}\\n".encode())
        except OSError:
            conn.close()
            continue
        threading.Thread(target=pump, args=(out, conn), daemon=True).start()
        threading.Thread(target=pump, args=(conn, out), daemon=True).start()

for ip, port, host in targets:
    listener = socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((ip, int(port)))
    listener.listen(64)
    threading.Thread(target=serve, args=(listener, host, port), daemon=True).start()
threading.Event().wait()
"""


@dataclass(frozen=True)
class Address:
    host: str  # as the URL names it
    port: int

    @property
    def ip(self) -> str:
        """Where the pods find it: the URL's IP address, or 127.0.0.1 for a name."""
        try:
            return str(ipaddress.ip_address(self.host.strip("[]")))
        except ValueError:
            return "127.0.0.1"

    @property
    def named(self) -> bool:
        return self.ip == "127.0.0.1" and self.host not in ("127.0.0.1", "localhost")


def addresses(objects: list[dict[str, Any]]) -> list[Address]:
    """The stores' addresses the keepers of `objects`' pods write to."""
    found: set[Address] = set()
    for job in objects:
        if job.get("kind") != "Job":
            continue
        for container in job["spec"]["template"]["spec"].get("initContainers", []):
            if container["name"] == keeping.CONTAINER:
                env = {e["name"]: e.get("value", "") for e in container.get("env", [])}
                found.update(_addresses(env))
    return sorted(found, key=lambda a: (a.host, a.port))


def _addresses(env: dict[str, str]) -> list[Address]:
    urls, history = [env.get("AICHOR_MLFLOW", "")], env.get("AICHOR_HISTORY", "")
    if history.startswith("s3://"):
        region = env.get("AWS_REGION") or "us-east-1"
        urls.append(env.get("AWS_ENDPOINT_URL") or f"https://s3.{region}.amazonaws.com")
    elif history.startswith("az://"):  # (the account: the shell's, as its Secret's stand-in)
        account = os.environ.get("AZURE_STORAGE_ACCOUNT", "")
        default = f"https://{account}.blob.core.windows.net" if account else ""
        urls.append(env.get(keeping.AZURE_ENDPOINT) or default)
    found = []
    for url in filter(None, urls):
        parts = urllib.parse.urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        found.append(Address(parts.hostname or "", port))
    return found


class Egress:
    """The stores of `objects`' keepers, in each pod's network: served on this side (entered;
    through the socket EGRESS names, for a run in a user namespace: its parent's), a
    forwarder started in a pod's network namespace with each start of the pod."""

    def __init__(self, objects: list[dict[str, Any]], root: Path, network: Network) -> None:
        self.addresses, self.network = addresses(objects), network
        self.path = os.environ.get(EGRESS) or str(root / "egress.sock")
        self.forwarders: dict[str, subprocess.Popen] = {}
        self.lock = threading.Lock()
        self._served = contextlib.ExitStack()

    def __enter__(self) -> Egress:
        if self.addresses and EGRESS not in os.environ:
            self._served.enter_context(served(self.path))
        return self

    def __exit__(self, *exc: object) -> None:
        self._served.close()

    def start(self, pod: str) -> None:
        if not self.addresses:
            return
        self.network.loopback(pod, sorted({a.ip for a in self.addresses}))
        args = [self.path, *(str(v) for a in self.addresses for v in (a.ip, a.port, a.host))]
        argv = [sys.executable, "-S", "-c", FORWARD, *args]
        forwarder = subprocess.Popen(["ip", "netns", "exec", self.network.ns(pod), *argv])
        with self.lock:
            self.forwarders[pod] = forwarder

    def stop(self, pod: str) -> None:
        with self.lock:
            forwarder = self.forwarders.pop(pod, None)
        if forwarder is not None:
            forwarder.kill()
            forwarder.wait()

    def hosts(self) -> list[str]:
        """The hosts file's line of the stores' names (their forwarders' address)."""
        names = sorted({a.host for a in self.addresses if a.named})
        return [f"127.0.0.1 {' '.join(names)}"] if names else []


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


@contextlib.contextmanager
def served(path: str) -> Iterator[str]:
    """This side of the forwarders: each connection on the Unix socket `path` names its
    address on its first line, and is passed to it."""

    class Pass(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            line = b""  # (read a byte at a time: what follows it is the client's)
            while not line.endswith(b"\n") and len(line) < 300:
                if not (byte := self.request.recv(1)):
                    return
                line += byte
            host, _, port = line.decode(errors="replace").strip().rpartition(" ")
            address = (host.strip("[]"), int(port) if port.isdigit() else 0)
            with (
                contextlib.suppress(OSError),
                socket.create_connection(address, timeout=10) as out,
            ):
                out.settimeout(None)
                back = threading.Thread(target=pump, args=(out, self.request), daemon=True)
                back.start()
                pump(self.request, out)
                back.join()

    server = _Server(path, Pass)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield path
    finally:
        server.shutdown()
        server.server_close()


def pump(source: socket.socket, target: socket.socket) -> None:
    """Bytes from `source` to `target` until `source` ends (then `target` hears the end)."""
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            target.sendall(data)
        target.shutdown(socket.SHUT_WR)
