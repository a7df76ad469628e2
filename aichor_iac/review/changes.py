"""What `pulumi up` would do to go from one set of Kubernetes objects to another: create,
update in place, replace (delete, then create) or delete each object, and which fields change.

Objects are matched by kind, namespace and name (an experiment's resources are named for its
objects, so a renamed object is a new resource). An update becomes a replacement where
pulumi-kubernetes replaces rather than patches: the fields its `forceNew` table names, and the
fields the API server refuses to change, which the provider finds with a server-side dry run
(a Job's pod template). Pure: plain dicts in, plain data out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

Op = Literal["create", "update", "replace", "delete", "same"]
Key = tuple[str, str, str]  # kind, namespace, name

# Changes under these fields replace the object (pulumi-kubernetes provider/pkg/provider
# forceNew: metadata.name and .namespace for every kind, ConfigMap data, PVC spec, Service
# clusterIP and type, Secret type; a Job's selector and pod template are immutable in the API).
REPLACED_BY: dict[str, tuple[str, ...]] = {
    "ConfigMap": ("data", "binaryData"),
    "PersistentVolumeClaim": ("spec",),
    "Secret": ("type",),
    "Service": ("spec.clusterIP", "spec.type"),
    "Job": ("spec.selector", "spec.template", "spec.completionMode"),
}


@dataclass(frozen=True)
class FieldChange:
    path: str  # e.g. spec.template.spec.containers[0].image
    old: Any = None  # None: added
    new: Any = None  # None: removed


@dataclass(frozen=True)
class Change:
    op: Op
    key: Key
    fields: tuple[FieldChange, ...] = ()
    replaced_by: tuple[str, ...] = ()  # the fields that force a replacement


def key(obj: dict[str, Any]) -> Key:
    metadata = obj.get("metadata") or {}
    return (obj.get("kind", ""), metadata.get("namespace", ""), metadata.get("name", ""))


def plan(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[Change]:
    """One change per object: the new objects in their order, then the deleted ones in
    reverse (Pulumi deletes the newest first)."""
    before = {key(o): o for o in old}
    after = {key(o) for o in new}
    changes = [compare(before.get(key(o)), o) for o in new]
    changes += [Change("delete", k) for k in reversed(before) if k not in after]
    return changes


def compare(old: dict[str, Any] | None, new: dict[str, Any]) -> Change:
    if old is None:
        return Change("create", key(new))
    fields = tuple(field_changes(old, new))
    if not fields:
        return Change("same", key(new))
    forced = replaced_by(new, fields)
    return Change("replace" if forced else "update", key(new), fields, forced)


def field_changes(old: Any, new: Any, path: str = "") -> list[FieldChange]:
    """The leaves that differ. Lists of named items (containers, env, ports, volumes) are
    matched by name, as Kubernetes' strategic merge patch matches them (`env[WORLD_SIZE]`: a
    variable added first does not shift the others); other lists item by item."""
    if _named(old) and _named(new):
        before, after = {i["name"]: i for i in old}, {i["name"]: i for i in new}
        names = [*before, *(n for n in after if n not in before)]
        return [
            change
            for name in names
            for change in field_changes(before.get(name), after.get(name), f"{path}[{name}]")
        ]
    if isinstance(old, dict) and isinstance(new, dict):
        return [
            change
            for name in sorted(old.keys() | new.keys(), key=str)
            for change in field_changes(
                old.get(name), new.get(name), f"{path}.{name}" if path else str(name)
            )
        ]
    if isinstance(old, list) and isinstance(new, list):
        return [
            change
            for i in range(max(len(old), len(new)))
            for change in field_changes(
                old[i] if i < len(old) else None, new[i] if i < len(new) else None, f"{path}[{i}]"
            )
        ]
    return [] if old == new else [FieldChange(path, old, new)]


def _named(value: Any) -> bool:
    """A list whose items are objects with distinct names."""
    if not isinstance(value, list) or not value:
        return False
    names = [i.get("name") for i in value if isinstance(i, dict)]
    return len(names) == len(value) and None not in names and len(set(names)) == len(names)


def replaced_by(new: dict[str, Any], fields: tuple[FieldChange, ...]) -> tuple[str, ...]:
    """The immutable fields among the changed ones. An Indexed Job's completions may change
    with its parallelism (elastic Indexed Jobs, Kubernetes 1.31); any other Job's may not."""
    kind = new.get("kind", "")
    immutable = REPLACED_BY.get(kind, ())
    forced = {p for f in fields for p in immutable if _under(f.path, p)}
    if kind == "Job" and any(_under(f.path, "spec.completions") for f in fields):
        spec = new.get("spec") or {}
        elastic = spec.get("completionMode") == "Indexed" and spec.get("completions") == spec.get(
            "parallelism"
        )
        if not elastic:
            forced.add("spec.completions")
    return tuple(sorted(forced))


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith((prefix + ".", prefix + "["))


def counts(ops: Iterable[Op]) -> dict[Op, int]:
    """How many of each operation, in Pulumi's summary order (zeros left out)."""
    found = Counter(ops)
    order: tuple[Op, ...] = ("create", "update", "replace", "delete", "same")
    return {op: found[op] for op in order if found[op]}
