"""Rules across the fields of an experiment: which groups a framework needs and how many of
each, env names given once, the Ray versions and `ray start` flags this package knows."""

from __future__ import annotations

import json
import re

from ..problems import Problem
from .groups import RAY_ROLES, RULES, ReplicaType
from .model import Spec

RAY_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.\d+)?\Z")
# `ray start` flags that wire the cluster together (address, ports, auth, lifetime).
RAY_MANAGED_FLAGS = frozenset(
    {
        "head",
        "address",
        "block",
        "port",
        "node-ip-address",
        "redis-password",
        "dashboard-port",
        "dashboard-host",
        "ray-client-server-port",
    }
)


def check(spec: Spec) -> list[Problem]:
    """Rules across fields: which types an operator needs and how many of each."""
    op, types, problems = spec.operator, spec.types.present(), []
    rule = RULES[op]
    seen_env: set[str] = set()
    for i, var in enumerate(spec.env):
        if var.name in seen_env:
            problems.append(Problem(f"spec.env.{i}.name", f"'{var.name}' is given twice"))
        seen_env.add(var.name)
    for name, type_rule in rule.types.items():
        group = types.get(name)
        if type_rule.pools:
            if type_rule.required and not group:
                problems.append(Problem(f"spec.types.{name}", "give at least one worker pool"))
            continue
        if group is None:
            if type_rule.required:
                problems.append(Problem(f"spec.types.{name}", f"operator '{op}' needs a {name}"))
            continue
        assert not isinstance(group, list)  # (a pool's list: above)
        low, high = type_rule.count
        if low == high and group.count != low:
            problems.append(
                Problem(f"spec.types.{name}.count", f"must be {low}, not {group.count}")
            )
        elif high is not None and group.count > high:
            problems.append(Problem(f"spec.types.{name}.count", f"at most one {name}"))
    if rule.needs:
        names, path, sentence = rule.needs
        counted = [g for n, g in types.items() if n in names or not names]
        if not any(isinstance(g, ReplicaType) and g.count > 0 for g in counted):
            problems.append(Problem(path, sentence))
    if op in ("ray", "kuberay"):
        problems += _ray_rules(spec)
    if spec.debug.vscode.enabled:
        problems.append(
            Problem(
                "spec.debug.vscode.enabled",
                "VS Code sessions are AIchor's own service and are not run here: set it to false "
                "and use `kubectl exec -it` into a replica, or VS Code's Kubernetes extension "
                "(attach to a running pod)",
            )
        )
    return problems


def ray_version(spec: Spec) -> tuple[int, int] | None:
    """`rayVersion` as (major, minor); None when not given (the newest 2.x is assumed)."""
    if spec.ray_version is None:
        return None
    match = RAY_VERSION.match(spec.ray_version)
    return (int(match.group(1)), int(match.group(2))) if match else None


RAY_FLAG = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*\Z")  # a `ray start` option's name


def ray_flag(key: str) -> str:
    """A `rayStartParams` key as the `ray start` flag it names (`num_cpus` is `num-cpus`)."""
    return key.lstrip("-").replace("_", "-")


def _ray_rules(spec: Spec) -> list[Problem]:
    """Ray versions this package knows the flags of, and the `ray start` flags it owns."""
    problems = []
    if spec.ray_version is not None:
        version = ray_version(spec)
        if version is None or not (1, 6) <= version < (3, 0):
            problems.append(
                Problem(
                    "spec.rayVersion",
                    f"'{spec.ray_version}' is not a supported Ray version: give 1.6 to 2.x, "
                    "e.g. '2.9.3'",
                )
            )
        elif spec.operator == "kuberay" and version < (2, 0):
            problems.append(
                Problem(
                    "spec.rayVersion",
                    "operator 'kuberay' submits with the Ray Jobs API of Ray 2.0 and later; "
                    "use operator 'ray' for Ray 1.x",
                )
            )
    pools = spec.types.get("Workers") or []
    seen: set[str] = set()
    for i, pool in enumerate(pools):
        where = f"spec.types.Workers.{i}.name"
        if pool.name in seen:
            problems.append(Problem(where, f"duplicate pool name '{pool.name}'"))
        seen.add(pool.name)
        if pool.name in RAY_ROLES:
            problems.append(
                Problem(
                    where, f"'{pool.name}' names the {pool.name} group's Job; choose another name"
                )
            )
    groups = [("Head", spec.types.get("Head")), ("Job", spec.types.get("Job"))]
    groups += [(f"Workers.{i}", pool) for i, pool in enumerate(pools)]
    for path, group in groups:
        if group is None:
            continue
        for key, value in group.ray_start_params.items():
            flag = ray_flag(key)
            where = f"spec.types.{path}.rayStartParams.{key}"
            if not RAY_FLAG.match(flag):
                problems.append(
                    Problem(
                        where,
                        "is not a `ray start` option: lowercase letters, digits and '-' or '_' "
                        "(e.g. num-cpus)",
                    )
                )
            elif flag in RAY_MANAGED_FLAGS:
                problems.append(
                    Problem(where, f"--{flag} is set by aichor-iac; remove it from rayStartParams")
                )
            elif flag == "resources" and not _json_object(value):
                problems.append(Problem(where, "must be a JSON object such as '{\"TPU\": 4}'"))
    return problems


def _json_object(value: object) -> bool:
    try:
        return isinstance(json.loads(str(value)), dict)
    except ValueError:
        return False
