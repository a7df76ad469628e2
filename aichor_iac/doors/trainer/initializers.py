"""A TrainJob's `initializer` (Trainer v2.3.0): the dataset and model initializers, replicated
Jobs of the runtime labelled `trainjob-ancestor-step: dataset-initializer` / `model-
initializer` that download into the `initializer` volume before the trainer's Job (the
runtime's `dependsOn: Complete` orders them). As Trainer's jobset plugin builds them
(`Builder.Initializer`): one Job each; on its container of the same name `STORAGE_URI` (the
TrainJob's `storageUri`), then the TrainJob's env, upserted, and its `secretRef` as `envFrom`.
As its webhook checks them: an initializer the TrainJob configures needs that Job, that
container, and the container mounting `initializer`.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from ...experiment.groups import Model
from ...problems import Problem
from ...reading import podtemplate as templates
from .runtimes import node_containers, upserted

VOLUME = "initializer"  # the volume an initializer downloads into (the trainer reads it)
STEPS = {"dataset": "dataset-initializer", "model": "model-initializer"}


class SecretRef(Model):
    name: str = Field(min_length=1)


class Source(Model):
    storage_uri: str | None = None
    env: list[dict[str, Any]] = Field(default_factory=list)
    secret_ref: SecretRef | None = None


class Initializer(Model):
    dataset: Source | None = None
    model: Source | None = None


def problems(initializer: Initializer | None, jobs: list[dict[str, Any]]) -> list[Problem]:
    """What the jobset plugin's webhook refuses: a configured initializer whose Job, container
    of the same name, or `initializer` mount the runtime lacks."""
    found = []
    for key, step in STEPS.items():
        if initializer is None or getattr(initializer, key) is None:
            continue
        rjob = next((r for r in jobs if r.get("name") == step), None)
        named = node_containers(rjob, step) if rjob else []
        if rjob is None:
            reason = f"must have {step} job when trainJob is configured with input {key}Config"
        elif not named:
            reason = f"must have container with name - {step} in the {step} job"
        elif not any(_mounts(c) for c in named):
            reason = f"must have volumeMount with name - {VOLUME} in container {step} of the "
            reason += f"{step} job"
        else:
            continue
        found.append(Problem("spec.runtimeRef", f"the runtime {reason}"))
    return found


def apply(rjob: dict[str, Any], step: str, initializer: Initializer | None) -> None:
    """An initializer's replicated Job as Trainer builds it (in place)."""
    rjob["replicas"] = 1
    key = next(k for k, s in STEPS.items() if s == step)
    source: Source | None = getattr(initializer, key) if initializer else None
    if source is None:
        return
    env = [{"name": "STORAGE_URI", "value": source.storage_uri}] if source.storage_uri else []
    for container in node_containers(rjob, step):
        own = templates.listed(container.get("env"))
        if merged := upserted(upserted(own, env), source.env):
            container["env"] = merged
        if source.secret_ref is not None:
            given = templates.listed(container.get("envFrom"))
            container["envFrom"] = [*given, {"secretRef": {"name": source.secret_ref.name}}]


def _mounts(container: dict[str, Any]) -> bool:
    mounts = templates.listed(container.get("volumeMounts"))
    return any(isinstance(m, dict) and m.get("name") == VOLUME for m in mounts)
