"""Several experiments in one file: which of the objects given beside them each one uses, and
what a file of several needs (a name for each). A stack runs every experiment of its file; an
object beside them is created once, with the experiment that uses it.

An experiment uses an object beside it when it names the object (a volume's ConfigMap, a
`serviceAccountName`, a Secret in `envFrom`), when the object names the experiment (a
Service selecting `ray.io/cluster: <its name>`), or through another such object (the
RoleBinding of its ServiceAccount, and that binding's Role).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..experiment.model import Experiment
from ..problems import Problem
from ..reading.text import Document

AICHOR = "AIchorManifest"  # (an AIchor manifest's kind, which it may leave out)


def users(
    mains: list[Document], beside: list[Document], kept: list[dict[str, Any]]
) -> tuple[list[list[dict[str, Any]]], list[Problem]]:
    """For each experiment (`mains`), the objects beside them it uses (of `kept`, as
    `companions.read` gives them), and a problem for each object used by none or by several.
    One experiment uses them all."""
    if len(mains) == 1:
        return [list(kept)], []
    names = [_name(d.data) for d in mains]
    words = [set(_strings(d.data)) for d in mains]
    objects = {(o["kind"], o["metadata"]["name"]): o for o in kept}
    given = [d for d in beside if _key(d.data) in objects]
    said = [set(_strings(d.data)) for d in given]
    owners = [
        {i for i, name in enumerate(names) if _name(d.data) in words[i] or name in said[j]}
        for j, d in enumerate(given)
    ]
    changed = True
    while changed:  # through the objects that name each other
        changed = False
        for j, d in enumerate(given):
            for k, other in enumerate(given):
                linked = _name(other.data) in said[j] or _name(d.data) in said[k]
                if k != j and linked and not owners[k] <= owners[j]:
                    owners[j] |= owners[k]
                    changed = True
    uses: list[list[dict[str, Any]]] = [[] for _ in mains]
    problems = []
    for d, found in zip(given, owners, strict=True):
        kind, name = _key(d.data)
        if len(found) == 1:
            uses[found.pop()].append(objects[kind, name])
            continue
        reason = _unowned(sorted(names[i] for i in found))
        problems.append(Problem(f"{kind} {name}", reason, d.line))
    return uses, problems


def unnamed(experiments: list[Experiment], mains: list[Document]) -> list[Problem]:
    """A problem for each experiment of several without a name: each would take the stack's."""
    if len(experiments) < 2:
        return []
    reason = (
        "one of several experiments in this file, and it has no name: each needs its own "
        "(an unnamed one takes the stack's, as would every other)"
    )
    return [
        Problem("name" if d.data.get("kind", AICHOR) == AICHOR else "metadata.name", reason, d.line)
        for e, d in zip(experiments, mains, strict=True)
        if not (e.name or e.generate_name)
    ]


def refusal(experiments: tuple[Experiment, ...]) -> Problem:
    """Why a file of several experiments is not read as one."""
    names = ", ".join(e.name or e.generate_name or "(no name)" for e in experiments)
    return Problem(
        "",
        f"holds {len(experiments)} experiments ({names}): read them with "
        "aichor_iac.load_all (a stack runs every experiment of its file)",
    )


def _unowned(owners: list[str]) -> str:
    if not owners:
        return (
            "used by none of the experiments of this file (it names none of them, and none "
            "names it): put it in the file of the experiment that uses it, or remove it"
        )
    return (
        f"used by {' and '.join(owners)}: an object beside the experiments is created once, "
        "with the one experiment that uses it; give each its own (a name of its own), or "
        "create it beside the stack (kubectl apply) and remove it from this file"
    )


def _key(data: dict[str, Any]) -> tuple[str, str]:
    return str(data.get("kind")), _name(data)


def _name(data: dict[str, Any]) -> str:
    """A document's name: metadata.name (a custom resource, an object), else `name` (an
    AIchor manifest)."""
    metadata = data.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else data.get("name")
    return name if isinstance(name, str) else ""


def _strings(value: Any) -> Iterator[str]:
    """Every string value in a document (not its keys)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
