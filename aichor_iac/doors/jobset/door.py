"""The JobSet front door: a `jobset.x-k8s.io/v1alpha2` JobSet (JobSet v0.12.0, as its
webhook defaults and validates it) as an experiment of AIchor's `jobset` shape, each replicated
Job's pod template kept.

A replicated Job is a type of `replicas` Indexed Jobs `<name>-<replicatedJob>-<j>`, each of
`completions` pods, `parallelism` at once, on one headless Service named by `network.subdomain`
(default: the JobSet's name). The framework module (`frameworks/jobset.py`) gives each Job the
controller's labels and annotations and turns `startupPolicy`, `dependsOn`, `successPolicy` and
`coordinator` into Pulumi's order and awaits; a Job's own fields that Kubernetes' Job
controller runs (its pod failure policy, deadline, …) stay on each Job. Its failure policy is
the experiment's group restart (`failures`); its shared claims are made once, before the
pods (`claims`); what else needs the controller after creation is refused, naming the
field.
"""

from __future__ import annotations

import functools
import shlex
from collections.abc import Sequence
from typing import Any

from ...experiment.groups import MAX_JOBS
from ...experiment.model import Experiment, Spec
from ...experiment.options import JobSetJob, JobSetOptions, JobSetSuccess
from ...experiment.origin import Kept, Origin, RestartPolicy
from ...frameworks.jobset import EXCLUSIVE_NODES, EXCLUSIVE_TOPOLOGY
from ...problems import Problem
from ...reading import crd
from ...reading import podtemplate as templates
from ...reading.openapi import Invalid
from ...reading.text import Document
from ...rules.limits import DNS_1035, INT32, MAX_INDEXED, dns_label, is_label_key
from ..identities import JOBSET_KINDS
from . import failures
from .claims import claimed
from .spec import API_VERSION, CONTROLLER, JobSetSpec, ReplicatedJob, Resource

__all__ = ["API_VERSION", "KINDS", "job_schema_problems", "validate"]

KINDS = JOBSET_KINDS
DEFAULT_BACKOFF = 6  # Kubernetes' default backoffLimit of a Job
# Annotations of JobSet's exclusive placement (the topology; its node-selector strategy)
EXCLUSIVE = (EXCLUSIVE_TOPOLOGY, EXCLUSIVE_NODES)
# A Job template's fields Kubernetes' Job controller runs: kept on each Job as written.
JOB_KEPT = (
    "podFailurePolicy",
    "backoffLimitPerIndex",
    "maxFailedIndexes",
    "podReplacementPolicy",
    "successPolicy",
    "activeDeadlineSeconds",
)
# The others beside those read (parallelism, completions, completionMode, backoffLimit,
# template): why each is refused.
JOB_REFUSED = {
    "ttlSecondsAfterFinished": "give the JobSet's ttlSecondsAfterFinished (every Job gets it)",
    "suspend": "give the JobSet's suspend (every Job gets it)",
    "selector": "the Jobs' pods are selected by aichor-iac's labels: remove it",
    "manualSelector": "the Jobs' pods are selected by aichor-iac's labels: remove it",
    "managedBy": "another controller would run this Job: remove it",
}


release, fixes = crd.pinned, crd.unmoved  # (the router's `Door`: JobSet's pinned CRD)


def validate(
    data: dict[str, Any],
    source: str,
    lines: dict,
    companions: list[dict[str, Any]],
    runtimes: Sequence[Document] = (),  # (a Trainer runtime is its TrainJob's: none here)
) -> Experiment:
    """The JobSet as an experiment whose spec's `origin` keeps its pod templates and the
    controller's options, or ManifestError naming every problem with its path and line."""
    fail = functools.partial(templates.error, source, lines=lines)
    resource, spec = templates.resource_and_spec(
        data, fail, "JobSet", API_VERSION, (Resource, JobSetSpec)
    )
    retained: tuple[str, ...] = ()
    if spec.volume_claim_policies and resource.metadata.name:
        data, claims, retained, problems = claimed(data, spec, resource.metadata.name)
        if problems:
            raise fail(problems)
        companions = [*companions, *claims]
        resource, spec = templates.resource_and_spec(
            data, fail, "JobSet", API_VERSION, (Resource, JobSetSpec)
        )
    if schema := _jobs_schema_problems(spec):  # (what follows reads the Jobs' counts)
        raise fail(schema)
    problems = resource.metadata.problems("the JobSet webhook")
    problems += _spec_problems(spec, resource.metadata.annotations or {})
    problems += _order_problems(spec)
    problems += _success_problems(spec)
    shapes, kept = {}, {}
    for i, rjob in enumerate(spec.replicated_jobs):
        where = f"spec.replicatedJobs.{i}"
        if rjob.name in (r.name for r in spec.replicated_jobs[:i]):
            problems.append(Problem(f"{where}.name", f"'{rjob.name}' is given twice"))
        problems += _name_problems(rjob, resource.metadata.name, where)
        shape = _shape(rjob, where, problems)
        one = _kept(rjob, where, problems)
        if shape and one:
            shapes[rjob.name], kept[rjob.name] = shape, one
    if problems:
        raise fail(problems)
    origin = Origin(
        api_version=API_VERSION,
        kind="JobSet",
        kept=kept,
        ttl_seconds_after_finished=spec.ttl_seconds_after_finished,
        suspend=spec.suspend,
        jobset=_options(spec, resource.metadata.annotations or {}),
        queue=resource.metadata.queue,
        companions=tuple(companions),
        subdomain=spec.network.subdomain if spec.network else None,
        retained=retained,
    )
    experiment = _experiment(resource.metadata.name, spec, shapes, kept)
    return resource.metadata.read(experiment, origin, source, lines)


def _jobs_schema_problems(spec: JobSetSpec) -> list[Problem]:
    """Each replicated Job's template against the Job's own schema."""
    return [
        problem
        for i, rjob in enumerate(spec.replicated_jobs)
        for problem in job_schema_problems(
            rjob.template.spec, f"spec.replicatedJobs.{i}.template.spec"
        )
    ]


def _spec_problems(spec: JobSetSpec, annotations: dict[str, str]) -> list[Problem]:
    """The JobSet's fields that need its controller after creation, or a placement webhook."""
    problems = []
    if spec.managed_by not in (None, CONTROLLER):
        problems.append(
            Problem("spec.managedBy", f"'{spec.managed_by}' would run this: remove managedBy")
        )
    problems += _exclusive_problems(spec, annotations)
    subdomain = spec.network.subdomain if spec.network else None
    if subdomain is not None:
        try:
            dns_label(subdomain)
        except ValueError as error:
            problems.append(Problem("spec.network.subdomain", f"names the pods' Service: {error}"))
    problems += _coordinator_problems(spec)
    problems += failures.problems(spec)
    for i, rule in enumerate(spec.failure_policy.rules if spec.failure_policy else []):
        where = f"spec.failurePolicy.rules.{i}.targetReplicatedJobs"
        problems += _names_known(spec, rule.target_replicated_jobs, where)
    return problems


def _coordinator_problems(spec: JobSetSpec) -> list[Problem]:
    """The coordinator names a pod of the JobSet, as the webhook checks it."""
    coordinator = spec.coordinator
    if coordinator is None:
        return []
    rjob = next((r for r in spec.replicated_jobs if r.name == coordinator.replicated_job), None)
    if rjob is None:
        return _names_known(spec, [coordinator.replicated_job], "spec.coordinator.replicatedJob")
    if coordinator.job_index >= rjob.replicas:
        reason = f"{rjob.name} has {rjob.replicas} Job(s): give an index below that"
        return [Problem("spec.coordinator.jobIndex", reason)]
    if coordinator.pod_index >= _counts(rjob)[0]:
        reason = f"{rjob.name}'s Jobs have {_counts(rjob)[0]} pod(s): give an index below that"
        return [Problem("spec.coordinator.podIndex", reason)]
    return []


def _names_known(spec: JobSetSpec, names: list[str], where: str) -> list[Problem]:
    known = [r.name for r in spec.replicated_jobs]
    return [
        Problem(where, f"'{n}' is not a replicated Job of this JobSet ({', '.join(known)})")
        for n in names
        if n not in known
    ]


def _order_problems(spec: JobSetSpec) -> list[Problem]:
    """`dependsOn` as the webhook validates it (earlier replicated Jobs only, not beside an
    InOrder startup), and one await per Job: a replicated Job others depend on both Ready and
    Complete cannot be awaited both ways."""
    problems: list[Problem] = []
    earlier: set[str] = set()
    wanted: dict[str, str] = {}
    for i, rjob in enumerate(spec.replicated_jobs):
        for k, dependency in enumerate(rjob.depends_on):
            where = f"spec.replicatedJobs.{i}.dependsOn.{k}"
            if spec.in_order:
                reason = "StartupPolicy and DependsOn APIs are mutually exclusive: give one"
                problems.append(Problem(where, reason))
            elif dependency.name not in earlier:
                reason = (
                    f"'{dependency.name}' is not a replicated Job before {rjob.name}: a "
                    "replicated Job depends on earlier ones only"
                )
                problems.append(Problem(f"{where}.name", reason))
            elif wanted.setdefault(dependency.name, dependency.status) != dependency.status:
                reason = (
                    f"{dependency.name} is awaited {wanted[dependency.name]} for another "
                    "replicated Job: its Jobs have one await, give the same status"
                )
                problems.append(Problem(f"{where}.status", reason))
        earlier.add(rjob.name)
    return problems


def _success_problems(spec: JobSetSpec) -> list[Problem]:
    """A success policy that ends the JobSet before every Job has completed: the one Job of
    one pod that ends it must be the entry point the other Jobs follow (its end stops them,
    as the controller deletes the active Jobs of a finished JobSet)."""
    policy, where = spec.success_policy, "spec.successPolicy"
    problems = _names_known(spec, policy.target_replicated_jobs, f"{where}.targetReplicatedJobs")
    if problems or not _ends_early(spec):
        return problems
    targets = [r for r in spec.replicated_jobs if r.name in policy.target_replicated_jobs]
    jobs = sum(r.replicas for r in targets)
    if len(targets) == 1 and jobs == 1 and _counts(targets[0])[0] == 1:
        return []
    reason = (
        f"{policy.operator} of {', '.join(policy.target_replicated_jobs) or 'every Job'} ends "
        "the JobSet while other Jobs run, which runs here when one Job of one pod ends it "
        "(the others follow that pod and stop when it ends): target one replicated Job of "
        "replicas 1 and completions 1, or remove successPolicy (every Job must complete)"
    )
    return [Problem(f"{where}.targetReplicatedJobs", reason)]


def _ends_early(spec: JobSetSpec) -> bool:
    """Whether the JobSet may finish while some of its Jobs still run."""
    policy = spec.success_policy
    targets = set(policy.target_replicated_jobs) or {r.name for r in spec.replicated_jobs}
    everything = targets == {r.name for r in spec.replicated_jobs}
    jobs = sum(r.replicas for r in spec.replicated_jobs)
    return not everything or (policy.operator == "Any" and jobs > 1)


def _name_problems(rjob: ReplicatedJob, name: str | None, where: str) -> list[Problem]:
    """The replicated Job's name (a Job's and its pods' host names), as the webhook checks it."""
    try:
        dns_label(rjob.name, 40)
    except ValueError as error:
        return [Problem(f"{where}.name", f"names its Jobs: {error}")]
    completions, _ = _counts(rjob)
    host = f"{name}-{rjob.name}-{max(rjob.replicas - 1, 0)}-{max(completions - 1, 0)}"
    if name is not None and len(host) > 63:
        reason = (
            f"the JobSet's name is too long: its pods' host names ({host}) would exceed 63 "
            "characters, as the JobSet webhook refuses"
        )
        return [Problem("metadata.name", reason)]
    if len(rjob.group_name) > 63 or not DNS_1035.match(rjob.group_name):
        return [Problem(f"{where}.groupName", "a label value: a DNS-1035 label, at most 63")]
    return []


def _counts(rjob: ReplicatedJob) -> tuple[int, int]:
    """A Job's (completions, parallelism) as Kubernetes defaults them (1 and 1)."""
    job = rjob.template.spec
    parallelism: int = job.get("parallelism", 1)
    completions: int = job.get("completions", parallelism if "parallelism" not in job else 1)
    return completions, parallelism


def _shape(rjob: ReplicatedJob, where: str, problems: list[Problem]) -> dict[str, Any] | None:
    """The type's `count`, `completions` and `parallelisms`, or None with the problems of
    the Job template's fields."""
    at, job = f"{where}.template.spec", rjob.template.spec
    found = [Problem(f"{at}.{k}", why) for k, why in JOB_REFUSED.items() if k in job]
    if job.get("completionMode", "Indexed") != "Indexed":
        reason = "JobSet's host names need Indexed Jobs: remove it (Indexed is the default)"
        found.append(Problem(f"{at}.completionMode", reason))
    if "parallelism" in job and "completions" not in job:
        reason = "required with completionMode Indexed, as the API server requires"
        found.append(Problem(f"{at}.completions", reason))
    for key in ("completions", "parallelism"):
        if not 1 <= job.get(key, 1) <= MAX_INDEXED:
            found.append(Problem(f"{at}.{key}", f"a whole number from 1 to {MAX_INDEXED:,}"))
    if not 0 <= job.get("backoffLimit", DEFAULT_BACKOFF) <= INT32:
        found.append(Problem(f"{at}.backoffLimit", "a whole number, 0 or more"))
    if rjob.replicas == 0:  # (the JobSet controller makes no Job of it; of all: runs none)
        reason = "0 makes no Job of this replicated Job: give 1 or more, or remove it"
        found.append(Problem(f"{where}.replicas", reason))
    if rjob.replicas > MAX_JOBS:
        reason = (
            f"{rjob.replicas:,} Jobs, each a resource of the stack: at most {MAX_JOBS:,} "
            "(wide work is completions, pods of one Job)"
        )
        found.append(Problem(f"{where}.replicas", reason))
    problems += found
    if found:
        return None
    completions, parallelism = _counts(rjob)
    return {"count": rjob.replicas, "completions": completions, "parallelisms": parallelism}


def job_schema_problems(job: dict[str, Any], at: str) -> list[Problem]:
    """Every way the Job template's own fields break Kubernetes' strict Job schema (its pod
    template is checked on its own, at its own paths)."""
    stand_in = {"spec": {"containers": [{"name": "c", "image": "c"}]}}
    whole = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "job"},
        "spec": {**job, "template": stand_in},
    }
    problems = []
    for error in sorted(templates.validator("job-batch-v1").errors(whole), key=Invalid.order):
        path = ".".join(str(part) for part in error.path[1:])
        reason = error.message.split("\n")[0]
        problems.append(Problem(".".join(filter(None, (at, path))), f"not a valid Job: {reason}"))
    return problems


def _kept(rjob: ReplicatedJob, where: str, problems: list[Problem]) -> Kept | None:
    """The replicated Job's pod template, restart policy `OnFailure` unless it says `Never`
    (the webhook's default) and the Job's `backoffLimit` (Kubernetes' default 6)."""
    at = f"{where}.template.spec.template"
    template = rjob.template.spec.get("template")
    if not isinstance(template, dict):
        problems.append(Problem(at, "missing: give the Job's pod template"))
        return None
    if invalid := templates.template_problems(template, at):
        problems += invalid
        return None
    given = template["spec"].get("restartPolicy") or "OnFailure"
    if given not in ("OnFailure", "Never"):
        reason = "a Job's pods restart OnFailure or Never, as the API server requires"
        problems.append(Problem(f"{at}.spec.restartPolicy", reason))
        return None
    restart: RestartPolicy = "OnFailure" if given == "OnFailure" else "Never"
    template = {**template, "spec": {**template["spec"], "restartPolicy": restart}}
    first = template["spec"]["containers"][0]["name"]
    job = rjob.template.spec
    backoff = job.get("backoffLimit", DEFAULT_BACKOFF)
    kept = {k: job[k] for k in JOB_KEPT if k in job}
    metadata = rjob.template.metadata
    return Kept(
        f"{where}.template.spec",
        template,
        first,
        restart,
        backoff,
        kept,
        job_labels=metadata.labels,
        job_annotations=metadata.annotations,
    )


def _options(spec: JobSetSpec, annotations: dict[str, str]) -> JobSetOptions:
    """What the JobSet framework reads: each replicated Job (name, Jobs, group, what it
    depends on, its exclusive placement), the success policy, the startup order and the
    coordinator."""
    success = spec.success_policy
    coordinator = spec.coordinator
    return JobSetOptions(
        replicated_jobs=tuple(
            JobSetJob(
                name=r.name,
                replicas=r.replicas,
                group_name=r.group_name,
                depends_on={d.name: d.status for d in r.depends_on},
                exclusive=_exclusive(annotations, r.template.metadata.annotations),
            )
            for r in spec.replicated_jobs
        ),
        success=JobSetSuccess(
            success.operator, tuple(success.target_replicated_jobs), _ends_early(spec)
        ),
        in_order=spec.in_order,
        coordinator=(coordinator.replicated_job, coordinator.job_index, coordinator.pod_index)
        if coordinator
        else None,
    )


def _exclusive_problems(spec: JobSetSpec, annotations: dict[str, str]) -> list[Problem]:
    """An exclusive topology that is not a label key: no node can have it (the API server
    refuses such a topologyKey)."""
    given = [(f"metadata.annotations.{EXCLUSIVE_TOPOLOGY}", annotations.get(EXCLUSIVE_TOPOLOGY))]
    given += [
        (
            f"spec.replicatedJobs.{i}.template.metadata.annotations.{EXCLUSIVE_TOPOLOGY}",
            r.template.metadata.annotations.get(EXCLUSIVE_TOPOLOGY),
        )
        for i, r in enumerate(spec.replicated_jobs)
    ]
    reason = "names the node label of the topology: give a label key (a qualified name)"
    return [
        Problem(path, reason)
        for path, value in given
        if value is not None and not (isinstance(value, str) and is_label_key(value))
    ]


def _exclusive(jobset: dict[str, str], job: dict[str, str]) -> dict[str, str]:
    """A replicated Job's exclusive placement annotations, as the controller gives its Jobs
    and pods: the JobSet's, then its Job template's (the node-selector strategy only beside a
    topology)."""
    result: dict[str, str] = {}
    for given in (jobset, job):
        if EXCLUSIVE[0] in given:
            result.update({key: given[key] for key in EXCLUSIVE if key in given})
    return result


def _experiment(
    name: str | None, spec: JobSetSpec, shapes: dict[str, Any], kept: dict[str, Kept]
) -> Experiment:
    """The neutral description: AIchor's jobset types (Jobs, completions, parallelism) with
    each pod template's resources, and the failure policy; the image and command are the
    first Job's, for the record."""
    first = kept[spec.replicated_jobs[0].name]
    argv = first.argv
    types = {n: {**shape, "resources": {"memory": 1}} for n, shape in shapes.items()}
    model = Spec(
        operator="jobset",
        image=first.main["image"],
        command=shlex.join(argv) if argv else "(the image's entrypoint)",
        types=types,
    )
    resources = {
        n: model.types.get(n).model_copy(update={"resources": templates.resources(kept[n].main)})
        for n in shapes
    }
    model = model.model_copy(update={"types": model.types.model_copy(update=resources)})
    return Experiment(name=name, spec=model.with_failure_policy(failures.policy(spec, kept)))
