"""The experiment's needs against what the cluster holds (pure: its objects as Kubernetes
JSON in, lines out): ResourceQuota headroom, LimitRange bounds, the namespace's Pod Security
level, and a node for each workload's pods."""

from __future__ import annotations

import copy
import json
from collections import Counter
from typing import Any

from ..rules.limits import quantity
from . import Line, podsecurity
from .needs import Pods, containers, object_totals, pod_amount, pod_totals, resource_names

POD_SECURITY = "pod-security.kubernetes.io/enforce"
SHOWN = 3  # problems listed on a line; the others counted
KINDS = ("requests", "limits")


def _listed(problems: list[str]) -> str:
    more = f" (and {len(problems) - SHOWN} more)" if len(problems) > SHOWN else ""
    return "; ".join(problems[:SHOWN]) + more


def _number(value: float) -> str:
    return f"{value:g}" if value < 1e6 else f"{value / 2**30:.3g}Gi"


def defaulted(spec: dict[str, Any], ranges: list[dict[str, Any]]) -> dict[str, Any]:
    """The pod spec as admission leaves it: each container's requests default to its limits
    (the API's defaulting), then the LimitRanges' `default` and `defaultRequest` fill what is
    missing (the LimitRanger admission plugin)."""
    spec = copy.deepcopy(spec)
    items = [i for r in ranges for i in r.get("spec", {}).get("limits", [])]
    for c in containers(spec):
        resources = c.setdefault("resources", {})
        limits, requests = resources.setdefault("limits", {}), resources.setdefault("requests", {})
        for name, value in limits.items():
            requests.setdefault(name, value)
        for item in (i for i in items if i.get("type") == "Container"):
            for name, value in (item.get("default") or {}).items():
                limits.setdefault(name, value)
            # (the API server defaults each `defaultRequest` to its `default`)
            given = {**(item.get("default") or {}), **(item.get("defaultRequest") or {})}
            for name, value in given.items():
                requests.setdefault(name, value)
    return spec


def quota(objects: list[dict[str, Any]], workloads: list[Pods], quotas: list[dict]) -> list[Line]:
    """Each ResourceQuota's headroom against the experiment's usage: its objects, and its
    pods (`workloads`, as admission leaves them: `defaulted`) all at once."""
    lines = []
    for q in quotas:
        name = q["metadata"]["name"]
        mine = [w for w in workloads if _in_scope(w, q.get("spec", {}))]
        usage = {**pod_totals(mine), **(object_totals(objects) if _unscoped(q) else {})}
        hard = (q.get("status") or {}).get("hard") or q.get("spec", {}).get("hard", {})
        used = (q.get("status") or {}).get("used") or {}
        short = []
        for key, limit in sorted(hard.items()):
            need = usage.get(_usage_key(key), 0.0)
            left = quantity(limit) - quantity(used.get(key, 0))
            if need > left + 1e-9:
                short.append(f"{key}: {_number(need)} needed, {_number(max(left, 0))} left")
        short += _unstated(mine, hard)
        fix = f"ask for more in ResourceQuota {name}, or make the experiment smaller"
        lines.append(_verdict(f"quota {name}", short, fix, "room for every pod at once"))
    return lines


def _verdict(check: str, problems: list[str], fix: str, fine: str) -> Line:
    """The check's line: blocked by its problems (the first few), else ok (`fine`)."""
    if problems:
        return Line(check, "blocked", _listed(problems), fix)
    return Line(check, "ok", fine)


def _usage_key(key: str) -> str:
    """A quota key as `needs.totals` names it (`cpu` is `requests.cpu`, `count/pods` pods)."""
    if key in ("cpu", "memory", "ephemeral-storage"):
        return f"requests.{key}"
    if key.startswith("count/") and "." not in key:
        return key.removeprefix("count/")
    return key


def _unscoped(q: dict[str, Any]) -> bool:
    spec = q.get("spec", {})
    return not spec.get("scopes") and not spec.get("scopeSelector")


def _in_scope(workload: Pods, spec: dict[str, Any]) -> bool:
    """Whether a quota's scopes (and scope selector) take in the workload's pods."""
    pod = workload.spec
    best_effort = not any(
        (c.get("resources") or {}).get(kind)
        for c in containers(pod)
        for kind in ("requests", "limits")
    )
    facts = {
        "BestEffort": best_effort,
        "NotBestEffort": not best_effort,
        "Terminating": "activeDeadlineSeconds" in pod,
        "NotTerminating": "activeDeadlineSeconds" not in pod,
        "CrossNamespacePodAffinity": False,
    }
    expressions = [{"scopeName": s, "operator": "Exists"} for s in spec.get("scopes", [])]
    expressions += (spec.get("scopeSelector") or {}).get("matchExpressions", [])
    for e in expressions:
        if e["scopeName"] == "PriorityClass":
            value = pod.get("priorityClassName")
            values, op = e.get("values", []), e["operator"]
            held = {
                "In": value in values,
                "NotIn": value not in values,
                "Exists": value is not None,
                "DoesNotExist": value is None,
            }.get(op, False)
        else:
            held = facts.get(e["scopeName"], False) == (e["operator"] != "DoesNotExist")
        if not held:
            return False
    return True


def _unstated(workloads: list[Pods], hard: dict[str, Any]) -> list[str]:
    """A quota that counts cpu or memory refuses a pod whose containers do not state it."""
    found = []
    for key in hard:
        kind, _, name = _usage_key(key).partition(".")
        if kind not in ("requests", "limits") or name not in ("cpu", "memory"):
            continue
        for w in workloads:
            for c in containers(w.spec):
                if name not in ((c.get("resources") or {}).get(kind) or {}):
                    found.append(f"{key} is counted, and {w.owner} container {c['name']} has none")
    return found


def limit_ranges(
    objects: list[dict[str, Any]], workloads: list[Pods], ranges: list[dict[str, Any]]
) -> list[Line]:
    """Each LimitRange's bounds against each container, pod and claim."""
    claims = [o for o in objects if o["kind"] == "PersistentVolumeClaim"]
    lines = []
    for r in ranges:
        name, problems = r["metadata"]["name"], []
        for item in r.get("spec", {}).get("limits", []):
            for w in workloads:
                problems += _bounded(w, item)
            if item.get("type") == "PersistentVolumeClaim":
                problems += [p for claim in claims for p in _claim_bounded(claim, item)]
        fix = f"fit the replicas' resources within LimitRange {name}, or ask to widen it"
        lines.append(_verdict(f"limits {name}", problems, fix, "every container within its bounds"))
    return lines


def _claim_bounded(claim: dict[str, Any], item: dict[str, Any]) -> list[str]:
    """A claim's storage request against a PersistentVolumeClaim item's min and max."""
    asked = claim["spec"].get("resources", {}).get("requests", {}).get("storage", "0")
    at = f"PersistentVolumeClaim/{claim['metadata']['name']}"
    found = []
    if (bound := (item.get("max") or {}).get("storage")) and quantity(asked) > quantity(bound):
        found.append(f"{at}: storage {asked} > max {bound}")
    if (bound := (item.get("min") or {}).get("storage")) and quantity(asked) < quantity(bound):
        found.append(f"{at}: storage {asked} < min {bound}")
    return found


def _bounded(workload: Pods, item: dict[str, Any]) -> list[str]:
    """What in the workload's pods breaks one LimitRange item (Container or Pod)."""
    kind, spec = item.get("type"), workload.spec
    if kind == "Container":
        parts = [(f"container {c['name']}", c.get("resources") or {}) for c in containers(spec)]
    elif kind == "Pod":
        names = resource_names(spec)
        parts = [("the pod", {k: {n: pod_amount(spec, k, n) for n in names} for k in KINDS})]
    else:
        return []
    found = []
    for where, resources in parts:
        limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
        at = f"{workload.owner} {where}"
        for name, bound in (item.get("max") or {}).items():
            if name not in limits or quantity(limits[name]) > quantity(bound):
                found.append(f"{at}: {name} limit {limits.get(name, 'none')} > max {bound}")
        for name, bound in (item.get("min") or {}).items():
            if name not in requests or quantity(requests[name]) < quantity(bound):
                found.append(f"{at}: {name} request {requests.get(name, 'none')} < min {bound}")
        for name, ratio in (item.get("maxLimitRequestRatio") or {}).items():
            asked, limit = quantity(requests.get(name, 0)), quantity(limits.get(name, 0))
            if asked and limit / asked > quantity(ratio):
                found.append(f"{at}: {name} limit/request > {ratio}")
    return found


def pod_security(workloads: list[Pods], labels: dict[str, str]) -> Line:
    """The namespace's enforced Pod Security level against every pod."""
    level = labels.get(POD_SECURITY)
    checked = level if level in podsecurity.LEVELS else "baseline"
    problems = [
        f"{w.owner}: {problem}"
        for w in workloads
        for problem in podsecurity.violations(w.spec, w.metadata.get("annotations") or {}, checked)
    ]
    if level is None:
        if not problems:
            return Line("pod security", "ok", "no enforce label, and every pod passes baseline")
        detail = (
            "no enforce label: the cluster's default decides; baseline would refuse "
            + _listed(problems)
        )
        return Line("pod security", "unknown", detail, "ask which level the cluster enforces")
    if not problems:
        return Line("pod security", "ok", f"every pod passes {level}")
    fixes = [f"the namespace enforces {level}"]
    if any("runAsNonRoot" in p for p in problems):
        fixes.append("set aichor:runAsNonRoot (an image whose user is not root)")
    if any("IPC_LOCK" in p for p in problems):
        fixes.append("RDMA needs IPC_LOCK, which only privileged allows")
    fixes.append("change those fields, or run in a namespace that allows them")
    return Line("pod security", "blocked", f"{level}: " + _listed(problems), "; ".join(fixes))


def nodes(workloads: list[Pods], found: list[dict[str, Any]]) -> list[Line]:
    """For each workload (one line for those with the same pods), whether some schedulable
    node satisfies its pods' node selector, required node affinity, tolerations and requests
    (its allocatable resources: an empty node)."""
    alike: dict[str, list[Pods]] = {}
    for w in workloads:
        needs = {n: pod_amount(w.spec, "requests", n) for n in resource_names(w.spec)}
        alike.setdefault(json.dumps([_placement(w.spec), needs], sort_keys=True), []).append(w)
    lines = []
    ready = [n for n in found if not n.get("spec", {}).get("unschedulable")]
    for group in alike.values():
        w, check = group[0], "nodes for " + ", ".join(w.owner for w in group)
        needs = {n: pod_amount(w.spec, "requests", n) for n in resource_names(w.spec)}
        misfits = {n["metadata"]["name"]: _misfit(w.spec, needs, n) for n in ready}
        fit = sorted(name for name, why in misfits.items() if why is None)
        if fit:
            lines.append(Line(check, "ok", f"{len(fit)} of {len(found)} fit: {_listed(fit)}"))
            continue
        reasons = Counter(why for why in misfits.values())
        detail = f"none of {len(found)} nodes fits: " + "; ".join(
            f"{count} {why}" for why, count in reasons.most_common(SHOWN)
        )
        fix = (
            "change the group's node selector, GPU product or resources to what the nodes have, "
            "or ask for such nodes (with a cluster autoscaler that adds them, this is no blocker)"
        )
        lines.append(Line(check, "blocked", detail, fix))
    return lines


def _placement(spec: dict[str, Any]) -> list[Any]:
    return [spec.get("nodeSelector"), spec.get("affinity"), spec.get("tolerations")]


def _misfit(spec: dict[str, Any], needs: dict[str, float], node: dict[str, Any]) -> str | None:
    """Why the node cannot run the pod (the first reason), or None."""
    labels = node["metadata"].get("labels") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return f"lack {key}={value}"
    affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = required.get("nodeSelectorTerms") or []
    if terms and not any(_term_holds(t, labels, node["metadata"]["name"]) for t in terms):
        return "match no required node affinity term"
    for taint in node.get("spec", {}).get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not any(
            _tolerates(t, taint) for t in spec.get("tolerations") or []
        ):
            return f"have taint {taint['key']}={taint.get('value', '')}:{taint['effect']}"
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    for name, need in sorted(needs.items()):
        if need > quantity(allocatable.get(name, 0)) + 1e-9:
            return f"have less {name} than {_number(need)} allocatable"
    return None


def _term_holds(term: dict[str, Any], labels: dict[str, str], name: str) -> bool:
    fields = {"metadata.name": name}
    checks = [(e, labels.get(e["key"])) for e in term.get("matchExpressions") or []]
    checks += [(e, fields.get(e["key"])) for e in term.get("matchFields") or []]
    return bool(checks) and all(_expression_holds(e, value) for e, value in checks)


def _expression_holds(e: dict[str, Any], value: str | None) -> bool:
    op, values = e["operator"], e.get("values") or []
    if op in ("Gt", "Lt"):
        if value is None or not value.lstrip("-").isdigit():
            return False
        return int(value) > int(values[0]) if op == "Gt" else int(value) < int(values[0])
    return {
        "In": value in values,
        "NotIn": value not in values,
        "Exists": value is not None,
        "DoesNotExist": value is None,
    }.get(op, False)


def _tolerates(toleration: dict[str, Any], taint: dict[str, Any]) -> bool:
    """Kubernetes' ToleratesTaint: the key (or none, with Exists), the effect (or none), and
    the value unless the operator is Exists."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("key") and toleration["key"] != taint["key"]:
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return True
    return toleration.get("key") == taint["key"] and toleration.get("value", "") == taint.get(
        "value", ""
    )
