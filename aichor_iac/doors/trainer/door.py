"""The Kubeflow Trainer v2 front door: a `trainer.kubeflow.org/v1alpha1` TrainJob on its
runtime, as Trainer v2.3.0's controller runs it — without Trainer, a runtime or a JobSet
controller installed.

The runtime (`runtimeRef`: one of Trainer's standard runtimes, known by name, or a
`TrainingRuntime` / `ClusterTrainingRuntime` given in the same file) is a JobSet template and an
ML policy. This door builds the JobSet Trainer's controller would create from them (its
`jobset` plugin: the trainer's image, command, args, env, nodes and resources on the `node`
container of the Job labelled `trainjob-ancestor-step: trainer`; its `torch`, `jax` and
`xgboost` plugins: their env and the trainer port) and hands it to the JobSet door, so that a
TrainJob runs exactly as that JobSet would. What Trainer does that is not run here yet is
refused, naming the field.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ConfigDict, Field

from ...experiment.groups import Model
from ...experiment.model import Experiment
from ...experiment.options import TrainerMpi
from ...problems import ManifestError, Problem
from ...reading import podtemplate as templates
from ...reading.text import Document
from ...rules.limits import INT32
from ..identities import RUNTIME_KINDS, TRAINER, TRAINER_KINDS
from ..jobset import door as jobset
from ..jobset.spec import JobSetSpec
from . import initializers, patches, places, shapes, torchtune
from . import mpi as mpi_plugin
from .gang import PodGroupPolicy, with_queue
from .initializers import STEPS, Initializer
from .mpi import MPIPolicy
from .patches import RuntimePatch, merged
from .runtimes import (
    ANCESTOR,
    NODE,
    POLICIES,
    RUNTIMES,
    TRAINER_PORT,
    gpus,
    node_containers,
    upserted,
)
from .torchtune import ENTRYPOINT

API_VERSION, KINDS, RUNTIME_KINDS = TRAINER, TRAINER_KINDS, RUNTIME_KINDS
CONTROLLER = "trainer.kubeflow.org/trainjob-controller"
KNOWN = {**RUNTIMES, **torchtune.RUNTIMES}  # Trainer's standard runtimes, by name
FIXES = shapes.FIXES  # (a field of another shape or of the runtime, for reading.crd)


class RuntimeRef(Model):
    name: str
    api_group: str = "trainer.kubeflow.org"
    kind: str = "ClusterTrainingRuntime"


class ResourcesPerNode(Model):
    limits: dict[str, str | int | float] | None = None
    requests: dict[str, str | int | float] | None = None
    claims: list[dict[str, Any]] | None = None

    def get(self, kind: str) -> dict[str, Any] | None:
        return getattr(self, kind)


class Trainer(Model):
    image: str | None = None
    command: list[str] | None = None
    args: list[str] | None = None
    env: list[dict[str, Any]] = Field(default_factory=list)
    num_nodes: int | None = Field(None, ge=1, le=INT32)
    resources_per_node: ResourcesPerNode | None = None
    num_proc_per_node: int | None = Field(None, ge=1, le=INT32)


class TrainJobSpec(Model):
    runtime_ref: RuntimeRef
    trainer: Trainer | None = None
    suspend: bool = False
    managed_by: str | None = None
    initializer: Initializer | None = None
    runtime_patches: list[RuntimePatch] = Field(default_factory=list)
    active_deadline_seconds: int | None = Field(None, ge=1)


class MLPolicy(Model):
    model_config = ConfigDict(extra="allow")  # (the policies not run: `_policy_problems`)

    num_nodes: int = Field(1, ge=1, le=INT32)
    torch: dict[str, Any] | None = None
    jax: dict[str, Any] | None = None
    xgboost: dict[str, Any] | None = None
    mpi: MPIPolicy | None = None

    @property
    def source(self) -> str | None:
        """The ML policy the runtime names (Trainer allows one)."""
        return next((n for n in (*POLICIES, "mpi") if getattr(self, n) is not None), None)


class RuntimeTemplate(Model):
    metadata: dict[str, Any] | None = None
    spec: JobSetSpec


class RuntimeSpec(Model):
    ml_policy: MLPolicy = MLPolicy()
    pod_group_policy: PodGroupPolicy | None = None
    template: RuntimeTemplate


Resource = templates.CustomResource


def release(data: dict[str, Any]) -> str | None:
    """The Trainer release whose TrainJob CRD checks `data` (None: the pinned v2.3.0's, and
    a runtime's)."""
    return shapes.release(data.get("spec")) if data.get("kind") == "TrainJob" else None


def fixes(data: dict[str, Any]) -> Mapping[str, str]:
    """A TrainJob's fields of another shape or of the runtime (`FIXES`); none of a runtime."""
    return FIXES if data.get("kind") == "TrainJob" else {}


def validate(
    data: dict[str, Any],
    source: str,
    lines: dict,
    companions: list[dict[str, Any]],
    runtimes: Sequence[Document] = (),
) -> Experiment:
    """The TrainJob as the experiment of the JobSet Trainer would create for it, or
    ManifestError naming every problem (the TrainJob's at its paths, the runtime's at its).
    A TrainJob of Trainer v2.0 or v2.1 runs as its `runtimePatches` twin (`shapes`)."""
    written = templates.mapping(data.get("spec"))

    def fail(problems: list[Problem]) -> ManifestError:
        at = [dataclasses.replace(p, path=shapes.user_path(p.path, written)) for p in problems]
        return templates.error(source, at, lines)

    if shapes.release(written) is not None:
        data = {**data, "spec": shapes.as_patches(written)}
    resource, spec = templates.resource_and_spec(
        data, fail, "TrainJob", API_VERSION, (Resource, TrainJobSpec)
    )
    problems = []
    if spec.managed_by not in (None, CONTROLLER):
        reason = f"'{spec.managed_by}' would run this: remove managedBy"
        problems.append(Problem("spec.managedBy", reason))
    runtime, runtime_lines = _runtime(spec.runtime_ref, runtimes, problems)
    if problems or runtime is None:
        raise fail(problems)
    runtime_spec = _runtime_spec(runtime, source, runtime_lines)
    jobs = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    problems = _policy_problems(runtime_spec, spec)
    problems += initializers.problems(spec.initializer, jobs)
    problems += patches.problems(spec.runtime_patches, jobs)
    problems += _torchtune_problems(spec, runtime_spec.ml_policy, jobs)
    if problems:
        raise fail(problems)
    built, mpi = _jobset(data, runtime, runtime_spec.ml_policy, spec, resource.metadata.name)
    own = {path: n for path, n in lines.items() if tuple(path[:1]) == ("metadata",)}
    trainer_fields = places.given(spec.trainer)
    try:
        built_lines = {**places.onto(runtime_lines), **own}
        experiment = jobset.validate(built, source, built_lines, companions)
    except ManifestError as error:
        moved = [places.problem(p, trainer_fields, lines) for p in error.problems]
        raise ManifestError(source, moved) from None
    origin = experiment.spec.origin
    assert origin is not None and origin.jobset is not None
    trainers = {rjob["name"] for rjob in jobs if _ancestor(rjob) == "trainer"}
    named = "" if runtime_lines else spec.runtime_ref.name
    origin = dataclasses.replace(
        origin,
        kept=places.at_trainjob(origin.kept, trainers, trainer_fields, named),
        api_version=API_VERSION,
        kind="TrainJob",
        jobset=dataclasses.replace(origin.jobset, mpi=mpi, runtime=spec.runtime_ref.name),
        scheduling=with_queue(runtime_spec.pod_group_policy, runtime_spec.template.metadata),
    )
    experiment = experiment.model_copy(update={"spec": experiment.spec.with_origin(origin)})
    return experiment.read_from(source, lines)


def _runtime(
    ref: RuntimeRef, given: Sequence[Document], problems: list[Problem]
) -> tuple[dict[str, Any] | None, dict]:
    """The runtime `ref` names: one given in the file (with its lines), else a standard one."""
    if ref.api_group != "trainer.kubeflow.org" or ref.kind not in RUNTIME_KINDS:
        reason = (
            f"names a {ref.api_group} {ref.kind}: give a TrainingRuntime or ClusterTrainingRuntime"
        )
        problems.append(Problem("spec.runtimeRef.kind", reason))
        return None, {}
    for document in given:
        metadata = document.data.get("metadata")
        named = metadata.get("name") if isinstance(metadata, dict) else None
        if document.data.get("kind") == ref.kind and named == ref.name:
            return document.data, document.lines
    if ref.kind == "ClusterTrainingRuntime" and ref.name in KNOWN:
        return copy.deepcopy(KNOWN[ref.name]), {}
    known = ", ".join(sorted(KNOWN))
    reason = (
        f"no {ref.kind} '{ref.name}' is known here (no cluster is asked): give it in the same "
        f"file, or name one of Trainer's standard runtimes ({known})"
    )
    problems.append(Problem("spec.runtimeRef.name", reason))
    return None, {}


def _runtime_spec(runtime: dict[str, Any], source: str, lines: dict) -> RuntimeSpec:
    """The runtime's spec, validated (its pod templates are checked once built); or
    ManifestError at the runtime's paths and lines."""
    fail = functools.partial(templates.error, source, lines=lines)
    try:
        spec = templates.parsed(RuntimeSpec, runtime.get("spec"), ("spec",), fail)
        if problems := _job_template_problems(spec.template.spec):
            raise fail(problems)
    except ManifestError as error:
        moved = [dataclasses.replace(p, path=f"runtime: {p.path}") for p in error.problems]
        raise ManifestError(source, moved) from None
    return spec


def _job_template_problems(spec: JobSetSpec) -> list[Problem]:
    """Each replicated Job's template as the API server would refuse it in the JobSet Trainer
    creates: everything after (initializers, patches, the plugins) reads its pod template."""
    problems = []
    for i, rjob in enumerate(spec.replicated_jobs):
        at = f"spec.template.spec.replicatedJobs.{i}.template.spec"
        problems += jobset.job_schema_problems(rjob.template.spec, at)
        template = rjob.template.spec.get("template")
        if not isinstance(template, dict):
            problems.append(Problem(f"{at}.template", "missing: give the Job's pod template"))
        else:
            problems += templates.template_problems(template, f"{at}.template")
    return problems


def _policy_problems(runtime: RuntimeSpec, spec: TrainJobSpec) -> list[Problem]:
    """The runtime's ML and gang policies this door runs (one of `POLICIES`, or none), and
    the trainer's env its policy reserves (as Trainer's webhooks refuse it)."""
    problems = []
    for key in sorted(runtime.ml_policy.model_extra or {}):
        reason = f"the runtime's mlPolicy.{key} is not run from a TrainJob yet"
        problems.append(Problem("spec.runtimeRef", reason))
    group = runtime.pod_group_policy
    if group is not None and (group.coscheduling is None) == (group.volcano is None):
        reason = "the runtime's podGroupPolicy names one plugin: coscheduling or volcano"
        problems.append(Problem("spec.runtimeRef", reason))
    given = [n for n in (*POLICIES, "mpi") if getattr(runtime.ml_policy, n) is not None]
    if len(given) > 1:
        reason = f"the runtime's mlPolicy gives {' and '.join(given)}: Trainer runs one"
        problems.append(Problem("spec.runtimeRef", reason))
    source = runtime.ml_policy.source
    by_policy = {n: names for n, (_, names) in POLICIES.items()} | {"mpi": mpi_plugin.RESERVED}
    reserved = set(by_policy.get(source or "", ()))
    if runtime.ml_policy.mpi is not None:
        jobs = [r.name for r in runtime.template.spec.replicated_jobs]
        nodes = spec.trainer.num_nodes if spec.trainer else None
        problems += mpi_plugin.problems(runtime.ml_policy.mpi, nodes, jobs)
    for i, entry in enumerate(spec.trainer.env if spec.trainer else []):
        if isinstance(entry.get("name"), str) and entry["name"] in reserved:
            reason = f"{entry['name']} is reserved for the {source} runtime (it sets it)"
            problems.append(Problem(f"spec.trainer.env.{i}", reason))
    return problems


def _tunes(trainer: Trainer | None, policy: MLPolicy) -> bool:
    """Whether the trainer runs TorchTune's entry point (the torch plugin completes it)."""
    return policy.torch is not None and trainer is not None and trainer.command == ENTRYPOINT


def _torchtune_problems(
    spec: TrainJobSpec, policy: MLPolicy, jobs: list[dict[str, Any]]
) -> list[Problem]:
    trainer = spec.trainer
    if trainer is None or not _tunes(trainer, policy):
        return []
    return torchtune.problems(
        spec.runtime_ref.name,
        trainer.num_nodes or 1,
        trainer.num_proc_per_node,
        gpus(_plugin_resources(trainer, jobs)),
        trainer.args or [],
    )


def _plugin_resources(trainer: Trainer, jobs: list[dict[str, Any]]) -> dict[str, Any]:
    """The resources per node the plugins count from: the trainer's, else the runtime's."""
    if trainer.resources_per_node:
        return trainer.resources_per_node.model_dump(exclude_none=True)
    return _runtime_resources(jobs)


def _jobset(
    data: dict[str, Any],
    runtime: dict[str, Any],
    policy: MLPolicy,
    spec: TrainJobSpec,
    name: str | None,
) -> tuple[dict[str, Any], TrainerMpi | None]:
    """The JobSet Trainer's controller creates for the TrainJob on `runtime` (its spec
    validated: `_runtime_spec`), and for an MPI runtime the JobSet framework's options."""
    template = copy.deepcopy(runtime["spec"]["template"]["spec"])
    order = [rjob["name"] for rjob in template["replicatedJobs"]]
    labels: dict[str, str] = {}
    for patch in spec.runtime_patches:  # (Trainer's `mergeRuntimePatches`, in order)
        template = merged(template, patch.spec())
        labels.update(patch.labels())
    jobs = sorted(template["replicatedJobs"], key=lambda r: _at(order, r["name"]))
    trainer = spec.trainer or Trainer()
    resources = _plugin_resources(trainer, jobs)
    mpi = None
    if policy.mpi is not None:  # (the MPI plugin acts before the trainer's fields are set)
        slots = mpi_plugin.slots(policy.mpi, trainer.num_proc_per_node, resources)
        mpi = mpi_plugin.enforce(jobs, policy.mpi, trainer.num_nodes, slots)
    for rjob in jobs:
        _trainer_job(rjob, policy, spec, name, resources)
        if spec.active_deadline_seconds:  # (every Job's, counted from its own start)
            rjob["template"]["spec"]["activeDeadlineSeconds"] = spec.active_deadline_seconds
    metadata = data.get("metadata") or {}
    # (its name; its labels, the patches' too, for the Kueue queue they ask: Metadata.queue)
    kept = {k: v for k, v in metadata.items() if k in ("name", "generateName")}
    labels.update(metadata.get("labels") or {})
    built = {
        "apiVersion": jobset.API_VERSION,
        "kind": "JobSet",
        "metadata": {**kept, **({"labels": labels} if labels else {})},
        "spec": {**template, "replicatedJobs": jobs, "suspend": spec.suspend},
    }
    return built, mpi


def _at(order: list[str], name: str) -> int:
    """Where a replicated Job stands in the runtime's order (a patch's new one: last)."""
    return order.index(name) if name in order else len(order)


def _ancestor(rjob: dict[str, Any]) -> str | None:
    """The step of the TrainJob a replicated Job runs (Trainer's ancestor label)."""
    metadata = templates.mapping(rjob["template"].get("metadata"))
    return templates.mapping(metadata.get("labels")).get(ANCESTOR)


def _take_ancestor(rjob: dict[str, Any]) -> str | None:
    """The Job's ancestor label, taken off (Trainer's own bookkeeping: no Job carries it)."""
    metadata = rjob["template"].get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, dict) else None
    if not isinstance(labels, dict) or ANCESTOR not in labels:
        return None
    ancestor = labels.pop(ANCESTOR)
    if not labels:
        metadata.pop("labels")
    if not metadata:
        rjob["template"].pop("metadata")
    return ancestor


def _runtime_resources(jobs: list[dict[str, Any]]) -> dict[str, Any]:
    """Trainer's `ExtractResourcePerNodeFromRuntime`: the resources of the `node` container
    of the first `node` or trainer Job that gives them."""
    for rjob in jobs:
        if rjob["name"] == NODE or _ancestor(rjob) == "trainer":
            for container in node_containers(rjob):
                if isinstance(container.get("resources"), dict):
                    return container["resources"]
    return {}


def _trainer_job(
    rjob: dict[str, Any],
    policy: MLPolicy,
    spec: TrainJobSpec,
    name: str | None,
    resources: dict[str, Any],
) -> None:
    """A replicated Job as Trainer builds it (in place). The trainer's: one Job of `numNodes`
    pods (the runtime's for MPI: its launcher) whose `node` container runs the trainer's image,
    command, args, env and resources; its ancestor label (Trainer's own bookkeeping) taken
    off. Others keep their pod count; the MPI `node` Job of a launcher that ranks too takes the
    trainer's env and resources."""
    job_spec = rjob["template"]["spec"]
    trainer = spec.trainer or Trainer()
    ancestor = _take_ancestor(rjob)
    if ancestor is not None and ancestor in STEPS.values():
        initializers.apply(rjob, ancestor, spec.initializer)
    if ancestor != "trainer":
        count = job_spec.get("parallelism", 1)
        job_spec.update(parallelism=count, completions=count)
        if policy.mpi and policy.mpi.run_launcher_as_node and rjob["name"] == NODE:
            for container in node_containers(rjob):
                _env_and_resources(container, trainer)
        return
    nodes = policy.num_nodes if policy.mpi else (trainer.num_nodes or policy.num_nodes)
    rjob["replicas"] = 1
    job_spec.update(parallelism=nodes, completions=nodes)
    for container in node_containers(rjob):
        _node(container, spec, policy, nodes, name, resources)


def _node(
    container: dict[str, Any],
    spec: TrainJobSpec,
    policy: MLPolicy,
    nodes: int,
    name: str | None,
    resources: dict[str, Any],
) -> None:
    """The trainer's `node` container: the trainer's fields, then (for a TrainJob that has a
    trainer, as the torch, jax and xgboost plugins require) its ML policy's env and port;
    TorchTune's `tune run` completed, without the master's env (it rendezvouses by argument)."""
    given = spec.trainer
    trainer = given or Trainer()
    runtime_command = templates.listed(container.get("command"))
    for key, value in (
        ("image", trainer.image),
        ("command", trainer.command),
        ("args", trainer.args),
    ):
        if value is not None:
            container[key] = value
    _env_and_resources(container, trainer)
    if given is None or policy.source not in POLICIES:
        return
    env = POLICIES[policy.source][0](resources, trainer, nodes, name)
    if _tunes(given, policy):
        env = [e for e in env if e["name"] not in ("PET_MASTER_ADDR", "PET_MASTER_PORT")]
        per_node = next(e["value"] for e in env if e["name"] == "PET_NPROC_PER_NODE")
        container["command"] = torchtune.command(
            spec.runtime_ref.name,
            name or "",
            nodes,
            per_node,
            gpus(resources),
            trainer.args or [],
            runtime_command,
        )
    container["env"] = upserted(container.get("env") or [], env)
    ports = templates.listed(container.get("ports"))
    if not any(isinstance(p, dict) and p.get("containerPort") == TRAINER_PORT for p in ports):
        container["ports"] = [*ports, {"containerPort": TRAINER_PORT}]


def _env_and_resources(container: dict[str, Any], trainer: Trainer) -> None:
    """The trainer's resourcesPerNode merged into the container's, its env upserted."""
    if trainer.resources_per_node is not None:
        base, given = templates.mapping(container.get("resources")), trainer.resources_per_node
        container["resources"] = {
            kind: {**templates.mapping(base.get(kind)), **(given.get(kind) or {})}
            for kind in ("limits", "requests")
            if base.get(kind) or given.get(kind)
        }
        if claims := given.claims or base.get("claims"):
            container["resources"]["claims"] = claims
    own = templates.listed(container.get("env"))
    if env := upserted(own, trainer.env):
        container["env"] = env
