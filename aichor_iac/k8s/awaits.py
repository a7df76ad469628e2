"""How `pulumi up` waits for each Kubernetes object before it creates the objects that depend
on it (pulumi-kubernetes' `provider/pkg/await`, 4.24+): what it waits for, and whether that
holds for the live object. The local run creates its Jobs in this order, and the test engine
(tests/pulumi_up.py) models `pulumi up` with it.

- `pulumi.com/skipAwait: "true"`: nothing.
- `pulumi.com/waitFor: jsonpath=…`: the expression matches the live object (never fails early:
  a failed Job just never matches).
- Neither: a Job until its `Complete` condition (its `Failed` condition fails `up` at once), a
  Deployment until its pod runs; Secrets, ConfigMaps, Services, … hold at once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Any

SKIP_AWAIT, WAIT_FOR = "pulumi.com/skipAwait", "pulumi.com/waitFor"
# A Job that has ended, succeeded or failed: its Complete or Failed condition is True (a
# trial that a later trial of its sweep waits for; a failure must not stop the sweep)
ENDED = (
    'jsonpath={$.status.conditions[?@.status=="True" && (@.type=="Complete" || @.type=="Failed")]}'
)


class Mode(Enum):
    """How `pulumi up` waits for a Job (the three forms above)."""

    NOTHING = "nothing"  # pulumi.com/skipAwait
    CONDITION = "condition"  # pulumi.com/waitFor: until a JSONPath matches
    COMPLETION = "completion"  # the provider's own Job await


@dataclass(frozen=True)
class Await:
    """What `pulumi up` waits for on a Job: its mode, and a CONDITION's JSONPath."""

    mode: Mode
    wait_for: str = ""

    @property
    def annotations(self) -> dict[str, str]:
        """The Job's annotations that ask for it."""
        if self.mode is Mode.NOTHING:
            return {SKIP_AWAIT: "true"}
        return {WAIT_FOR: self.wait_for} if self.mode is Mode.CONDITION else {}

    @property
    def until_up(self) -> bool:
        """Whether the Job is awaited until its pods are up (not until it has ended)."""
        return self.mode is Mode.CONDITION and self.wait_for != ENDED


NOTHING, COMPLETION = Await(Mode.NOTHING), Await(Mode.COMPLETION)


class AwaitFailed(Exception):
    """`pulumi up` fails: an object awaited until it completes failed."""


def awaited(obj: dict[str, Any]) -> str:
    """What pulumi-kubernetes waits for before it reports `obj` created: `nothing`, a
    waitFor expression, `completion` or `its pod to run`."""
    annotations = obj["metadata"].get("annotations") or {}
    if annotations.get(SKIP_AWAIT) == "true":
        return "nothing"
    if WAIT_FOR in annotations:
        return annotations[WAIT_FOR]
    return {"Job": "completion", "Deployment": "its pod to run"}.get(obj["kind"], "nothing")


def holds(obj: dict[str, Any], status: dict[str, Any]) -> bool:
    """Whether `obj`'s await holds now that its `.status` is `status` (a Job's, the only kind
    awaited on its status here); AwaitFailed when it has failed for good."""
    condition = awaited(obj)
    if condition in ("nothing", "its pod to run"):
        return True
    live = {**obj, "status": status}
    if condition != "completion":
        return waitfor_holds(condition, live)
    if job_failed(status):
        raise AwaitFailed(f"{obj['kind']}/{obj['metadata']['name']} failed")
    conditions = status.get("conditions", [])
    return any(c["type"] == "Complete" and c["status"] == "True" for c in conditions)


def job_failed(status: dict[str, Any] | None) -> bool:
    """Whether a Job's `.status` (None before it has one) holds its Failed condition."""
    conditions = (status or {}).get("conditions") or []
    return any(c.get("type") == "Failed" and c.get("status") == "True" for c in conditions)


def waitfor_holds(expression: str, live: dict[str, Any]) -> bool:
    """Whether `pulumi.com/waitFor: jsonpath=…` holds for the live object: the provider's
    Parse (`{…}` around the path, `$` added, one `=value` after it, `==` kept) and its Matches
    (the first node selected; a map or list matches when no value is asked; else the value
    printed as Go prints it equals the asked one), from provider/pkg/jsonpath."""
    import jsonpath_rfc9535  # (only a waitFor needs it; `validate` builds objects without it)

    raw = expression.removeprefix("jsonpath=")
    parts = raw.replace("==", "\0").split("=")
    braced = re.search(r"\{\s*(.*?)\s*\}", parts[0].replace("\0", "=="))
    if raw == expression or len(parts) > 2 or not braced:
        raise ValueError(f"the provider refuses waitFor {expression!r}")
    value = "=".join(parts[1:]).replace("\0", "==")
    query = braced.group(1) if braced.group(1).startswith("$") else "$" + braced.group(1)
    found = jsonpath_rfc9535.find(query, live).values()
    if not found:
        return False
    first = found[0]
    if isinstance(first, dict | list):
        return not value
    printed = str(first).lower() if isinstance(first, bool) else str(first)
    return not value or printed == value
