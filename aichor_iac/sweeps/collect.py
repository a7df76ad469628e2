"""Katib's File metrics collector without its sidecar: where Katib's pod webhook mounts an
emptyDir (`metrics-volume`) at the metrics file's directory in the trial's primary container
and a sidecar reads the file once that container has ended, here the primary container runs
its command and then prints the file's lines, each after MARKER, its exit status kept; `status`
reads the marked lines as Katib's collector reads the file (TEXT: its filters; JSON: an object
per line, string values). The path and the command are the script's arguments: nothing of the
user's is in the script.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

from .. import pods
from ..experiment.trial import MARKER, Objective, Stopping
from ..problems import Problem

DEFAULT_PATH = "/var/log/katib/metrics.log"  # Katib's default (`common.DefaultFilePath`)
VOLUME = "metrics-volume"  # Katib's volume name (`common.MetricsVolume`)
PRINT = (
    'f="$1"; shift; "$@"; s=$?; if [ -f "$f" ]; then '
    'while IFS= read -r l || [ -n "$l" ]; do printf "%s%s\\n" '
    f"'{MARKER}'"
    ' "$l"; done < "$f"; fi; exit "$s"'
)


# Early stopping's check (`pods.stopping.main`, its source the first argument), run by the
# image's python3; an image without one runs the command alone (its rule is then read back)
STOP = (
    'p="$1"; r="$2"; shift 2; if command -v python3 >/dev/null 2>&1; then '
    'exec python3 -c "$p" "$r" "$@"; fi; '
    'echo "aichor: no python3 in the image: its early stopping rule ends no process" >&2; '
    'exec "$@"'
)


def file_source(given: Mapping[str, object], filtered: bool) -> tuple[str, bool, list[Problem]]:
    """The File collector's path and whether its format is JSON, from its `fileSystemPath`
    (`given`) with Katib's defaults (its path /var/log/katib/metrics.log, TEXT), and the
    webhook's problems with them (`filtered`: the source gives a filter too)."""
    where = "spec.metricsCollectorSpec.source"
    path, kind = given.get("path") or DEFAULT_PATH, given.get("kind") or "File"
    form = given.get("format") or "TEXT"
    problems = []
    if kind != "File" or not isinstance(path, str) or not path.startswith("/"):
        reason = "the File collector needs the metrics file's absolute path (kind: File)"
        problems.append(Problem(f"{where}.fileSystemPath.path", reason))
    elif posixpath.dirname(path) == "/":
        reason = "its directory becomes an emptyDir: give a file in a directory of its own"
        problems.append(Problem(f"{where}.fileSystemPath.path", reason))
    if form not in ("TEXT", "JSON"):
        problems.append(Problem(f"{where}.fileSystemPath.format", "TEXT or JSON"))
    if form == "JSON" and filtered:
        reason = "filter must be nil when format is JSON (each line is a JSON object)"
        problems.append(Problem(f"{where}.filter", reason))
    return str(path), form == "JSON", problems


def with_file(document: dict[str, Any], primary: str | None, path: str) -> list[Problem]:
    """The trial's resource with each pod template's primary container printing the metrics
    file after its command (`document`, changed in place), or the problems that prevent it."""
    found, problems = _primaries(
        document,
        primary,
        "the File collector reads the primary container's file",
        "the File collector prints the metrics file once {}'s command has ended",
    )
    if problems:
        return problems
    for pod, container in found:
        command, args = container["command"], container.get("args") or []
        mounts, volumes = container.get("volumeMounts") or [], pod.get("volumes") or []
        if not all(isinstance(v, list) for v in (command, args, mounts, volumes)):
            continue  # (left as given: the trial's door names what is wrong)
        container["command"] = ["/bin/sh", "-c", PRINT, "aichor-metrics", path, *command, *args]
        container.pop("args", None)
        mount = {"name": VOLUME, "mountPath": posixpath.dirname(path)}
        if any(m.get("mountPath") == mount["mountPath"] for m in mounts if isinstance(m, dict)):
            reason = (
                f"{primary} mounts a volume at {mount['mountPath']}, where the File "
                "collector mounts its own (as Katib does): give the metrics file a "
                "directory of its own"
            )
            return [Problem("spec.metricsCollectorSpec.source.fileSystemPath.path", reason)]
        container["volumeMounts"] = [*mounts, mount]
        pod["volumes"] = [*volumes, {"name": VOLUME, "emptyDir": {}}]
    return []


def with_stopping(document: dict[str, Any], primary: str | None, rule: StopRule) -> list[Problem]:
    """The trial's resource with each pod template's primary container running its command
    under its early stopping rule (`pods.stopping.main`, with python3 where the image has
    it), as Katib's collector watches the primary container's output (`document`, changed in
    place); or the problems that prevent it."""
    found, problems = _primaries(
        document,
        primary,
        "early stopping watches the primary container's output",
        "early stopping watches the output of {}'s command",
    )
    if problems:
        return problems
    for _, container in found:
        command, args = container["command"], container.get("args") or []
        if isinstance(command, list) and isinstance(args, list):
            container["command"] = under_rule(rule, [*command, *args])
            container.pop("args", None)
    return []


class StopRule(TypedDict):
    """A trial's early stopping rule, as `pods.stopping.main` reads its JSON argument."""

    metric: str
    formats: list[str]  # the objective's filters (Katib's metricsFormat)
    start_step: int
    rule: float | None  # the median of the trials before (None: too few had succeeded)
    maximize: bool
    reported: NotRequired[bool]  # the values come from progress reports, printed as lines


def rule_of(stopping: Stopping, objective: Objective, reported: bool = False) -> StopRule:
    """A trial's early stopping rule as the check in its pod takes it (`pods.stopping.main`):
    the objective's values read with its filters from the output (`reported`: from the trial's
    progress reports, each printed as a line first)."""
    found: StopRule = {
        "metric": objective.metric,
        "formats": list(objective.formats or ()),
        "start_step": stopping.start_step,
        "rule": stopping.rule,
        "maximize": objective.direction == "maximize",
    }
    if reported:
        found["reported"] = True
    return found


def under_rule(rule: StopRule, command: list[str]) -> list[str]:
    """A command run under its early stopping rule's check in its pod (`pods.stopping.main`,
    its source run by the image's python3): the rule and the command are its arguments."""
    given = json.dumps(rule, separators=(",", ":"))
    return ["/bin/sh", "-c", STOP, "aichor-stop", pods.source("stopping"), given, *command]


def _primaries(
    document: dict[str, Any], primary: str | None, unnamed: str, bare: str
) -> tuple[list[tuple[dict[str, Any], dict[str, Any]]], list[Problem]]:
    """Each pod template of the resource and its primary container (each with a command), or
    the problem that stops a collector there: `unnamed` (no primary container named), `bare`
    (its container, `{}`, has no command)."""
    where = "spec.trialTemplate.primaryContainerName"
    if not primary:
        return [], [Problem(where, f"{unnamed}: name it")]
    found = []
    for pod in _pod_specs(document):
        for container in pod.get("containers") or []:
            if not isinstance(container, dict) or container.get("name") != primary:
                continue
            if not container.get("command"):
                reason = (
                    f"{bare.format(primary)}: give the container its command (no image is "
                    "read here)"
                )
                return [], [Problem(where, reason)]
            found.append((pod, container))
    if not found:
        reason = f"no pod template of the trial has a container named {primary}"
        return [], [Problem(where, reason)]
    return found, []


def _pod_specs(node: Any) -> list[dict[str, Any]]:
    """Every pod spec in a resource: each `template.spec` that has containers."""
    found = []
    if isinstance(node, dict):
        template = node.get("template")
        pod = template.get("spec") if isinstance(template, dict) else None
        if isinstance(pod, dict) and isinstance(pod.get("containers"), list):
            found.append(pod)
        for value in node.values():
            found += _pod_specs(value)
    elif isinstance(node, list):
        for value in node:
            found += _pod_specs(value)
    return found
