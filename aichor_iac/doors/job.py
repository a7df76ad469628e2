"""A Kubernetes `batch/v1` Job as an experiment: a Katib trial's most common shape (its
hp-tuning examples' `trialSpec`). One group of AIchor's `batchjob` shape: the Job's pod
template kept, `completions` pods at most `parallelism` at once (Kubernetes' defaults: 1 and
1), the fields Kubernetes' Job controller runs kept on the one Job as written, all checked
against Kubernetes' own Job schema. The Job is rendered Indexed (`<name>-worker`, each pod
also given its index), which runs a NonIndexed Job's pods the same way.
"""

from __future__ import annotations

import functools
import shlex
from dataclasses import replace
from typing import Any, Literal

from pydantic import ConfigDict

from ..experiment.groups import Model
from ..experiment.model import Experiment, Spec
from ..experiment.origin import Kept, Origin
from ..problems import Problem
from ..reading import podtemplate as templates
from ..rules.limits import (
    INT32,
    LABEL_KEY_RULE,
    LABEL_VALUE_RULE,
    MAX_INDEXED,
    is_label_key,
    is_label_value,
)
from .identities import JOB
from .jobset.door import JOB_KEPT, job_schema_problems

API_VERSION, KIND = JOB
DEFAULT_BACKOFF = 6  # Kubernetes' default backoffLimit
# What another controller runs, or aichor-iac's labels decide: why each is refused
REFUSED = {
    "selector": "the Job's pods are selected by aichor-iac's labels: remove it",
    "manualSelector": "the Job's pods are selected by aichor-iac's labels: remove it",
    "managedBy": "another controller would run this Job: remove it",
}


class Resource(templates.CustomResource):
    api_version: Literal["batch/v1"]
    kind: Literal["Job"]


class JobSpec(Model):
    """The Job's fields read here; the others are checked by the schema and kept or refused."""

    model_config = ConfigDict(**{**Model.model_config, "extra": "allow"})
    template: templates.Template
    completions: int | None = None
    parallelism: int | None = None
    backoff_limit: int = DEFAULT_BACKOFF
    suspend: bool = False
    ttl_seconds_after_finished: int | None = None


def validate(
    data: dict[str, Any], source: str, lines: dict, companions: list[dict[str, Any]]
) -> Experiment:
    """The Job as an experiment whose spec's `origin` keeps its pod template and the Job
    controller's fields, or ManifestError naming every problem with its path and line."""
    fail = functools.partial(templates.error, source, lines=lines)
    resource = templates.parsed(Resource, data, (), fail)
    if problems := job_schema_problems(resource.spec, "spec"):  # (what follows reads it)
        raise fail(problems)
    spec = templates.parsed(JobSpec, resource.spec, ("spec",), fail)
    problems = resource.metadata.problems("the Job controller")
    problems += _metadata_problems(resource.metadata)
    problems += [Problem(f"spec.{k}", why) for k, why in REFUSED.items() if k in resource.spec]
    completions, parallelism = _counts(spec, problems)
    kept = _kept(spec, resource.spec, problems)
    if kept is not None:  # (the Job's own labels and annotations go on the Job)
        metadata = resource.metadata
        kept = replace(
            kept, job_labels=metadata.labels or {}, job_annotations=metadata.annotations or {}
        )
    if problems or kept is None:
        raise fail(problems)
    origin = Origin(
        api_version=API_VERSION,
        kind=KIND,
        kept={"Worker": kept},
        ttl_seconds_after_finished=spec.ttl_seconds_after_finished,
        suspend=spec.suspend,
        parallelism=parallelism,
        queue=resource.metadata.queue,
        companions=tuple(companions),
    )
    argv = kept.argv
    model = Spec(
        operator="batchjob",
        image=kept.main["image"],
        command=shlex.join(argv) if argv else "(the image's entrypoint)",
        types={"Worker": {"count": completions, "resources": {"memory": 1}}},
    )
    worker = model.types.get("Worker").model_copy(
        update={"resources": templates.resources(kept.main)}
    )
    model = model.model_copy(update={"types": model.types.model_copy(update={"Worker": worker})})
    experiment = Experiment(name=resource.metadata.name, spec=model)
    return resource.metadata.read(experiment, origin, source, lines)


def _counts(spec: JobSpec, problems: list[Problem]) -> tuple[int, int]:
    """The Job's (completions, parallelism), each 1 unless given, as Kubernetes defaults
    them; a work queue (parallelism without completions: done once any pod succeeds) is
    refused."""
    completions = spec.completions if spec.completions is not None else 1
    parallelism = spec.parallelism if spec.parallelism is not None else 1
    if spec.completions is None and parallelism > 1:
        reason = (
            "a work queue (parallelism without completions, done once any pod succeeds) is "
            "not run here: give completions, the number of pods that must succeed"
        )
        problems.append(Problem("spec.completions", reason))
    for key, value in (("completions", completions), ("parallelism", parallelism)):
        if not 1 <= value <= MAX_INDEXED:
            problems.append(Problem(f"spec.{key}", f"a whole number from 1 to {MAX_INDEXED:,}"))
    if not 0 <= spec.backoff_limit <= INT32:
        problems.append(Problem("spec.backoffLimit", "a whole number, 0 or more"))
    return completions, min(parallelism, completions)


def _kept(spec: JobSpec, job: dict[str, Any], problems: list[Problem]) -> Kept | None:
    """The pod template (restart policy `Never` or `OnFailure`, as a Job's must be), the
    Job's `backoffLimit` and the fields its controller runs."""
    template = spec.template
    if invalid := templates.template_problems(template, "spec.template"):
        problems += invalid
        return None
    restart = template["spec"].get("restartPolicy")
    if restart not in ("OnFailure", "Never"):
        reason = "a Job's pods restart OnFailure or Never, as the API server requires: give one"
        problems.append(Problem("spec.template.spec.restartPolicy", reason))
        return None
    first = template["spec"]["containers"][0]["name"]
    kept = {k: job[k] for k in JOB_KEPT if k in job}
    return Kept("spec", template, first, restart, spec.backoff_limit, kept)


def _metadata_problems(metadata: templates.Metadata) -> list[Problem]:
    """The Job's own labels and annotations (they go on the Job), as the API server checks
    their keys and label values."""
    problems = []
    for kind, found in (("labels", metadata.labels), ("annotations", metadata.annotations)):
        for key, value in (found or {}).items():
            if not is_label_key(key):
                problems.append(Problem(f"metadata.{kind}.{key}", LABEL_KEY_RULE))
            elif kind == "labels" and not is_label_value(value):
                problems.append(Problem(f"metadata.labels.{key}", LABEL_VALUE_RULE))
    return problems
