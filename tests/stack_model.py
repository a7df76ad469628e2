"""A stack's lifetime as the real engine runs it: up, up again, destroy, up again (`Stack`):
what it creates, replaces and deletes, and the cluster's objects across those runs (the
awaits within one `up` are tests/pulumi_up.py's)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aichor_iac.engine import Rendering, Resource
from aichor_iac.review import changes


class AlreadyExists(Exception):
    """pulumi-kubernetes 4.29+: a Create finds the object there (client-side create)."""


def key(r: Resource) -> changes.Key:
    """The object a resource is (kind, namespace, name), as `preview --diff` matches them."""
    return changes.key(r.inputs)


@dataclass
class Stack:
    """A stack's state and the cluster's objects across runs of the real engine:

    - `up` creates the resources whose URN the state lacks, replaces (delete, then create:
      `deleteBeforeReplace`) those whose object changed name, and deletes at the end the
      ones the program no longer registers (Pulumi's create-then-delete for a new URN);
    - `destroy` deletes them all, newest first;
    - a deletion of a `retainOnDelete` resource only forgets it (Pulumi); deleting a
      Namespace deletes every object in it (Kubernetes);
    - a create of an object that exists fails with AlreadyExists unless the provider's
      `upsertExistingObjects` is set, which adopts it as it is (pulumi-kubernetes 4.29).

    `cluster` holds each object's contents (a volume's data)."""

    upsert: bool = False
    state: dict[str, Resource] = field(default_factory=dict)
    cluster: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)

    def up(self, rendering: Rendering) -> None:
        wanted = [r for r in rendering.resources if r.is_kubernetes]
        for r in wanted:
            old = self.state.get(r.urn)
            if old is not None and key(old) != key(r):
                self._delete(old)
                old = None
            if old is None:
                self._create(r)
            self.state[r.urn] = r
        for urn in reversed([u for u in self.state if u not in {r.urn for r in wanted}]):
            self._delete(self.state.pop(urn))

    def destroy(self) -> None:
        for urn in reversed(list(self.state)):
            self._delete(self.state.pop(urn))

    def _create(self, r: Resource) -> None:
        if key(r) in self.cluster and not self.upsert:
            kind, namespace, name = key(r)
            raise AlreadyExists(f"{kind} {namespace}/{name} already exists".replace(" /", " "))
        self.cluster.setdefault(key(r), {})

    def _delete(self, r: Resource) -> None:
        if r.options.get("retainOnDelete"):
            return
        kind, _, name = key(r)
        self.cluster.pop(key(r), None)
        if kind == "Namespace":
            for k in [k for k in self.cluster if k[1] == name]:
                del self.cluster[k]
