"""A TrainJob's `runtimePatches` (Trainer v2.3.0): what each patch may change of its runtime's
JobSet template — labels and annotations, and per replicated Job its pods' service account,
volumes, containers' env, mounts and security context, placement and grace period — and the
strategic merge Trainer applies (`mergeRuntimePatches`: Kubernetes' strategic merge patch over
the JobSet spec, patches in order, the runtime's order of replicated Jobs kept).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from ...experiment.groups import Model
from ...problems import Problem


class Meta(Model):
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class ContainerPatch(Model):
    name: str
    env: list[dict[str, Any]] | None = None
    volume_mounts: list[dict[str, Any]] | None = None
    security_context: dict[str, Any] | None = None


class PodSpecPatch(Model):
    service_account_name: str | None = None
    volumes: list[dict[str, Any]] | None = None
    init_containers: list[ContainerPatch] | None = None
    containers: list[ContainerPatch] | None = None
    image_pull_secrets: list[dict[str, Any]] | None = None
    security_context: dict[str, Any] | None = None
    node_selector: dict[str, str] | None = None
    affinity: dict[str, Any] | None = None
    tolerations: list[dict[str, Any]] | None = None
    scheduling_gates: list[dict[str, Any]] | None = None
    termination_grace_period_seconds: int | None = Field(None, ge=0)


class PodTemplatePatch(Model):
    metadata: Meta | None = None
    spec: PodSpecPatch | None = None


class JobSpecPatch(Model):
    template: PodTemplatePatch | None = None


class JobTemplatePatch(Model):
    metadata: Meta | None = None
    spec: JobSpecPatch | None = None


class ReplicatedJobPatch(Model):
    name: str
    template: JobTemplatePatch | None = None


class JobSetSpecPatch(Model):
    replicated_jobs: list[ReplicatedJobPatch] | None = None


class JobSetTemplatePatch(Model):
    metadata: Meta | None = None
    spec: JobSetSpecPatch | None = None


class TrainingRuntimeSpecPatch(Model):
    template: JobSetTemplatePatch | None = None


class RuntimePatch(Model):
    manager: str = Field(min_length=1)
    time: str | None = None
    training_runtime_spec: TrainingRuntimeSpecPatch | None = None

    def spec(self) -> dict[str, Any]:
        """The JobSet spec patch, as JSON (Kubernetes' names)."""
        template = self.training_runtime_spec.template if self.training_runtime_spec else None
        if template is None or template.spec is None:
            return {}
        return template.spec.model_dump(by_alias=True, exclude_none=True)

    def labels(self) -> dict[str, str]:
        """The labels the patch gives the JobSet (Trainer propagates them to it)."""
        template = self.training_runtime_spec.template if self.training_runtime_spec else None
        meta = template.metadata if template else None
        return dict(meta.labels or {}) if meta else {}


# The containers whose env is the TrainJob's to give (its trainer and initializers), never a
# patch's (the jobset plugin's webhook)
OWN_ENV = ("dataset-initializer", "model-initializer", "node")


def problems(patches: list[RuntimePatch], jobs: list[dict[str, Any]]) -> list[Problem]:
    """What Trainer's jobset webhook refuses of the patches to a runtime of replicated `jobs`
    (validated): a Job or container the runtime does not have, env for a container whose env
    the TrainJob gives."""
    runtime = {rjob["name"]: _names(rjob) for rjob in jobs}
    found = []
    for i, patch in enumerate(patches):
        template = patch.training_runtime_spec.template if patch.training_runtime_spec else None
        spec = template.spec if template else None
        for k, rjob in enumerate((spec.replicated_jobs if spec else None) or []):
            at = f"spec.runtimePatches.{i}.trainingRuntimeSpec.template.spec.replicatedJobs.{k}"
            if rjob.name in runtime:
                found += _container_problems(rjob, at, runtime[rjob.name])
            else:
                reason = (
                    "must not have replicated job that doesn't exist in the runtime job template"
                )
                found.append(Problem(f"{at}.name", reason))
    return found


def _names(rjob: dict[str, Any]) -> set[str]:
    """The names of a replicated Job's containers and init containers."""
    pod = rjob["template"]["spec"]["template"]["spec"]
    return {c["name"] for key in ("initContainers", "containers") for c in pod.get(key) or []}


def _container_problems(rjob: ReplicatedJobPatch, at: str, names: set[str]) -> list[Problem]:
    job = rjob.template.spec if rjob.template else None
    pod = job.template.spec if job and job.template else None
    found = []
    for key, containers in (
        ("initContainers", pod.init_containers if pod else None),
        ("containers", pod.containers if pod else None),
    ):
        for c, container in enumerate(containers or []):
            where = f"{at}.template.spec.template.spec.{key}.{c}"
            if container.name not in names:
                reason = f"must not have a container the runtime's {rjob.name} job does not have"
                found.append(Problem(f"{where}.name", reason))
            elif key == "containers" and container.env and container.name in OWN_ENV:
                reason = (
                    f"must not have envs for the {', '.join(OWN_ENV)} containers: give them "
                    "in spec.trainer.env or spec.initializer"
                )
                found.append(Problem(f"{where}.env", reason))
    return found


# The lists a strategic merge merges item by item (their patchMergeKey), as the JobSet and
# pod types declare them; every other list is replaced, every map merged key by key.
MERGE_KEYS = {
    "replicatedJobs": "name",
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "imagePullSecrets": "name",
    "schedulingGates": "name",
}


def merged(base: Any, patch: Any) -> Any:
    """`patch` merged into `base` as Kubernetes' strategic merge patch does (no directives)."""
    if not isinstance(base, dict) or not isinstance(patch, dict):
        return patch
    result = dict(base)
    for key, value in patch.items():
        if key in MERGE_KEYS and isinstance(result.get(key), list) and isinstance(value, list):
            result[key] = _merged_list(result[key], value, MERGE_KEYS[key])
        else:
            result[key] = merged(result.get(key), value) if key in result else value
    return result


def _merged_list(base: list[Any], patch: list[Any], key: str) -> list[Any]:
    """Items merged by `key` where the base has one, the others added after the base's."""
    result = list(base)
    for item in patch:
        name = item.get(key) if isinstance(item, dict) else None
        at = next(
            (i for i, b in enumerate(result) if isinstance(b, dict) and b.get(key) == name),
            None,
        )
        at = None if name is None else at
        if at is None:
            result.append(item)
        else:
            result[at] = merged(result[at], item)
    return result
