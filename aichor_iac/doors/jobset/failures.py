"""A JobSet's `failurePolicy` (JobSet v0.12.0, `failure_policy.go`) as the experiment's group
restart (`experiment.model.FailurePolicy`): `maxRestarts` is the budget; each rule, in order,
decides what a replica's failure does by the reason its Job would fail with and the replicated
Jobs it targets (none matching: RestartJobSet, as the controller's default).

A replica's command failing fails its Job, as its Job's own pod failure policy says: with
reason `PodFailurePolicy` when a `FailJob` rule matches its exit code, `BackoffLimitExceeded`
otherwise (a code its `Ignore` rules match fails nothing: the pod is made again, which restarts
the group without counting). So a rule's `onJobFailureReasons` becomes exit codes per Job.
Actions: `FailJobSet` fails the experiment, `RestartJobSet` restarts every replica (counted),
`RestartJobSetAndIgnoreMaxRestarts` restarts without counting. Refused, naming the field:
`RestartJob*` (one Job alone), `onJobFailureMessagePatterns` (the Job controller's messages are
not known before it writes them). The restart-attempt label is read through the downward API:
an env var that reads it (`fieldRef`) is set to the attempt by the group restart.
"""

from __future__ import annotations

from typing import Any, Literal

from ...experiment.model import FailurePolicy, RestartRule
from ...experiment.origin import Kept
from ...problems import Problem
from .spec import JobSetSpec

ACTIONS: dict[str, Literal["fail", "count", "free"]] = {
    "FailJobSet": "fail",
    "RestartJobSet": "count",
    "RestartJobSetAndIgnoreMaxRestarts": "free",
}
ATTEMPT_LABEL = "metadata.labels['jobset.sigs.k8s.io/restart-attempt']"
Codes = tuple[Literal["In", "NotIn"] | None, tuple[int, ...]]


def problems(spec: JobSetSpec) -> list[Problem]:
    """The rules this cannot run."""
    found = []
    for i, rule in enumerate(spec.failure_policy.rules if spec.failure_policy else []):
        at = f"spec.failurePolicy.rules.{i}"
        if rule.action not in ACTIONS:
            why = "restarts one Job alone, the others running on: every replica restarts "
            found.append(Problem(f"{at}.action", why + "here (RestartJobSet)"))
        if rule.on_job_failure_message_patterns:
            why = "the Job controller's failure messages are not known here: match by reasons"
            found.append(Problem(f"{at}.onJobFailureMessagePatterns", why))
    return found


def policy(spec: JobSetSpec, kept: dict[str, Kept]) -> FailurePolicy | None:
    """The group restart the JobSet asks for; None without a failure policy."""
    given = spec.failure_policy
    if given is None:
        return None
    roles = {r.name: (r.name,) for r in spec.replicated_jobs}
    rules: list[RestartRule] = []
    for name, one in kept.items():  # a code the Job ignores: its pod is made again
        ignored = _codes(one, "Ignore")
        if ignored[1] or ignored[0] == "NotIn":
            rules.append(RestartRule(f"{name}: Ignore", "free", roles[name], *ignored))
    for i, rule in enumerate(given.rules):
        for name in rule.target_replicated_jobs or list(roles):
            codes = _reasons(kept[name], rule.on_job_failure_reasons)
            if codes is not None:
                label = rule.name or f"failurePolicyRule{i}"
                rules.append(RestartRule(label, ACTIONS[rule.action], roles[name], *codes))
    names = sorted(
        {
            env["name"]
            for one in kept.values()
            for container in one.template["spec"]["containers"]
            for env in container.get("env") or []
            if ((env.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
            == ATTEMPT_LABEL
        }
    )
    return FailurePolicy(
        given.max_restarts, tuple(rules), tuple(names), "spec.failurePolicy.maxRestarts"
    )


def _reasons(kept: Kept, reasons: list[str]) -> Codes | None:
    """The exit codes of the Job's main container for which it fails with one of `reasons`
    (any reason: every code); None when a failing command cannot give them."""
    failing = _codes(kept, "FailJob")
    wanted = set(reasons) & {"PodFailurePolicy", "BackoffLimitExceeded"}
    if not reasons or len(wanted) == 2:
        return (None, ())
    if wanted == {"PodFailurePolicy"}:
        return failing if failing[0] else None
    if wanted == {"BackoffLimitExceeded"}:
        op, codes = failing
        return ("NotIn" if op != "NotIn" else "In", codes)
    return None


def _codes(kept: Kept, action: str) -> Codes:
    """The exit codes of the main container the Job's pod failure policy gives `action`: one
    rule's In or NotIn list, or the union of In lists (none: ("In", ()) but op None)."""
    rules: list[dict[str, Any]] = (kept.job.get("podFailurePolicy") or {}).get("rules", [])
    matching = [
        r["onExitCodes"]
        for r in rules
        if r.get("action") == action
        and r.get("onExitCodes")
        and r["onExitCodes"].get("containerName") in (None, kept.container)
    ]
    excluded = [m for m in matching if m["operator"] == "NotIn"]
    if excluded:
        return ("NotIn", tuple(sorted(excluded[0]["values"])))
    codes = tuple(sorted({c for m in matching for c in m["values"]}))
    return ("In" if codes else None, codes)
