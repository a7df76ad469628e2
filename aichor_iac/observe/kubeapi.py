"""Reading an experiment from a cluster with lightkube, a light Kubernetes client: its Jobs and
pods (by the labels every object of the experiment carries), their events and the pods' logs —
from the cluster the kubeconfig names (the stack's `kubernetes:kubeconfig` and
`kubernetes:context` when it gives them; else KUBECONFIG, ~/.kube/config, or the pod's service
account inside a cluster; exec credential plugins as GKE and EKS use them), or from a local
run's read API (`local/api.py`, found by the experiment's name), which speaks the same JSON.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

PART_OF = {"app.kubernetes.io/part-of": "aichor"}  # (and `app.kubernetes.io/instance`)


class Unreachable(Exception):
    """No cluster (or local run) to read: why, and what to do."""


def connect(url: str | None = None, kubeconfig: Any = None, context: str | None = None) -> Any:
    """A client of the API at `url` (a local run's), else of the kubeconfig's cluster
    (`config_of`)."""
    import httpx2
    from lightkube import Client, KubeConfig
    from lightkube.config.kubeconfig import Cluster, User

    timeout = httpx2.Timeout(10, read=None)  # (a followed log may be silent for long)
    if url is not None:
        config = KubeConfig.from_one(cluster=Cluster(server=url), user=User()).get()
        return Client(config, timeout=timeout)
    return Client(config_of(kubeconfig, context), timeout=timeout)


def config_of(kubeconfig: Any = None, context: str | None = None) -> Any:
    """The kubeconfig's cluster and user for `context` (a path, or the config itself as a
    dict; None: KUBECONFIG, else ~/.kube/config, else the pod's service account), or
    Unreachable."""
    from lightkube import KubeConfig
    from lightkube.core.exceptions import ConfigError

    try:
        if isinstance(kubeconfig, dict):
            config = KubeConfig.from_dict(kubeconfig)
        elif kubeconfig is not None:
            config = KubeConfig.from_file(kubeconfig)
        else:
            config = KubeConfig.from_env()
        return config.get(context_name=context)
    except (ConfigError, OSError) as error:
        raise Unreachable(f"no cluster to read ({error}): set KUBECONFIG or --kubeconfig") from None


def stack_connection(stack_file: str | None) -> tuple[Any, str | None]:
    """The stack's `kubernetes:kubeconfig` (a path, or the config itself, as the Kubernetes
    provider takes it) and `kubernetes:context`."""
    if not stack_file:
        return None, None
    values = (yaml.safe_load(Path(stack_file).read_text()) or {}).get("config") or {}
    return provider_connection(
        values.get("kubernetes:kubeconfig"), values.get("kubernetes:context")
    )


def provider_connection(kubeconfig: Any, context: str | None) -> tuple[Any, str | None]:
    """The Kubernetes provider's `kubeconfig` (a path, or the config itself) and `context`,
    as `connect` takes them."""
    if isinstance(kubeconfig, str) and "\n" in kubeconfig:  # the config itself
        kubeconfig = yaml.safe_load(kubeconfig)
    return kubeconfig, context


def announcements() -> Path:
    """Where this user's local runs say where their API is (`local/api.py` announces)."""
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return Path(base) / f"aichor-iac-{os.getuid()}"


def local_url(experiment: str, source: str = "") -> tuple[str, str]:
    """A local run's read API (address, namespace), as the run announced it: of the file at
    `source` (an absolute path) when the run named it, the newest if several run at once."""
    found = []
    for path in announcements().glob(f"{experiment}@*.json"):
        try:
            said = json.loads(path.read_text())
            when = path.stat().st_mtime
        except (OSError, ValueError):  # (a run that has just ended)
            continue
        if not _alive(said.get("pid")):  # (a run killed at once: its word is stale)
            path.unlink(missing_ok=True)
        elif not source or not said.get("source") or said["source"] == source:
            found.append((when, said))
    if not found:
        raise Unreachable(f"no local run of {experiment} is running here")
    newest = max(found, key=lambda each: each[0])[1]
    return newest["url"], newest["namespace"]


def _alive(pid: object) -> bool:
    """Whether the process `pid` runs (an announcement without one is taken as alive)."""
    if not isinstance(pid, int):
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # (another user's, alive)
        return True
    return True


class Reader:
    """The experiment's objects in `namespace`, as plain Kubernetes JSON."""

    def __init__(self, api: Any, namespace: str, experiment: str) -> None:
        self.api, self.namespace = api, namespace
        self.labels = {"app.kubernetes.io/instance": experiment, **PART_OF}

    def _list(self, kind: Any, **options: Any) -> list[dict[str, Any]]:
        return [item.to_dict() for item in self.api.list(kind, namespace=self.namespace, **options)]

    def jobs(self, labels: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """The experiment's Jobs (or those of `labels`, whatever experiment's)."""
        from lightkube.resources.batch_v1 import Job

        return self._list(Job, labels=labels or self.labels)

    def pods(self) -> list[dict[str, Any]]:
        from lightkube.resources.core_v1 import Pod

        return self._list(Pod, labels=self.labels)

    def events(self) -> list[dict[str, Any]]:
        """The events of the experiment's Jobs and pods, oldest first."""
        from lightkube.resources.core_v1 import Event

        names = {o["metadata"]["name"] for o in [*self.jobs(), *self.pods()]}
        mine = [e for e in self._list(Event) if e["involvedObject"].get("name") in names]
        return sorted(mine, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")

    def lines(
        self, pod: str, follow: bool = False, container: str | None = None, tail: int | None = None
    ) -> Iterator[tuple[str, str]]:
        """The lines of the pod's main container (or `container`; `tail`: its last ones
        only), each with the time the kubelet took it (RFC 3339); with `follow`, as they come
        until the container ends."""
        options = {"container": container, "tail_lines": tail}
        for line in self.api.log(
            pod,
            namespace=self.namespace,
            follow=follow,
            timestamps=True,
            newlines=False,
            **{k: v for k, v in options.items() if v is not None},
        ):
            when, _, text = line.partition(" ")
            yield when, text
