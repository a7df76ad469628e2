"""`aichor-iac convert`: a custom resource as the AIchor manifest that runs the same
experiment, where one exists, and a list of what the manifest cannot say.

An AIchor manifest has one image and one shell command for every replica type, resources as
CPUs, memory and GPUs, node selectors and tolerations, an experiment-wide env, a restart
budget and a deadline: that much of a custom resource carries over. Everything else of the pod
templates (volumes, sidecars, probes, security contexts, …) and of the operator's options is
listed, field by field, as not carried over; so is the env the replicas would see otherwise
(AIchor's contract for the framework instead of the operator's).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from .doors.kubeflow.door import UNLIMITED
from .doors.kuberay.door import param
from .experiment.groups import TPU_RESOURCE, TPU_SELECTORS, Tpu
from .experiment.model import Experiment, Spec
from .experiment.origin import Kept, Origin
from .experiment.rules import RAY_MANAGED_FLAGS, ray_flag
from .frameworks import PLANNERS, Names
from .k8s.kinds import camel
from .problems import Problem
from .rules.limits import quantity

# What of a pod template and of its operator's container a manifest carries over.
POD_KEYS = {"containers", "nodeSelector", "tolerations", "restartPolicy"}
CONTAINER_KEYS = {"name", "image", "command", "args", "env", "resources", "ports"}
MPI_SSHD = ["/usr/sbin/sshd", "-De"]  # what an MPIJob worker runs; AIchor's run sshd too


@dataclass
class Conversion:
    manifest: dict[str, Any]  # an AIchor manifest (apiVersion 0.2.2), as YAML data
    lost: list[str] = field(default_factory=list)  # "path: what is not carried over"


def convert(source: Experiment) -> Conversion:
    """The AIchor manifest of a custom resource, or ManifestError when none can run it."""
    spec, origin = source.spec, source.spec.origin
    if origin is None:
        raise source.error([Problem("", "already an AIchor manifest: nothing to convert")])
    if origin.api_version.startswith("ray.io/"):
        return _ray(source)
    lost: list[str] = []
    entry = _entry(spec, origin)
    argv = entry.argv
    if argv is None:
        path = f"{entry.path}.template.spec.containers.{entry.index}.command"
        raise source.error(
            [
                Problem(
                    path,
                    "an AIchor manifest runs one shell command and the image's entrypoint is "
                    "not known here: give it as command (args after it), then convert",
                )
            ]
        )
    types: dict[str, Any] = {}
    env: dict[str, Any] = {}
    for type_name, kept in origin.kept.items():
        types[type_name] = {"count": spec.types.get(type_name).count}
        if spec.operator == "jobset":  # (a JobSet's replicated Job: its Jobs' pods)
            group = spec.types.get(type_name)
            types[type_name].update(completions=group.completions, parallelisms=group.parallelisms)
        types[type_name]["resources"] = _resources(kept, lost)
        lost += _template_losses(kept, entry, spec.operator, type_name)
        _merge_env(kept, env, lost)
    data: dict[str, Any] = {
        "operator": spec.operator,
        "image": entry.main["image"],
        "command": shlex.join(argv),
        "types": types,
    }
    if env:
        data["env"] = list(env.values())
    if spec.active_deadline_seconds:
        data["activeDeadlineSeconds"] = spec.active_deadline_seconds
    lost += _group_restart(spec) if spec.failure_policy else _restart(origin, data)
    lost += (
        _jobset_losses(origin) if spec.operator == "jobset" else _option_losses(spec, origin, data)
    )
    lost += _run_policy_losses(origin)
    lost += _companion_losses(origin)
    lost += _env_contract(spec)
    manifest = {"kind": "AIchorManifest", "apiVersion": "0.2.2", "name": source.name, "spec": data}
    return Conversion(manifest, lost)


def _group_restart(spec: Spec) -> list[str]:
    """The whole group's restart the resource asks for, which a manifest cannot say (the
    stack's settings do)."""
    policy = spec.failure_policy
    assert policy is not None
    lost = [
        f"{policy.source}: every replica restarts together, at most {policy.max_restarts} "
        f"time(s): a manifest cannot say it; set the stack's aichor:maxRestarts: "
        f"{policy.max_restarts}"
    ]
    for rule in policy.rules:
        on = ", ".join(rule.jobs) or "every replica"
        codes = f" on exit codes {rule.op} {_ranges(rule.codes)}" if rule.op else ""
        lost.append(
            f"{rule.name}: a failure of {on}{codes} {RULE_ACTIONS[rule.action]}; the stack's "
            "aichor:permanentExitCodes fail any replica at once on its codes"
        )
    return lost


RULE_ACTIONS = {
    "fail": "fails the experiment at once",
    "count": "restarts the group",
    "free": "restarts the group without counting",
}


def _ranges(codes: tuple[int, ...]) -> str:
    """Exit codes as runs (1-127, 130)."""
    runs: list[list[int]] = []
    for code in sorted(codes):
        if runs and code == runs[-1][1] + 1:
            runs[-1][1] = code
        else:
            runs.append([code, code])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _restart(origin: Origin, data: dict[str, Any]) -> list[str]:
    """The replicas' backoff limit as the manifest's (into `data`), and what of their restart
    policies it cannot say."""
    lost = []
    backoff = max(k.backoff_limit for k in origin.kept.values())
    if backoff == UNLIMITED:
        lost.append(
            "restartPolicy: unlimited restarts (no runPolicy.backoffLimit); a manifest's "
            "backoffLimit is a number: none is set (0)"
        )
    elif backoff:
        data["restartPolicy"] = {"backoffLimit": backoff}
    if any(k.restart_policy != "Never" for k in origin.kept.values()):
        lost.append(
            "restartPolicy: replicas are not restarted in place (OnFailure) nor by "
            "exit code (ExitCode): a failed replica is a new pod, within backoffLimit"
        )
    return lost


def _run_policy_losses(origin: Origin) -> list[str]:
    lost, where = [], "runPolicy" if origin.api_version.startswith("kubeflow.org/") else "spec"
    if origin.ttl_seconds_after_finished is not None:
        lost.append(f"{where}.ttlSecondsAfterFinished: finished Jobs are kept")
    if origin.suspend:
        lost.append(f"{where}.suspend: the experiment starts at once")
    if origin.scheduling is not None:
        lost.append(
            "runPolicy.schedulingPolicy: the gang is the stack's (aichor:gangScheduler), "
            "of every pod"
        )
    return lost


def _ray(source: Experiment) -> Conversion:
    """A RayJob as an `operator: kuberay` manifest: the entrypoint and the head's image, the
    head and each worker group with its resources and `rayStartParams` (those aichor-iac sets
    itself aside); a RayCluster has none (an AIchor experiment ends with its job)."""
    spec, origin = source.spec, source.spec.origin
    assert origin is not None
    if origin.kind == "RayCluster":
        reason = (
            "a RayCluster runs until destroyed and an AIchor experiment ends with its job: "
            "write a RayJob with this cluster as its rayClusterSpec and an entrypoint, then "
            "convert"
        )
        raise source.error([Problem("kind", reason)])
    lost: list[str] = []
    head = origin.kept["Head"]
    if "Submitter" in origin.kept and origin.kept["Submitter"].argv:
        path = f"{origin.kept['Submitter'].path}.spec.containers.0.command"
        reason = "the submitter runs its own command: give the job's command as entrypoint"
        raise source.error([Problem(path, reason)])

    env: dict[str, Any] = {}
    for kept in origin.kept.values():
        _merge_env(kept, env, lost)
    types: dict[str, Any] = {"Head": _ray_group(origin, "Head", None, lost)}
    pools = [
        {
            "name": pool.name,
            "count": pool.count,
            **_ray_group(origin, pool.name, pool.resources.accelerators.tpu, lost),
        }
        for pool in spec.types.get("Workers") or []
    ]
    if pools:
        types["Workers"] = pools
    data: dict[str, Any] = {
        "operator": "kuberay",
        "image": head.main["image"],
        "command": origin.ray.job.entrypoint,  # type: ignore[union-attr]  # (a RayJob's)
        "types": types,
    }
    if spec.ray_version:
        data["rayVersion"] = spec.ray_version
    if env:
        data["env"] = list(env.values())
    if spec.active_deadline_seconds:
        data["activeDeadlineSeconds"] = spec.active_deadline_seconds
    lost += _ray_job_losses(origin)
    lost += _group_restart(spec) if spec.failure_policy else []
    lost += _companion_losses(origin)
    lost += _env_contract(spec)
    manifest = {"kind": "AIchorManifest", "apiVersion": "0.2.2", "name": source.name, "spec": data}
    return Conversion(manifest, lost)


def _ray_group(origin: Origin, name: str, tpu: Tpu | None, lost: list[str]) -> dict[str, Any]:
    """A Ray group of the manifest: its resources and the `rayStartParams` aichor-iac does not
    set itself."""
    kept = origin.kept[name]
    lost.extend(_ray_template_losses(kept, origin.kept["Head"]))
    params = {}
    for key, value in origin.ray.params[name].items():  # type: ignore[union-attr]
        if ray_flag(key) in RAY_MANAGED_FLAGS:
            lost.append(f"{kept.path}.rayStartParams.{key}: set by aichor-iac")
        else:
            params[key] = param(value)
    result = {"resources": _resources(kept, lost, tpu)}
    return {**result, "rayStartParams": params} if params else result


def _ray_job_losses(origin: Origin) -> list[str]:
    """What of a RayJob's own fields the manifest cannot say."""
    lost, options = [], origin.ray
    assert options is not None and options.job is not None
    if options.job.submitter:
        submitter = origin.kept["Submitter"]
        lost.append(
            f"{submitter.path}: the submitter's template and its {submitter.backoff_limit} retries"
        )
    for key, value in sorted(options.job.extra.items()):
        field = "runtimeEnvYAML" if key == "runtime_env" else camel(key)
        lost.append(f"spec.{field}: {value} (the manifest submits the command alone)")
    if options.job.job_id:
        lost.append(f"spec.jobId: {options.job.job_id} (the experiment's name is the id)")
    if not options.job.shutdown:
        lost.append(
            "spec.shutdownAfterJobFinishes: false; the manifest's cluster stops when the job ends"
        )
    if options.auth is not None:
        lost.append("spec.rayClusterSpec.authOptions: AIchor's Ray clusters always use a token")
    for field in options.autoscaling:
        lost.append(f"{field}: no autoscaler; each pool runs at its count")
    if origin.ttl_seconds_after_finished is not None:
        lost.append("spec.ttlSecondsAfterFinished: finished Jobs are kept")
    if origin.suspend:
        lost.append("spec.suspend: the experiment starts at once")
    return lost


def _ray_template_losses(kept: Kept, head: Kept) -> list[str]:
    """What of a Ray group's template the manifest cannot say: as for any template, and the
    container's own command (the manifest's nodes run `ray start` alone)."""
    lost = [
        loss
        for loss in _template_losses(kept, head, "kuberay", "")
        if ".command: every type runs" not in loss
    ]
    if kept.argv:
        where = f"{kept.path}.template.spec.containers.{kept.index}.command"
        lost.append(f"{where}: the manifest's nodes run aichor-iac's `ray start` alone")
    return lost


def _companion_losses(origin: Origin) -> list[str]:
    return [
        f"{c['kind']} {c['metadata']['name']}: create it beside the stack (a manifest is one "
        "document)"
        for c in origin.companions
    ]


def _entry(spec: Spec, origin: Origin) -> Kept:
    """The replica type whose image and command the manifest takes: MPI's launcher (its
    workers run sshd), else the first (rank 0's)."""
    if spec.operator == "mpi":
        return origin.kept["Launcher"]
    return next(iter(origin.kept.values()))


def _resources(kept: Kept, lost: list[str], tpu: Tpu | None = None) -> dict[str, Any]:
    """CPUs, memory and GPUs of the operator's container (requests, else limits), node
    selectors, tolerations and a memory-backed /dev/shm, as a manifest's resources; `tpu`, a
    multi-host group's slice (its limit and node selectors)."""
    where = f"{kept.path}.template.spec.containers.{kept.index}.resources"
    asked = kept.main.get("resources") or {}
    limits, requests = asked.get("limits") or {}, asked.get("requests") or {}
    cpus = quantity(requests.get("cpu", limits.get("cpu", 0)))
    memory = quantity(requests.get("memory", limits.get("memory", 0))) / 2**30
    result: dict[str, Any] = {"cpus": _number(cpus) or 1, "memory": _number(memory) or 1}
    if not cpus or not memory:
        lost.append(
            f"{where}: no CPU or memory asked for; the manifest asks for 1 CPU and "
            "1 GiB (a manifest must ask)"
        )
    if cpus and "cpu" in limits and "cpu" in requests:
        result["cpuLimitRatio"] = max(1, _number(quantity(limits["cpu"]) / cpus))
    if gpus := int(quantity(limits.get("nvidia.com/gpu", 0))):
        result["accelerators"] = {"gpu": {"count": gpus}}
    if tpu:
        result["accelerators"] = {"tpu": tpu.model_dump(by_alias=True)}
    said = {"cpu", "memory", "nvidia.com/gpu", *([TPU_RESOURCE] if tpu else [])}
    if others := sorted((set(limits) | set(requests)) - said):
        lost.append(f"{where}: {', '.join(others)}")
    pod = kept.template["spec"]
    selectors = {
        k: v
        for k, v in (pod.get("nodeSelector") or {}).items()
        if not tpu or k not in TPU_SELECTORS
    }
    if selectors:
        result["extraSelectors"] = selectors
    if tolerations := pod.get("tolerations"):
        result["extraTolerations"] = [dict(t) for t in tolerations]
    for volume in pod.get("volumes", []):
        empty = volume.get("emptyDir") or {}
        mounted = {
            m["mountPath"] for m in kept.main.get("volumeMounts", []) if m["name"] == volume["name"]
        }
        if empty.get("medium") == "Memory" and mounted == {"/dev/shm"}:
            result["shmSizeGB"] = _number(quantity(empty.get("sizeLimit", 0)) / 2**30) or 1
    return result


def _number(value: float) -> float | int:
    """A quantity as a manifest writes it: whole numbers as integers, else 3 decimals."""
    value = round(value, 3)
    return int(value) if value.is_integer() else value


def _template_losses(kept: Kept, entry: Kept, operator: str, type_name: str) -> list[str]:
    """What of a replica type's template the manifest cannot say."""
    where, lost = f"{kept.path}.template", []
    pod, main = kept.template["spec"], kept.main
    if kept.template.get("metadata"):
        lost.append(f"{where}.metadata: labels and annotations")
    shm_only = all(
        (v.get("emptyDir") or {}).get("medium") == "Memory" for v in pod.get("volumes", [])
    )
    for key in sorted(set(pod) - POD_KEYS):
        if key == "volumes" and shm_only:
            continue
        lost.append(f"{where}.spec.{key}")
    for i, container in enumerate(pod["containers"]):
        if container is not main:
            lost.append(f"{where}.spec.containers.{i}: container {container['name']}")
    container_path = f"{where}.spec.containers.{kept.index}"
    for key in sorted(set(main) - CONTAINER_KEYS):
        if key == "volumeMounts" and shm_only:
            continue
        lost.append(f"{container_path}.{key}")
    if main["image"] != entry.main["image"]:
        lost.append(
            f"{container_path}.image: {main['image']} (every type runs {entry.main['image']})"
        )
    if operator == "mpi" and type_name == "Worker":
        if kept.argv != MPI_SSHD:
            lost.append(f"{container_path}.command: the manifest's workers run aichor-iac's sshd")
    elif kept.argv != entry.argv:
        lost.append(f"{container_path}.command: every type runs {entry.path.rsplit('.', 1)[1]}'s")
    return lost


def _merge_env(kept: Kept, env: dict[str, Any], lost: list[str]) -> None:
    """The container's env as the manifest's (one env for every type): literal values and
    Secret references; other sources, and values that differ between types, are lost."""
    where = f"{kept.path}.template.spec.containers.{kept.index}.env"
    for i, var in enumerate(kept.main.get("env", [])):
        source = var.get("valueFrom")
        if source and "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            entry = {"name": var["name"], "secretKeyRef": {"name": ref["name"], "key": ref["key"]}}
        elif source:
            lost.append(f"{where}.{i}: {var['name']} from {sorted(source)[0]}")
            continue
        else:
            entry = {"name": var["name"], "value": var.get("value", "")}
        if env.setdefault(var["name"], entry) != entry:
            lost.append(f"{where}.{i}: {var['name']} differs between types (the first is kept)")


def _option_losses(spec: Spec, origin: Origin, data: dict[str, Any]) -> list[str]:
    """The kind's own options: MPI's slots and implementation carry over, the rest not."""
    options, lost = dict(origin.fields), []
    if spec.operator == "mpi":
        data["slotsPerWorker"] = options.pop("slotsPerWorker", 1)
        data["mpiImplementation"] = options.pop("mpiImplementation", "OpenMPI")
        defaults = {
            "sshAuthMountPath": "/root/.ssh",
            "runLauncherAsWorker": False,
            "launcherCreationPolicy": "AtStartup",
        }
        options = {k: v for k, v in options.items() if defaults.get(k) != v}
    lost += [f"spec.{key}: {value}" for key, value in sorted(options.items())]
    return lost


def _jobset_losses(origin: Origin) -> list[str]:
    """What of a JobSet's policies and its Jobs' own fields an AIchor jobset cannot say."""
    options, lost = origin.jobset, ["labels: the JobSet controller's jobset.sigs.k8s.io/*"]
    assert options is not None
    success = options.success
    if success.targets or success.operator != "All":
        lost.append(f"spec.successPolicy: every Job must complete (not {success.operator})")
    if options.in_order:
        lost.append("spec.startupPolicy: InOrder; every Job is created at once")
    for i, rjob in enumerate(options.replicated_jobs):
        if rjob.depends_on:
            lost.append(f"spec.replicatedJobs.{i}.dependsOn: created at once")
        if rjob.group_name != "default":
            lost.append(f"spec.replicatedJobs.{i}.groupName")
    if options.coordinator:
        lost.append("spec.coordinator: no coordinator label")
    if options.mpi:  # (a TrainJob on an MPI runtime)
        lost.append(
            "mlPolicy.mpi: no key pair, hostfile or launcher wiring (AIchor's operator: mpi runs "
            "sshd workers and a launcher of its own: rewrite it as one)"
        )
    if origin.subdomain:
        lost.append(
            f"spec.network.subdomain: the Service is the experiment's, not {origin.subdomain}"
        )
    for kept in origin.kept.values():
        lost += [f"{kept.path}.{key}" for key in sorted(kept.job)]
    return lost


def _env_contract(spec: Spec) -> list[str]:
    """How the env the replicas see changes: AIchor's contract for the framework instead of
    the custom resource's operator's (same names, one line)."""
    names = Names("x", "default")
    theirs = PLANNERS[spec.operator](spec, names)
    plain = spec.with_origin(None)
    ours = PLANNERS[spec.operator](plain, names)
    before = {e.name for g in theirs.groups for e in g.env}
    after = {e.name for g in ours.groups for e in g.env}
    lost = []
    if gone := sorted(before - after):
        lost.append(f"env: the replicas no longer see {', '.join(gone)} (the operator's)")
    if new := sorted(after - before):
        where = "docs: Coming from Kubeflow v1"
        lost.append(f"env: the replicas see AIchor's {', '.join(new)} instead ({where})")
    return lost
