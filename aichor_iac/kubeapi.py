"""Reading an experiment from a cluster with the official Kubernetes client: its Jobs and pods
(by the labels every object of the experiment carries), their events and the pods' logs — from
the cluster the kubeconfig names (the stack's `kubernetes:kubeconfig` and
`kubernetes:context` when it gives them), or from a local run's read API (`local/api.py`,
found by the experiment's name), which speaks the same JSON.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

SELECTOR = "app.kubernetes.io/instance={},app.kubernetes.io/part-of=aichor"


class Unreachable(Exception):
    """No cluster (or local run) to read: why, and what to do."""


def connect(url: str | None = None, kubeconfig: Any = None, context: str | None = None) -> Any:
    """A client of the API at `url` (a local run's), else of the kubeconfig's cluster (a
    path, or the config itself as a dict; None: KUBECONFIG, else ~/.kube/config)."""
    if url is not None:
        configuration = client.Configuration()
        configuration.host = url
        return client.ApiClient(configuration)
    try:
        if isinstance(kubeconfig, dict):
            return config.new_client_from_config_dict(kubeconfig, context=context)
        return config.new_client_from_config(config_file=kubeconfig, context=context)
    except (config.ConfigException, OSError) as error:
        raise Unreachable(f"no cluster to read ({error}): set KUBECONFIG or --kubeconfig") from None


def stack_connection(stack_file: str | None) -> tuple[Any, str | None]:
    """The stack's `kubernetes:kubeconfig` (a path, or the config itself, as the Kubernetes
    provider takes it) and `kubernetes:context`."""
    if not stack_file:
        return None, None
    values = (yaml.safe_load(Path(stack_file).read_text()) or {}).get("config") or {}
    kubeconfig, context = values.get("kubernetes:kubeconfig"), values.get("kubernetes:context")
    if isinstance(kubeconfig, str) and "\n" in kubeconfig:  # the config itself
        kubeconfig = yaml.safe_load(kubeconfig)
    return kubeconfig, context


def local_url(experiment: str) -> tuple[str, str]:
    """A local run's read API (address, namespace), as the run announced it."""
    from .local.api import announcements

    path = announcements() / f"{experiment}.json"
    if not path.exists():
        running = sorted(p.stem for p in announcements().glob("*.json"))
        also = f" (running: {', '.join(running)})" if running else ""
        raise Unreachable(f"no local run of {experiment} is running here{also}")
    found = json.loads(path.read_text())
    return found["url"], found["namespace"]


class Reader:
    """The experiment's objects in `namespace`, as plain Kubernetes JSON."""

    def __init__(self, api: Any, namespace: str, experiment: str) -> None:
        self.api, self.namespace = api, namespace
        self.selector = SELECTOR.format(experiment)
        self.core, self.batch = client.CoreV1Api(api), client.BatchV1Api(api)

    def _plain(self, items: Any) -> list[dict[str, Any]]:
        return [self.api.sanitize_for_serialization(item) for item in items]

    def jobs(self) -> list[dict[str, Any]]:
        found = self.batch.list_namespaced_job(self.namespace, label_selector=self.selector)
        return self._plain(found.items)

    def pods(self) -> list[dict[str, Any]]:
        found = self.core.list_namespaced_pod(self.namespace, label_selector=self.selector)
        return self._plain(found.items)

    def events(self) -> list[dict[str, Any]]:
        """The events of the experiment's Jobs and pods, oldest first."""
        names = {o["metadata"]["name"] for o in [*self.jobs(), *self.pods()]}
        found = self._plain(self.core.list_namespaced_event(self.namespace).items)
        mine = [e for e in found if e["involvedObject"].get("name") in names]
        return sorted(mine, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")

    def lines(self, pod: str, follow: bool = False) -> Iterator[tuple[str, str]]:
        """The pod's main container's lines, each with the time the kubelet took it (RFC
        3339); with `follow`, as they come until the container ends."""
        response = self.core.read_namespaced_pod_log(
            pod, self.namespace, follow=follow, timestamps=True, _preload_content=False
        )
        partial = b""
        for chunk in response.stream(1024, decode_content=True):
            *whole, partial = (partial + chunk).split(b"\n")
            for line in whole:
                when, _, text = line.decode(errors="replace").partition(" ")
                yield when, text
        if partial:
            when, _, text = partial.decode(errors="replace").partition(" ")
            yield when, text
