"""A Kubernetes API server's answers to what `aichor-iac check` reads, over HTTP, in the API's
own JSON shapes: each answer of a built-in kind is checked against Kubernetes' OpenAPI schema
(strict) before it is sent. What the cluster holds is the test's: the namespace, what the user
may not do, quotas, LimitRanges, nodes (or a 403 for each) and the custom kinds it serves."""

from __future__ import annotations

import contextlib
import json
import re
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import schemas

FORBIDDEN = "forbidden"  # a list the user may not read
CORE_LISTS = {"pods": "PodList", "events": "EventList"}  # (`served` as "v1/pods", "v1/events")


@dataclass
class Cluster:
    namespace: str = "team-a"
    labels: dict[str, str] | None = field(default_factory=dict)  # None: no such namespace
    denied: set[tuple[str, str]] = field(default_factory=set)  # (verb, `jobs.batch`)
    quotas: list[dict[str, Any]] | str = field(default_factory=list)
    ranges: list[dict[str, Any]] | str = field(default_factory=list)
    nodes: list[dict[str, Any]] | str = field(default_factory=list)
    served: dict[str, list[dict[str, Any]]] = field(
        default_factory=dict
    )  # `[group/]version/plural`
    reviews: list[dict[str, Any]] = field(default_factory=list)  # the access reviews asked
    # (pod, container) -> its log's lines, each `<RFC 3339 time> <text>` as the kubelet keeps it
    logs: dict[tuple[str, str], list[str]] = field(default_factory=dict)

    def log(self, path: str, query: dict[str, list[str]]) -> list[str] | None:
        """A pod's container's log (`tailLines`, and without `timestamps` the texts alone),
        as the API server serves it; None for any other path."""
        found = re.fullmatch(rf"/api/v1/namespaces/{self.namespace}/pods/([^/]+)/log", path)
        if not found:
            return None
        container = query.get("container", [""])[0]
        lines = self.logs.get((found[1], container), [])
        if "tailLines" in query:
            lines = lines[-int(query["tailLines"][0]) :]
        if query.get("timestamps") != ["true"]:
            lines = [line.split(" ", 1)[1] for line in lines]
        return lines

    def answer(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None,
        query: dict[str, list[str]] | None = None,
    ) -> tuple[int, dict]:
        ns = self.namespace
        if method == "POST" and path == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews":
            return 201, self._review(body or {})
        if path == f"/api/v1/namespaces/{ns}":
            if self.labels is None:
                return 404, status(404, "NotFound", f'namespaces "{ns}" not found')
            metadata = {"name": ns, "labels": {"kubernetes.io/metadata.name": ns, **self.labels}}
            return 200, {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}
        lists = {
            f"/api/v1/namespaces/{ns}/resourcequotas": ("ResourceQuota", self.quotas),
            f"/api/v1/namespaces/{ns}/limitranges": ("LimitRange", self.ranges),
            "/api/v1/nodes": ("Node", self.nodes),
        }
        if path in lists:
            kind, items = lists[path]
            if items == FORBIDDEN:
                return 403, status(403, "Forbidden", f"cannot list resource {kind.lower()}s")
            return 200, {"apiVersion": "v1", "kind": f"{kind}List", "metadata": {}, "items": items}
        served = re.fullmatch(rf"/(?:api|apis)/((?:[^/]+/)?[^/]+)/namespaces/{ns}/([^/]+)", path)
        if served and f"{served[1]}/{served[2]}" in self.served:
            items = selected(self.served[f"{served[1]}/{served[2]}"], query or {})
            kind = CORE_LISTS.get(served[2], "List") if served[1] == "v1" else "List"
            return 200, {"apiVersion": served[1], "kind": kind, "metadata": {}, "items": items}
        return 404, status(404, "NotFound", "the server could not find the requested resource")

    def _review(self, review: dict[str, Any]) -> dict[str, Any]:
        asked = review["spec"]["resourceAttributes"]
        self.reviews.append(asked)
        named = f"{asked['resource']}.{asked['group']}" if asked.get("group") else asked["resource"]
        if asked.get("subresource"):
            named += f"/{asked['subresource']}"
        allowed = (asked["verb"], named) not in self.denied
        return {**review, "status": {"allowed": allowed}}


def selected(items: list[dict[str, Any]], query: dict[str, list[str]]) -> list[dict[str, Any]]:
    """The items a list's `labelSelector` selects (its equality terms, `k=v,k2=v2`)."""
    terms = [t.split("=", 1) for t in query.get("labelSelector", [""])[0].split(",") if t]
    return [
        item
        for item in items
        if all((item["metadata"].get("labels") or {}).get(k) == v for k, v in terms)
    ]


def kubeconfig(url: str) -> dict[str, Any]:
    """A kubeconfig whose one context (team-a) is the API at `url`."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "team-a", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "team-a",
    }


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    """The API's error answer (a meta/v1 Status)."""
    return {
        "apiVersion": "v1",
        "kind": "Status",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


@contextlib.contextmanager
def serving(cluster: Cluster) -> Iterator[str]:
    """The cluster's API at an http:// URL while the block runs."""

    class Handler(BaseHTTPRequestHandler):
        def _send(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            path, _, query = self.path.partition("?")
            code, answer = cluster.answer(method, path, body, urllib.parse.parse_qs(query))
            if answer.get("apiVersion") in ("v1", "authorization.k8s.io/v1"):
                schemas.validate(answer)  # (the API's own shape)
            data = json.dumps(answer).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            path, _, query = self.path.partition("?")
            lines = cluster.log(path, urllib.parse.parse_qs(query))
            if lines is None:
                return self._send("GET")
            data = "".join(f"{line}\n" for line in lines).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            self._send("POST")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
