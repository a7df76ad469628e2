"""The Kubeflow front door: a `kubeflow.org/v1` custom resource (PyTorchJob) as the neutral
description of an experiment, its pod templates kept as the user wrote them.

The Training Operator's defaulting is applied first, as the API server would (release-1.9,
`pkg/apis/kubeflow.org/v1/*_defaults.go`): replica type names in any case, one replica and the
framework's restart policy by default, the framework's port on its container. What the
operator would then add to each pod (env, ports, Services) is the framework module's job, as
for an AIchor manifest. Fields aichor-iac cannot honour are refused with their path.
"""

from __future__ import annotations

import functools
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from ...experiment.model import Experiment, FailurePolicy, RestartRule, Spec
from ...experiment.origin import PERMANENT_EXIT_CODES, Kept, Origin
from ...problems import Problem
from ...reading import crd
from ...reading import podtemplate as templates
from ...reading.text import Document
from ...rules.limits import INT32
from ..identities import KUBEFLOW, KUBEFLOW_KINDS
from .spec import (
    KINDS,
    SPEC_MODELS,
    UNSUPPORTED,
    ElasticPolicy,
    JobSpec,
    Kind,
    ReplicaSpec,
    Resource,
    RunPolicy,
)

GROUP = KUBEFLOW
UNLIMITED = INT32  # a Job's backoffLimit standing for the operator's "no limit"


release = crd.pinned  # (the router's `Door`: the operators' pinned CRDs)


def fixes(data: dict[str, Any]) -> Mapping[str, str]:
    """The fields kubeflow.org/v1 moved under spec.runPolicy (`FIXES`)."""
    return FIXES


def validate(
    data: dict[str, Any],
    source: str,
    lines: dict,
    companions: list[dict[str, Any]],
    runtimes: Sequence[Document] = (),  # (a Trainer runtime is its TrainJob's: none here)
) -> Experiment:
    """The custom resource as an experiment whose spec's `origin` keeps its templates, or
    ManifestError naming every problem with its path and line."""
    fail = functools.partial(templates.error, source, lines=lines)
    kind_name, resource, spec = _read(data, fail)
    kind = KINDS[kind_name]
    problems: list[Problem] = []
    replica_specs = _replica_specs(kind, getattr(spec, _field(kind.specs)), problems)
    problems += _run_policy_problems(spec.run_policy)
    problems += _option_problems(kind_name, spec, replica_specs)
    problems += resource.metadata.problems("the operator's webhook")
    kept = {}
    for type_name, replica in replica_specs.items():
        one = _kept(kind, type_name, replica, spec.run_policy, problems)
        if one is not None:
            kept[type_name] = one
    if problems:
        raise fail(problems)
    fields = spec.model_dump(
        by_alias=True, exclude_none=True, exclude={"run_policy", _field(kind.specs)}
    )
    origin = Origin(
        api_version=data["apiVersion"],
        kind=kind_name,
        kept=kept,
        ttl_seconds_after_finished=spec.run_policy.ttl_seconds_after_finished,
        suspend=spec.run_policy.suspend,
        fields=fields,
        queue=resource.metadata.queue,
        scheduling=spec.run_policy.scheduling_policy,
        companions=tuple(companions),
    )
    experiment = _experiment(kind, resource.metadata.name, replica_specs, kept, spec.run_policy)
    elastic = getattr(spec, "elastic_policy", None) is not None
    policy = None if elastic else _failure_policy(kept, spec.run_policy)
    experiment = experiment.model_copy(update={"spec": experiment.spec.with_failure_policy(policy)})
    return resource.metadata.read(experiment, origin, source, lines)


def _read(data: dict[str, Any], fail: Any) -> tuple[str, Resource, JobSpec]:
    """The kind, the resource and its spec, each validated by its model; or `fail` with the
    problems (a kind or version not read here, unknown or bad fields)."""
    api_version, kind_name = data.get("apiVersion"), data.get("kind")
    kind_name = kind_name if isinstance(kind_name, str) else repr(kind_name)
    if kind_name not in KINDS or api_version != f"{GROUP}/{KUBEFLOW_KINDS[kind_name]}":
        known = ", ".join(f"{GROUP}/{KUBEFLOW_KINDS[name]} {name}" for name in KINDS)
        reason = f"{api_version} {kind_name} is not a custom resource aichor-iac reads: "
        raise fail([Problem("kind", reason + f"give one of {known}")])
    try:
        resource = Resource.model_validate(data)
    except ValidationError as error:
        raise fail([templates.located(e, Resource, ()) for e in error.errors()]) from None
    root = SPEC_MODELS[kind_name]
    try:
        return kind_name, resource, root.model_validate(resource.spec)
    except ValidationError as error:
        raise fail([templates.located(e, root, ("spec",)) for e in error.errors()]) from None


# Fields of the whole job that kubeflow.org/v1 moved from `spec` into `spec.runPolicy`: the
# fix for each where the CRD's schema finds it unknown (`reading.crd.check`)
FIXES = {
    f"spec.{key}": f"it is under spec.runPolicy since kubeflow.org/v1 (v1beta2 had it here): "
    f"move it to spec.runPolicy.{key}"
    for key in (
        "cleanPodPolicy",
        "ttlSecondsAfterFinished",
        "activeDeadlineSeconds",
        "backoffLimit",
        "schedulingPolicy",
    )
}


def _field(alias: str) -> str:
    """The Python field name of a camelCase key (`xgbReplicaSpecs` -> `xgb_replica_specs`)."""
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in alias)


def _option_problems(kind_name: str, spec: JobSpec, specs: dict[str, Any]) -> list[Problem]:
    """The kind's own fields: the operator webhook's rules, and what is not run here."""
    problems = []
    given = spec.model_dump(by_alias=True, exclude_defaults=True)
    for (kind, key), reason in UNSUPPORTED.items():
        if kind == kind_name and key in given:
            problems.append(Problem(f"spec.{key}", reason))
    elastic = getattr(spec, "elastic_policy", None)
    if isinstance(elastic, ElasticPolicy):
        if "Worker" not in specs:
            problems.append(
                Problem("spec.elasticPolicy", "an elastic policy scales Workers: give a Worker")
            )
        if elastic.n_proc_per_node is not None and getattr(spec, "nproc_per_node", None):
            problems.append(
                Problem("spec.elasticPolicy.nProcPerNode", "must not be used with nprocPerNode")
            )
    return problems


def _replica_specs(kind: Kind, given: dict[str, Any], problems: list[Problem]) -> dict[str, Any]:
    """The replica specs under the operator's type names (any case), in rank order, with
    the operator's defaults."""
    where = f"spec.{kind.specs}"
    canonical = {t.lower(): t for t in kind.types}
    found: dict[str, ReplicaSpec] = {}
    for key, value in given.items():
        name = canonical.get(str(key).lower())
        if name is None:
            problems.append(
                Problem(
                    f"{where}.{key}",
                    f"{kind_of(kind)} has no {key}; its replica types are {', '.join(kind.types)}",
                )
            )
            continue
        if name in found:
            problems.append(Problem(f"{where}.{key}", f"{name} is given twice; keep one"))
            continue
        try:
            found[name] = ReplicaSpec.model_validate(value)
        except ValidationError as error:
            prefix = ("spec", kind.specs, str(key))
            problems += [templates.located(e, ReplicaSpec, prefix) for e in error.errors()]
    for name, replica in found.items():
        if name in kind.single and replica.replicas != 1:
            problems.append(Problem(f"{where}.{name}.replicas", f"must be 1 (one {name})"))
        elif kind.positive and name not in kind.single and replica.replicas < 1:
            problems.append(Problem(f"{where}.{name}.replicas", "must be at least 1"))
    if not any(found.get(name) and found[name].replicas for name in kind.needs):
        one_of = " or ".join(kind.needs)
        problems.append(Problem(where, f"{kind_of(kind)} needs a {one_of} with replicas"))
    return {t: found[t] for t in kind.types if t in found}


def kind_of(kind: Kind) -> str:
    return next(name for name, k in KINDS.items() if k is kind)


def _run_policy_problems(policy: RunPolicy) -> list[Problem]:
    problems = []
    if policy.managed_by not in (None, "kubeflow.org/training-operator"):
        problems.append(
            Problem(
                "spec.runPolicy.managedBy",
                f"'{policy.managed_by}' would run this job, not aichor-iac: remove managedBy",
            )
        )
    return problems


def _kept(
    kind: Kind, type_name: str, replica: ReplicaSpec, run: RunPolicy, problems: list[Problem]
) -> Kept | None:
    """A replica type's template with the operator's defaults (its port on its container)."""
    where = f"spec.{kind.specs}.{type_name}"
    template = replica.template
    if invalid := templates.template_problems(template, f"{where}.template"):
        problems += invalid
        return None
    containers = template["spec"]["containers"]
    restart = replica.restart_policy or dict(kind.restarts).get(type_name, kind.restart)
    if restart == "Always":
        problems.append(
            Problem(
                f"{where}.restartPolicy",
                "Always restarts a replica even after it succeeded, which a Job cannot: use "
                "OnFailure (restart after a failure) or ExitCode",
            )
        )
        return None
    container = kind.container or containers[0]["name"]
    if container not in [c["name"] for c in containers]:
        problems.append(
            Problem(
                f"{where}.template.spec.containers",
                f"needs a container named {kind.container}, as the operator's webhook requires "
                "(it gets the operator's env and port)",
            )
        )
        return None
    template = _defaulted(template, container, kind)
    # A Never replica's failure fails the job (the operator's UpdateJobStatus, whatever the
    # backoffLimit); the others restart up to it, for ever without one
    if restart == "Never":
        backoff = 0
    else:
        backoff = UNLIMITED if run.backoff_limit is None else run.backoff_limit
    return Kept(where, template, container, restart, backoff)


def _failure_policy(kept: dict[str, Kept], run: RunPolicy) -> FailurePolicy | None:
    """`runPolicy.backoffLimit` as the whole group's restart budget, when a replica type may
    restart (`OnFailure`, `ExitCode`): the operator would restart the failed pod alone, which
    a rank cannot rejoin; every replica restarts instead. A type that says `Never` fails the
    experiment at once, as `ExitCode` does on the program's own exit codes (1-127). Without a
    backoffLimit the operator restarts for ever: replicas restart in place, one by one, as an
    elastic policy's always do (torchrun's agents re-form their rendezvous around a member
    restarted alone; a group restart would stop the ones that train on)."""
    if not run.backoff_limit or all(k.restart_policy == "Never" for k in kept.values()):
        return None
    rules = []
    for type_name, one in kept.items():
        name = f"{one.path}.restartPolicy: {one.restart_policy}"
        if one.restart_policy == "Never":
            rules.append(RestartRule(name, "fail", (type_name,)))
        elif one.restart_policy == "ExitCode":
            rules.append(RestartRule(name, "fail", (type_name,), "In", PERMANENT_EXIT_CODES))
    return FailurePolicy(run.backoff_limit, tuple(rules), source="spec.runPolicy.backoffLimit")


def _defaulted(template: dict[str, Any], container: str, kind: Kind) -> dict[str, Any]:
    """The template with the operator's defaults on its container: its port unless one is
    named so, its command when the container has neither command nor args."""
    spec = dict(template["spec"])
    containers = []
    for c in spec["containers"]:
        if c["name"] == container:
            ports = c.get("ports", [])
            if kind.port and not any(p.get("name") == kind.port[0] for p in ports):
                name, number = kind.port
                c = {**c, "ports": [*ports, {"name": name, "containerPort": number}]}
            if kind.default and not c.get("command") and not c.get("args"):
                c = {**c, "command": list(kind.default)}
        containers.append(c)
    return {**template, "spec": {**spec, "containers": containers}}


def _experiment(
    kind: Kind,
    name: str | None,
    specs: dict[str, ReplicaSpec],
    kept: dict[str, Kept],
    run: RunPolicy,
) -> Experiment:
    """The neutral description: framework, counts and resources (from each operator
    container's requests), policies. Image and command are the first type's, for the record:
    kept templates run their own."""
    first = kept[next(iter(kept))]
    argv = first.argv
    spec = Spec(
        operator=kind.operator,
        image=first.main["image"],
        command=shlex.join(argv) if argv else "(the image's entrypoint)",
        types={t: {"count": s.replicas, "resources": {"memory": 1}} for t, s in specs.items()},
        active_deadline_seconds=run.active_deadline_seconds,
    )
    types = {
        t: spec.types.get(t).model_copy(update={"resources": templates.resources(kept[t].main)})
        for t in specs
    }
    spec = spec.model_copy(update={"types": spec.types.model_copy(update=types)})
    return Experiment(name=name, spec=spec)
