"""Places in a plain object (a rendered Kubernetes object) that a path of steps leads to, each
with a readable path (`spec.template.spec.containers[main].env[0].name`). Steps, joined by
`.`: a key, or keys `a|b`; `*` every list item or map value; `~` every map key (the place's
value is the key); a leading `**` any depth (then a key or keys).

Pure: no import beyond the standard library (`limits` applies its rules with it).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


class Places:
    """Where paths lead in one object; its map entries are indexed once, for every `**` path."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj
        self._keyed: Keyed | None = None

    def of(self, path: str) -> Iterator[tuple[str, Any]]:
        """(path, value) of every place `path` leads to, in the order of a walk from the top."""
        steps = path.split(".") if path else []
        if steps[:1] != ["**"]:
            return _reach(self.obj, steps, "")
        if self._keyed is None:
            self._keyed = _keyed(self.obj)
        return _anywhere(self._keyed, steps[1:])


# Every map entry of an object at any depth, by key: (its map's rank in a walk from the top,
# its path, its value).
Keyed = dict[str, list[tuple[int, str, Any]]]


def _keyed(obj: Any) -> Keyed:
    """`obj`'s map entries as `Keyed`."""
    keyed: Keyed = {}
    pending = [("", obj)]
    rank = 0
    while pending:  # (depth first, children in order: the walk `_reach` makes)
        where, node = pending.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                keyed.setdefault(key, []).append((rank, _join(where, key), value))
        pending.extend(reversed(list(_children(node, where))))
        rank += 1
    return keyed


def _anywhere(keyed: Keyed, steps: list[str]) -> Iterator[tuple[str, Any]]:
    """`_reach` of `**.steps`: the first step's keys wherever they are, in the walk's order
    (within a map, in the order the step names them)."""
    keys = steps[0].split("|")
    found = [
        (rank, keys.index(k), where, value) for k in keys for rank, where, value in keyed.get(k, ())
    ]
    for _, _, where, value in sorted(found, key=lambda entry: entry[:2]):
        yield from _reach(value, steps[1:], where)


def _reach(node: Any, steps: list[str], where: str) -> Iterator[tuple[str, Any]]:
    """(path, value) of every place the steps lead to from `node`."""
    if not steps:
        yield where, node
        return
    step, rest = steps[0], steps[1:]
    if step == "*":
        for path, child in _children(node, where):
            yield from _reach(child, rest, path)
    elif step == "~":
        if isinstance(node, dict):
            yield from ((f"{where}[{key!r}]", key) for key in node)
    elif isinstance(node, dict):
        for key in step.split("|"):
            if key in node:
                yield from _reach(node[key], rest, _join(where, key))


def _children(node: Any, where: str) -> Iterator[tuple[str, Any]]:
    """A list's items (named by their `name` where they have one) or a map's values."""
    if isinstance(node, dict):
        yield from ((_join(where, key), value) for key, value in node.items())
    elif isinstance(node, list):
        for i, item in enumerate(node):
            name = item.get("name") if isinstance(item, dict) else None
            yield f"{where}[{name if isinstance(name, str) else i}]", item


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key
