"""The progress receiver: Kubeflow Trainer's progress protocol (KEP-2779), served without its
controller, for one experiment.

A training container finds `KUBEFLOW_TRAINER_SERVER_URL`, `KUBEFLOW_TRAINER_SERVER_CA_CERT`
and `KUBEFLOW_TRAINER_SERVER_TOKEN` (files where Trainer mounts them: `progress.py`) and
POSTs `{"trainerStatus": {"progressPercentage", "estimatedRemainingSeconds", "metrics":
[{"name", "value"}], "lastUpdatedTime"}}` to the URL, as kubeflow SDK's
`update_trainjob_status` and transformers' `KubeflowCallback` do. This program answers as
Trainer's status server does (trainer `pkg/statusserver/server.go`): 200 with the parsed
payload, else a `metav1.Status`; and keeps the latest report (a line on its output, and a file
when AICHOR_PROGRESS_STATE names one). A GET of the URL with the token answers the first
HISTORY reports from the `since`-th on (`?since=N`): Trainer's server has no GET; here a
sweep's early stopping rule reads a trial's values in its pod (`pods.stopping`).

It differs from Trainer's server where Trainer's needs its controller: the bearer token is the
experiment's own secret (compared in constant time), not a service account token checked by a
TokenReview, which needs a cluster-scoped permission; a request without it gets 401. A body over
MAX_BODY bytes gets 413; a bad field (or over MAX_METRICS metrics) 400, naming the field, as
the TrainJob's status schema would refuse it.

Standard library only, for Python 3.8 and later: it runs in an image the experiment already
uses (its source given to `python3 -c`), as the lifeline does, and on this machine for `run
--local`; nothing of the package imports it to render (its imports cost `validate` 20 ms).
Settings come from the environment, never from a shell's words:
AICHOR_PROGRESS_PORT, AICHOR_PROGRESS_CERT and AICHOR_PROGRESS_KEY (PEM files),
AICHOR_PROGRESS_TOKEN (the token's file), AICHOR_PROGRESS_PATH (the URL's path),
AICHOR_PROGRESS_STATE (optional), AICHOR_PROGRESS_LOG (optional: each report appended, for the
pod's keeper) and AICHOR_PROGRESS_READY (optional: a file written once it listens, which the
sidecar's startup probe waits for).
"""

from __future__ import annotations

import contextlib
import hmac
import http.server
import json
import os
import signal
import ssl
import sys
import threading
from datetime import datetime

MAX_BODY = 1 << 16  # 64 KiB, as Trainer's server
# The first reports kept for a GET (an early stopping rule reads a trial's first values in its
# pod: `pods.stopping`); at most 200 x 64 KiB within the receiver's 128 MiB
HISTORY = 200
MAX_METRICS = 256  # the TrainJob status schema's maxItems
MAX_TEXT = 64  # a metric's name or value (minLength 1, maxLength 64)
INT32 = 2**31 - 1
IDLE_SECONDS = 60
DRAIN = 1 << 18  # the most of a refused request's body read (and dropped) before answering
LINE = "aichor-progress: "  # the latest report on the receiver's output: LINE + its JSON


class Refused(Exception):
    """A request the protocol refuses: its HTTP code, reason and message."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message

    def status(self) -> dict:
        """As Kubernetes' API server and Trainer's status server answer an error."""
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }


def _invalid(field: str, why: str) -> Refused:
    return Refused(400, "BadRequest", f"trainerStatus.{field}: {why}" if field else why)


def _integer(status: dict, field: str, top: int) -> None:
    value = status.get(field)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise _invalid(field, f"should be an integer, not {json.dumps(value)[:40]}")
    if not 0 <= value <= top:
        raise _invalid(field, f"should be between 0 and {top}, not {value}")


def _metrics(status: dict) -> None:
    metrics = status.get("metrics")
    if metrics is None:
        return
    if not isinstance(metrics, list):
        raise _invalid("metrics", "should be a list of {name, value}")
    if len(metrics) > MAX_METRICS:
        raise _invalid("metrics", f"{len(metrics)} metrics: at most {MAX_METRICS}")
    for i, metric in enumerate(metrics):
        if not isinstance(metric, dict):
            raise _invalid(f"metrics[{i}]", "should be an object with name and value")
        for key in ("name", "value"):
            text = metric.get(key)
            if not isinstance(text, str) or not 1 <= len(text) <= MAX_TEXT:
                why = f"should be a string of 1 to {MAX_TEXT} characters (values as text)"
                raise _invalid(f"metrics[{i}].{key}", why)


def _time(status: dict) -> None:
    when = status.get("lastUpdatedTime")
    if when is None:
        raise _invalid("lastUpdatedTime", "required when trainerStatus is present")
    try:
        if not isinstance(when, str) or "T" not in when:
            raise ValueError
        datetime.fromisoformat(when.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise _invalid("lastUpdatedTime", "should be an RFC 3339 time") from None


def parsed(body: bytes) -> dict:
    """A request's payload, checked as the TrainJob's status schema checks it; or Refused."""
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, ValueError):
        raise Refused(400, "BadRequest", "Invalid payload: not JSON") from None
    if not isinstance(payload, dict):
        raise Refused(400, "BadRequest", "Invalid payload: should be an object")
    status = payload.get("trainerStatus")
    if status is None:
        return {}
    if not isinstance(status, dict):
        raise _invalid("", "trainerStatus: should be an object")
    _integer(status, "progressPercentage", 100)
    _integer(status, "estimatedRemainingSeconds", INT32)
    _metrics(status)
    _time(status)
    known = ("progressPercentage", "estimatedRemainingSeconds", "metrics", "lastUpdatedTime")
    # (Go's decoder drops the fields it does not know; so does this)
    return {"trainerStatus": {key: status[key] for key in known if key in status}}


class Receiver(http.server.ThreadingHTTPServer):
    """The HTTPS server of one experiment's reports: `report` is given each one accepted, in
    turn (never two at once); `latest` is the last."""

    daemon_threads = True

    def __init__(self, address: tuple, path: str, token: str, report=None) -> None:
        super().__init__(address, _Handler)
        self.path, self.token, self.report = path, token.encode(), report
        self.latest: dict = {}
        self.history: list = []  # (the first HISTORY reports)
        self.lock = threading.Lock()

    def handle_error(self, request, client_address) -> None:
        """A connection that broke (a client that refused the certificate, one gone half-way):
        a line on the error output, not a traceback among the reports."""
        error = sys.exc_info()[1]
        print(f"aichor: progress receiver: {client_address[0]}: {error}", file=sys.stderr)

    def keep(self, payload: dict) -> None:
        with self.lock:
            self.latest = payload
            if len(self.history) < HISTORY:
                self.history.append(payload)
            if self.report is not None:
                self.report(payload)


def _since(query: str) -> int:
    """A GET's first report: `since=N` (N a whole number), else 0 with no query."""
    if not query:
        return 0
    name, _, value = query.partition("=")
    if name != "since" or not (value.isascii() and value.isdigit()):
        raise Refused(400, "BadRequest", "query: give since=<a whole number>")
    return int(value)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # (connections kept: a client posts every 5 s)
    timeout = IDLE_SECONDS  # (a connection silent this long is closed: its thread ends)
    server: Receiver

    def do_POST(self) -> None:
        self.unread = True  # (its body)
        try:
            payload = self._payload()
        except Refused as refused:
            self._drain()
            return self._answer(refused.code, refused.status())
        if payload:
            self.server.keep(payload)
        self._answer(200, payload)

    def do_GET(self) -> None:
        """The reports kept, from the `since`-th on (`?since=N`, default 0)."""
        self.unread = False
        path, _, query = self.path.partition("?")
        try:
            self._allowed(path)
            since = _since(query)
        except Refused as refused:
            self._drain()
            return self._answer(refused.code, refused.status())
        with self.server.lock:
            items = self.server.history[since:]
        self._answer(200, {"items": items})

    def _drain(self) -> None:
        """A refused request's body read and dropped (up to DRAIN bytes, as Go's server does),
        so that its client, maybe still sending, reads the answer; then the connection ends."""
        self.close_connection = True
        try:
            left = (
                0 if not self.unread else min(int(self.headers.get("Content-Length", "0")), DRAIN)
            )
            while left > 0 and (chunk := self.rfile.read(min(left, MAX_BODY))):
                left -= len(chunk)
        except (OSError, ValueError):
            pass

    def _allowed(self, path: str) -> None:
        """The experiment's path, with its token; else refused."""
        if path != self.server.path:
            raise Refused(404, "NotFound", "Not found")
        given = self.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), b"Bearer " + self.server.token):
            raise Refused(401, "Unauthorized", "Unauthorized: give the experiment's token")

    def _payload(self) -> dict:
        self._allowed(self.path)
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            raise Refused(411, "BadRequest", "Content-Length required") from None
        if length > MAX_BODY:
            raise Refused(413, "RequestEntityTooLarge", f"Request body over {MAX_BODY} bytes")
        body, self.unread = self.rfile.read(length), False
        return parsed(body)

    def _answer(self, code: int, document: dict) -> None:
        body = json.dumps(document).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the reports are the output (a request's text never reaches it)."""


def serve(receiver: Receiver, cert: str, key: str, ready=None) -> None:
    """Serve over TLS until the process ends; once it can (its certificate loaded), the file
    `ready` written (the pod's training containers may start: their first report is kept).
    Each connection's handshake happens in its own thread (on its first read), so a client
    that never completes one holds up no other."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    receiver.socket = context.wrap_socket(
        receiver.socket, server_side=True, do_handshake_on_connect=False
    )
    if ready:
        with contextlib.suppress(OSError):
            open(ready, "w").close()
    receiver.serve_forever()


def written(state, log=None) -> object:
    """What a receiver does with a report: a line on its output; if `state` names a file,
    that file replaced whole (a reader never finds half of one); if `log` names one, a line
    appended to it (the pod's keeper sends each to the stores: `keeper.py`)."""

    def report(payload: dict) -> None:
        text = json.dumps(payload, sort_keys=True)  # (control characters escaped: one line)
        print(LINE + text, flush=True)
        if state:
            with open(f"{state}.part", "w") as file:
                file.write(text)
            os.replace(f"{state}.part", state)
        if log:
            try:
                with open(log, "a") as file:
                    file.write(text + "\n")
            except OSError as error:
                print(f"aichor: progress receiver: {log}: {error}", file=sys.stderr)

    return report


def main() -> None:
    # TERM (the pod's end) ends it at once: as a container's first process it would ignore one
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    environ = os.environ
    with open(environ["AICHOR_PROGRESS_TOKEN"]) as file:
        token = file.read().strip()
    receiver = Receiver(
        ("", int(environ["AICHOR_PROGRESS_PORT"])),
        environ["AICHOR_PROGRESS_PATH"],
        token,
        written(environ.get("AICHOR_PROGRESS_STATE"), environ.get("AICHOR_PROGRESS_LOG")),
    )
    print(f"aichor: progress receiver on port {receiver.server_address[1]}", flush=True)
    cert, key = environ["AICHOR_PROGRESS_CERT"], environ["AICHOR_PROGRESS_KEY"]
    serve(receiver, cert, key, environ.get("AICHOR_PROGRESS_READY"))


if __name__ == "__main__":
    main()
