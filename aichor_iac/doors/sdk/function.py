"""The Python function front door: an experiment from a training function, as the Kubeflow
SDK builds one (`TrainingClient.create_job(train_func=...)`, kubeflow-training 1.9), better.

The function travels as a small program: its source, the module-level functions and classes
it uses (their source too), the modules it uses (imported), and the constants it reads
(written out), found by reading its code; with its arguments as JSON. Both are files of a
ConfigMap mounted read-only into every replica, so no shell ever reads the user's code (the
SDK pastes it into a heredoc, where `$` expands). What cannot travel (a closure, an object
that is not a constant, a function whose source is not available) is a clear error naming it.

The experiment is the custom resource the SDK would create (a PyTorchJob of a Master and
`num_nodes - 1` Workers, `torchrun` when distributed; a TFJob, XGBoostJob, JAXJob, PaddleJob;
a RayJob), with that ConfigMap beside it: the Kubeflow and KubeRay front doors read it, so it
renders, previews, validates and becomes a component like any other input. Packages install
with pip into a directory of the replica (`--target`), which needs no root.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ...experiment.model import Experiment
from ...problems import ManifestError, Problem
from ..kubeflow.spec import KINDS
from ..router import validate
from ..trainer.door import API_VERSION as TRAINER_API
from ..trainer.mpi import HOSTFILE
from ..trainer.runtimes import LAUNCHER, NODE, RUNTIMES
from . import shipping
from .shipping import MOUNT

PACKAGES = "/tmp/aichor-packages"  # where pip installs the packages (any user may write)
# What the SDK would create for each framework: kind, replica types (the first one replica),
# the operator's container, default image (kubeflow-training 1.9 `constants.py`).
FRAMEWORKS: dict[str, tuple[str, tuple[str, ...], str, str]] = {
    "pytorch": (
        "PyTorchJob",
        ("Master", "Worker"),
        "pytorch",
        "docker.io/pytorch/pytorch:2.1.2-cuda11.8-cudnn8-runtime",
    ),
    "xgboost": ("XGBoostJob", ("Master", "Worker"), "xgboost", "docker.io/python:3.11"),
    "tf": ("TFJob", ("Worker",), "tensorflow", "docker.io/tensorflow/tensorflow:2.9.1"),
    "jax": ("JAXJob", ("Worker",), "jax", "docker.io/python:3.11"),
    "paddle": (
        "PaddleJob",
        ("Worker",),
        "paddle",
        "docker.io/paddlepaddle/paddle:2.6.0-gpu-cuda12.0-cudnn8.9-trt8.6",
    ),
    "ray": ("RayJob", ("Head", "Worker"), "ray", "docker.io/rayproject/ray:2.52.0"),
}


def _check_shape(framework: str, num_nodes: Any, nproc_per_node: Any, source: str) -> None:
    """The framework, node count and processes per node asked for, or ManifestError."""
    if framework not in FRAMEWORKS:
        known = ", ".join(FRAMEWORKS)
        raise ManifestError(source, [Problem("framework", f"'{framework}': give one of {known}")])
    if not isinstance(num_nodes, int) or num_nodes < 1:
        raise ManifestError(source, [Problem("num_nodes", "give 1 or more replicas")])
    if nproc_per_node is not None and framework != "pytorch":
        raise ManifestError(source, [Problem("nproc_per_node", "is PyTorch's (torchrun)")])


def experiment_from_function(
    func: Callable[..., Any],
    *,
    framework: str = "pytorch",
    name: str | None = None,
    num_nodes: int = 1,
    nproc_per_node: int | str | None = None,
    resources_per_node: Mapping[str, Any] | None = None,
    image: str | None = None,
    packages: Sequence[str] = (),
    pip_index_url: str | None = None,
    env: Mapping[str, str] | None = None,
    args: Mapping[str, Any] | None = None,
    runtime: str | None = None,
) -> Experiment:
    """The experiment that runs `func(**args)` once per process of `num_nodes` replicas (per
    GPU with `nproc_per_node`, PyTorch), each with `resources_per_node` (`cpu`, `memory`,
    `gpu`, or any resource name), `env`, and `packages` installed first; or ManifestError
    naming what cannot be shipped or run. With `runtime` (one of Trainer's standard runtimes)
    it is the TrainJob Kubeflow's v2 SDK creates (`framework` is the runtime's then)."""
    source = f"<function {getattr(func, '__qualname__', func)}>"
    _check_shape(framework, num_nodes, nproc_per_node, source)
    program, arguments = shipping.program(func, source), _arguments(args, source)
    kind, replica_types, container_name, default_image = FRAMEWORKS[framework]
    experiment = name or experiment_name(func.__name__)
    config_map: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{experiment}-function"},
        "data": {"main.py": program, "args.json": arguments},
    }
    packages = list(packages)
    _check(packages, source)
    container: dict[str, Any] = {
        "name": container_name,
        "image": image or default_image,
        # Literal values: Kubernetes would expand `$(VAR)` in them, a Python dict does not.
        "env": [{"name": k, "value": str(v).replace("$", "$$")} for k, v in (env or {}).items()],
        "resources": _resources(resources_per_node or {}),
        "volumeMounts": [{"name": "function", "mountPath": MOUNT, "readOnly": True}],
    }
    volume = {"name": "function", "configMap": {"name": config_map["metadata"]["name"]}}
    if runtime is not None:
        given = {"image": image, "nproc": nproc_per_node, "script": (packages, pip_index_url)}
        resource = _trainjob(runtime, experiment, container, volume, num_nodes, given, source)
    elif framework == "ray":
        resource = _rayjob(experiment, container, volume, num_nodes, packages, pip_index_url)
    else:
        distributed = num_nodes > 1 or nproc_per_node is not None
        entry = "torchrun" if framework == "pytorch" and distributed else "python3 -u"
        container["command"] = ["/bin/sh", "-c", _script(entry, packages, pip_index_url)]
        resource = _kubeflow(kind, experiment, container, volume, num_nodes, replica_types)
        if nproc_per_node is not None:
            resource["spec"]["nprocPerNode"] = str(nproc_per_node)
    return validate(resource, source, {}, [config_map])


def _template(container: dict[str, Any], volume: dict[str, Any]) -> dict[str, Any]:
    return {
        "spec": {"containers": [{k: v for k, v in container.items() if v}], "volumes": [volume]}
    }


def _kubeflow(
    kind: str,
    name: str,
    container: dict[str, Any],
    volume: dict[str, Any],
    num_nodes: int,
    replica_types: tuple[str, ...],
) -> dict[str, Any]:
    """The custom resource the SDK creates: one replica of the first type (a PyTorchJob's or
    XGBoostJob's Master) and the rest of the second, every replica the same template."""
    counts = (1, num_nodes - 1) if len(replica_types) == 2 else (num_nodes,)
    template = _template(container, volume)
    specs = {
        t: {"replicas": n, "template": template}
        for t, n in zip(replica_types, counts, strict=True)
        if n
    }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": {KINDS[kind].specs: specs},
    }


def _rayjob(
    name: str,
    container: dict[str, Any],
    volume: dict[str, Any],
    num_nodes: int,
    packages: list[str],
    index: str | None,
) -> dict[str, Any]:
    """A RayJob whose entrypoint runs the function on the head, with `num_nodes - 1`
    workers (the function's ConfigMap mounted everywhere); packages are the job's runtime
    env (Ray installs them, no root needed); the cluster stops when the job ends."""
    template = _template(container, volume)
    cluster: dict[str, Any] = {"headGroupSpec": {"rayStartParams": {}, "template": template}}
    if num_nodes > 1:
        group = {"groupName": "workers", "replicas": num_nodes - 1, "rayStartParams": {}}
        cluster["workerGroupSpecs"] = [{**group, "template": template}]
    spec: dict[str, Any] = {
        "entrypoint": f"python3 -u {MOUNT}/main.py",
        "shutdownAfterJobFinishes": True,
        "rayClusterSpec": cluster,
    }
    if packages:
        pip: Any = packages
        if index:
            pip = {"packages": packages, "pip_install_options": ["--index-url", index]}
        spec["runtimeEnvYAML"] = json.dumps({"pip": pip})  # (JSON is YAML)
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": name}, "spec": spec}


def _trainjob(
    runtime: str,
    name: str,
    container: dict[str, Any],
    volume: dict[str, Any],
    num_nodes: int,
    given: dict[str, Any],
    source: str,
) -> dict[str, Any]:
    """The TrainJob the v2 SDK creates (`get_trainer_cr_from_custom_trainer`): the runtime's
    trainer with the function's nodes, resources (requests and limits alike), env, image and
    command; the function's ConfigMap mounted on the node container by a runtime patch (the
    SDK pastes the code into the command; here no shell reads it)."""
    if runtime not in RUNTIMES:
        reason = f"'{runtime}': give one of Trainer's standard runtimes ({', '.join(RUNTIMES)})"
        raise ManifestError(source, [Problem("runtime", reason)])
    nproc = given["nproc"]
    if nproc is not None and (not isinstance(nproc, int) or "torch" not in _policy(runtime)):
        reason = "a whole number of processes, for a torch runtime (numProcPerNode)"
        raise ManifestError(source, [Problem("nproc_per_node", reason)])
    command = _sdk_command(_policy(runtime), given["script"])
    trainer: dict[str, Any] = {"numNodes": num_nodes, "command": command}
    trainer.update(
        {
            key: value
            for key, value in (
                ("image", given["image"]),
                ("env", container["env"]),
                ("resourcesPerNode", container["resources"]),
                ("numProcPerNode", nproc),
            )
            if value
        }
    )
    pod = {
        "volumes": [volume],
        "containers": [{"name": NODE, "volumeMounts": container["volumeMounts"]}],
    }
    # (every Job whose `node` container runs the program: MPI's ranks on its launcher too)
    jobs = [
        {"name": job, "template": {"spec": {"template": {"spec": pod}}}}
        for job in ((NODE, LAUNCHER) if "mpi" in _policy(runtime) else (NODE,))
    ]
    patch = {
        "manager": "aichor-iac",
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": jobs}}},
    }
    return {
        "apiVersion": TRAINER_API,
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {"runtimeRef": {"name": runtime}, "trainer": trainer, "runtimePatches": [patch]},
    }


def _sdk_command(policy: dict[str, Any], script: tuple[Any, ...]) -> list[str]:
    """The SDK's entry point for the runtime's framework: torchrun, `mpirun` over the
    hostfile running every rank's install and program (`mpirun --hostfile … bash -c`), or
    Python."""
    if "mpi" in policy:
        return ["mpirun", "--hostfile", HOSTFILE, "/bin/sh", "-c", _script("python3 -u", *script)]
    entry = "torchrun" if "torch" in policy else "python3 -u"
    return ["/bin/sh", "-c", _script(entry, *script)]


def _policy(runtime: str) -> dict[str, Any]:
    return RUNTIMES[runtime]["spec"]["mlPolicy"]


def experiment_from_trainer(
    trainer: Any, *, runtime: str = "torch-distributed", name: str | None = None
) -> Experiment:
    """The experiment of Kubeflow's v2 SDK `TrainerClient().train(runtime=runtime,
    trainer=CustomTrainer(...))`: `trainer` is a `CustomTrainer` or anything (a mapping too)
    with its fields — `func`, `func_args`, `num_nodes`, `resources_per_node`,
    `packages_to_install`, `pip_index_urls`, `env`, `image`."""

    def get(key: str) -> Any:
        return trainer.get(key) if isinstance(trainer, Mapping) else getattr(trainer, key, None)

    func, indexes = get("func"), list(get("pip_index_urls") or [])
    if not callable(func):
        raise ManifestError("<trainer>", [Problem("func", "give the training function")])
    if len(indexes) > 1:
        reason = "one package index is read here: give the one that holds every package"
        raise ManifestError("<trainer>", [Problem("pip_index_urls", reason)])
    return experiment_from_function(
        func,
        runtime=runtime,
        name=name,
        num_nodes=get("num_nodes") or 1,
        resources_per_node=get("resources_per_node"),
        image=get("image"),
        packages=get("packages_to_install") or (),
        pip_index_url=indexes[0] if indexes else None,
        env=get("env"),
        args=get("func_args"),
    )


def _check(packages: list[str], source: str) -> None:
    """Each package a requirement (PEP 508), never a pip option or more than one."""
    from packaging.requirements import InvalidRequirement, Requirement

    for i, package in enumerate(packages):
        try:
            Requirement(package)
        except (InvalidRequirement, TypeError):
            reason = f"{package!r} is not a requirement pip reads (e.g. 'numpy>=1.26')"
            raise ManifestError(source, [Problem(f"packages.{i}", reason)]) from None


def _script(entry: str, packages: list[str], index: str | None) -> str:
    """The replica's command: install the packages (each one quoted requirement) where any
    user may write, then run the program. The user's code is never part of it."""
    lines = ["set -e"]
    if packages:
        options = ["--index-url", index] if index else []
        pip = ["python3", "-m", "pip", "install", "--quiet", "--no-warn-script-location"]
        pip += ["--disable-pip-version-check", "--target", PACKAGES, *options, *packages]
        lines += [shlex.join(pip), f'export PYTHONPATH="{PACKAGES}${{PYTHONPATH:+:$PYTHONPATH}}"']
    lines.append(f"exec {entry} {MOUNT}/main.py")
    return "\n".join(lines)


def _resources(asked: Mapping[str, Any]) -> dict[str, Any]:
    """The SDK's `resources_per_worker` dict: requests and limits alike, `gpu` NVIDIA's."""
    resources = {str(k).lower(): str(v) for k, v in asked.items()}
    if "gpu" in resources:
        resources["nvidia.com/gpu"] = resources.pop("gpu")
    return {"requests": resources, "limits": resources} if resources else {}


def _arguments(args: Mapping[str, Any] | None, source: str) -> str:
    try:
        return json.dumps(dict(args or {}), sort_keys=True, indent=1)
    except (TypeError, ValueError) as error:
        reason = f"must be JSON (numbers, strings, lists, maps): {error}"
        raise ManifestError(source, [Problem("args", reason)]) from None


def experiment_name(text: str) -> str:
    """A function's name as an experiment name (a DNS-1035 label)."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return (name if name[:1].isalpha() else f"fn-{name}")[:63].rstrip("-") or "function"


# --- the program --------------------------------------------------------------------------
