"""The dashboard's web application (Starlette): three pages (the experiments, one experiment,
one sweep), the fragments their script swaps in as things change, and the JSON their charts and
logs read. Read-only: GET and HEAD alone, nothing that changes the cluster. Every string reaches
the page through Jinja2's autoescaping (the fragments too) or a script's `textContent`; the
Content-Security-Policy allows the package's own scripts and styles and nothing inline."""

from __future__ import annotations

import hmac
from collections.abc import MutableMapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from ..observe.progress import duration, summary
from ..observe.status import Report, pod_rows
from ..records.model import Failure
from . import views
from .watch import Watch

HERE = Path(__file__).parent
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",  # (the token is in the first URL)
    "X-Frame-Options": "DENY",
}
COOKIE = "aichor_iac_token"
# The addresses served without a token, and the Host names a request to them carries
LOCAL = ("127.0.0.1", "localhost", "::1")
LOCAL_HOSTS = tuple(f"[{h}]" if ":" in h else h for h in LOCAL)


def templates() -> Environment:
    environment = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters["duration"] = lambda s: "" if s is None else duration(s)
    environment.filters["number"] = lambda v: "" if v is None else f"{v:.6g}"
    environment.filters["summary"] = summary
    environment.filters["failure"] = Failure.of  # (status's failedFirst, as a record holds it)
    environment.filters["last_line"] = lambda text: (text or "").strip().rsplit("\n", 1)[-1]
    return environment


class Pages:
    """The routes, over a Watch (each run in Starlette's threads: some read the cluster)."""

    def __init__(self, watch: Watch, title: str) -> None:
        self.watch, self.title, self.jinja = watch, title, templates()

    def html(self, template: str, status: int = 200, **values: Any) -> HTMLResponse:
        snapshot = self.watch.snapshot
        text = self.jinja.get_template(template).render(
            title=self.title, error=snapshot.error, read=bool(snapshot.read_at), **values
        )
        return HTMLResponse(text, status_code=status)

    def experiments_values(self) -> dict[str, Any]:
        now = datetime.now(timezone.utc)
        alone, sweeps = views.experiment_rows(self.watch.snapshot, now)
        return {"alone": alone, "sweeps": sweeps, "runs": self.watch.runs()}

    def run(self, request: Request) -> Response:
        """A kept run of the file, from its records."""
        records = self.watch.run(request.path_params["name"])
        values = {"records": records, "id": request.path_params["name"]} if records else None
        return self.shown(request, "kept run", values, "run.html")

    def index(self, request: Request) -> Response:
        return self.html("experiments.html", **self.experiments_values())

    def index_fragment(self, request: Request) -> Response:
        return self.html("experiments_rows.html", **self.experiments_values())

    def experiment_values(self, request: Request) -> dict[str, Any] | None:
        name, snapshot = request.path_params["name"], self.watch.snapshot
        if name not in snapshot.experiments:
            return None
        found = snapshot.experiments[name]
        asked = request.query_params.get("pod")
        return {
            "row": views.experiment_row(snapshot, name, datetime.now(timezone.utc)),
            "found": found,
            "events": self.watch.events(name),
            "trial": views.trial_row(snapshot, name),
            "pod": asked if asked in _pods(found) else None,  # (None: its first, when it has one)
            "first": next(iter(_pods(found)), None),
        }

    def experiment(self, request: Request) -> Response:
        return self.shown(request, "experiment", self.experiment_values(request), "experiment.html")

    def experiment_fragment(self, request: Request) -> Response:
        values = self.experiment_values(request)
        return self.shown(request, "experiment", values, "experiment_parts.html")

    def experiment_json(self, request: Request) -> Response:
        """The experiment's last report (its charts read it as it changes)."""
        found = self.watch.snapshot.experiments.get(request.path_params["name"])
        if found is None:
            return JSONResponse({"error": "no such experiment"}, status_code=404)
        progress = found.get("progress")
        metrics = self.watch.metrics(request.path_params["name"])  # (by step: [step, time, value])
        return JSONResponse(
            {
                "trainerStatus": found.get("trainerStatus"),
                "receivedAt": progress["receivedAt"] if progress else None,
                "metrics": metrics if isinstance(metrics, dict) else {},
            }
        )

    def log(self, request: Request) -> Response:
        """A pod's lines after the `after`-th, followed from the first ask."""
        try:
            seen = int(request.query_params.get("after", "0"))
        except ValueError:
            seen = 0
        name, pod = request.path_params["name"], request.path_params.get("pod")
        if pod is None:  # (its first pod, once it has one: a page opened before it ran)
            found = self.watch.snapshot.experiments.get(name)
            if (pod := next(iter(_pods(found)), None)) is None:
                answer = {"lines": [], "ended": False, "error": "no pod yet", "run": "", "pod": ""}
                return JSONResponse(answer)
        lines, ended, error, run = self.watch.log(name, pod, seen)  # (run: where they are read)
        answer = {"lines": lines, "ended": ended, "error": error, "run": run, "pod": pod}
        return JSONResponse(answer)

    def render(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in self.watch.snapshot.experiments:
            return PlainTextResponse("no such experiment", status_code=404)
        return PlainTextResponse(self.watch.render(name))

    def sweep_values(self, request: Request) -> dict[str, Any] | None:
        name = request.path_params["name"]
        if name not in self.watch.snapshot.sweeps:
            return None
        return {"table": views.sweep_table(name, self.watch.snapshot)}

    def sweep(self, request: Request) -> Response:
        return self.shown(request, "sweep", self.sweep_values(request), "sweep.html")

    def sweep_fragment(self, request: Request) -> Response:
        return self.shown(request, "sweep", self.sweep_values(request), "sweep_parts.html")

    def sweep_json(self, request: Request) -> Response:
        """The sweep's trials for its charts (parameters as given: numbers or choices)."""
        found = self.watch.snapshot.sweeps.get(request.path_params["name"])
        if found is None:
            return JSONResponse({"error": "no such sweep"}, status_code=404)
        return JSONResponse(
            {
                "sweep": found["sweep"],
                "objective": found["objective"],
                "direction": found["direction"],
                "best": found["best"],
                "trials": found["trials"],
            }
        )

    def shown(
        self, request: Request, what: str, values: dict[str, Any] | None, template: str
    ) -> Response:
        """The template with `values`, or the page that says there is no such `what`."""
        if values is None:
            name = request.path_params["name"]
            return self.html("missing.html", status=404, what=what, name=name)
        return self.html(template, **values)


def application(watch: Watch, title: str, token: str | None) -> ASGIApp:
    """The dashboard over `watch`: with `token`, only for requests that carry it (its query
    parameter once, a cookie after); without, only for LOCAL_HOSTS (no other site's page
    can reach it through a name that points here)."""
    pages = Pages(watch, title)
    routes = [
        Route("/", pages.index),
        Route("/fragments/experiments", pages.index_fragment),
        Route("/experiments/{name}", pages.experiment),
        Route("/fragments/experiments/{name}", pages.experiment_fragment),
        Route("/api/experiments/{name}", pages.experiment_json),
        Route("/api/experiments/{name}/logs/{pod}", pages.log),
        Route("/api/experiments/{name}/log", pages.log),
        Route("/experiments/{name}/objects.yaml", pages.render),
        Route("/sweeps/{name}", pages.sweep),
        Route("/runs/{name}", pages.run),
        Route("/fragments/sweeps/{name}", pages.sweep_fragment),
        Route("/api/sweeps/{name}", pages.sweep_json),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return Guard(Starlette(routes=routes), token)


class Guard:
    """Every answer's security headers; GET and HEAD alone; the token or the local host."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app, self.token = app, token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        request = Request(scope)
        refused, cookie = self.refused(request)

        async def send_with_headers(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = message.setdefault("headers", [])
                headers += [(k.lower().encode(), v.encode()) for k, v in HEADERS.items()]
                if not request.url.path.startswith("/static/"):
                    headers.append((b"cache-control", b"no-store"))
                if cookie:
                    headers.append((b"set-cookie", cookie.encode()))
            await send(message)

        if refused is not None:
            return await refused(scope, receive, send_with_headers)
        await self.app(scope, receive, send_with_headers)

    def refused(self, request: Request) -> tuple[Response | None, str | None]:
        """Why a request is answered with an error (None: it is not), and the cookie that
        keeps a token given in the URL."""
        if request.method not in ("GET", "HEAD"):
            return PlainTextResponse("read-only", 405, headers={"Allow": "GET, HEAD"}), None
        if self.token is None:
            host = request.headers.get("host", "").rsplit(":", 1)[0]
            if host not in LOCAL_HOSTS:
                return PlainTextResponse(f"unknown host {host!r}", 421), None
            return None, None
        given = request.query_params.get("token")
        if given is not None and hmac.compare_digest(given, self.token):
            return None, f"{COOKIE}={self.token}; Path=/; HttpOnly; SameSite=Strict"
        if hmac.compare_digest(request.cookies.get(COOKIE, ""), self.token):
            return None, None
        said = "this dashboard needs its token: open the URL `aichor-iac dashboard` printed"
        return PlainTextResponse(said, 403), None


def _pods(found: Report | None) -> list[str]:
    """An experiment's pods, as its report lists them."""
    return [row["pod"] for row in pod_rows(found)]
