"""Serving the dashboard with uvicorn: on 127.0.0.1 by default; on any other address only with a
token, which the printed URL carries (as Jupyter's does). The first line printed is the URL."""

from __future__ import annotations

import json
import secrets
import socket
import sys

from ..problems import ManifestError, Problem
from .app import LOCAL, application
from .watch import Watch


def listening(host: str, port: int) -> socket.socket:
    """A socket bound to host:port (0: any free port), or a ManifestError naming the option."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(found[0], socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(found[4])
        sock.listen(128)  # (a browser that opens the printed URL at once waits, not refused)
    except OSError as error:
        option = "--host" if isinstance(error, socket.gaierror) else "--port"
        why = error.strerror or error
        reason = f"cannot listen on {host}:{port} ({why}): give another {option}"
        raise ManifestError("aichor-iac dashboard", [Problem(option, reason)]) from None
    return sock


def url_of(host: str, port: int, token: str | None) -> str:
    """The address to open: this machine's name for an address of every interface."""
    shown = socket.gethostname() if host in ("0.0.0.0", "::", "") else host
    shown = f"[{shown}]" if ":" in shown else shown
    return f"http://{shown}:{port}/" + (f"?token={token}" if token else "")


def serve(watch: Watch, title: str, host: str, port: int, as_json: bool = False) -> int:
    """Print the URL (`{"url": …}` as JSON), then serve the pages until interrupted (the reads
    run meanwhile)."""
    import uvicorn

    token = None if host in LOCAL else secrets.token_urlsafe(24)
    sock = listening(host, port)
    url = url_of(host, sock.getsockname()[1], token)
    print(json.dumps({"url": url}) if as_json else url, flush=True)
    print("aichor-iac dashboard: read-only; Ctrl-C stops it", file=sys.stderr, flush=True)
    watch.start()
    app = application(watch, title, token)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])
    return 0
