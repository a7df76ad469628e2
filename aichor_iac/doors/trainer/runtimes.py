"""Kubeflow Trainer's standard runtimes, known by name without a cluster: the
`ClusterTrainingRuntime`s of kubeflow/trainer v2.3.0 (`manifests/base/runtimes/`), as data;
and what its ML policies' plugins add to the trainer's node container (`POLICIES`).

A TrainJob names one in `runtimeRef` (kind `ClusterTrainingRuntime`, the default); a runtime
given in the same file takes precedence over one of these by the same name.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

from ...reading import podtemplate as templates
from ...rules.limits import quantity

VERSION = "v2.3.0"  # the kubeflow/trainer release these follow
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
NODE = "node"  # the trainer's Job and container
LAUNCHER = "launcher"  # the MPI launcher's Job
TRAINER_PORT = 29500  # Trainer's ContainerTrainerPort
INDEX_FIELD = "metadata.annotations['batch.kubernetes.io/job-completion-index']"


def _runtime(name: str, framework: str, policy: dict[str, Any], image: str) -> dict[str, Any]:
    """A runtime of one `node` replicated Job (the trainer), as the manifests write it."""
    container = {"name": "node", "image": image}
    job = {
        "name": "node",
        "template": {
            "metadata": {"labels": {ANCESTOR: "trainer"}},
            "spec": {"template": {"spec": {"containers": [container]}}},
        },
    }
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name, "labels": {"trainer.kubeflow.org/framework": framework}},
        "spec": {
            "mlPolicy": {"numNodes": 1, **policy},
            "template": {"spec": {"replicatedJobs": [job]}},
        },
    }


RUNTIMES: dict[str, dict[str, Any]] = {
    "torch-distributed": _runtime(
        "torch-distributed",
        "torch",
        {"torch": {}},
        "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime",
    ),
    "jax-distributed": _runtime(
        "jax-distributed", "jax", {"jax": {}}, "nvcr.io/nvidia/jax:25.10-py3"
    ),
    "xgboost-distributed": _runtime(
        "xgboost-distributed",
        "xgboost",
        {"xgboost": {}},
        "ghcr.io/kubeflow/trainer/xgboost-runtime",
    ),
}


def _mpi_runtime(name: str, framework: str, image: str) -> dict[str, Any]:
    """A runtime of Trainer's MPI policy as the manifests write it: `node` Jobs running sshd
    (Ready once it listens on 2222) and the trainer's `launcher`, created once they are Ready,
    running `mpirun` (and ranks itself: runLauncherAsNode); the set ends with the launcher."""
    user = {"securityContext": {"runAsUser": 1000}}
    sshd = {
        "command": ["/usr/sbin/sshd"],
        "args": ["-De", "-f", "/home/mpiuser/.sshd_config"],
        "readinessProbe": {"tcpSocket": {"port": 2222}, "initialDelaySeconds": 5},
    }

    def pod(**more: Any) -> dict[str, Any]:
        container = {"name": NODE, "image": image, **user, **more}
        return {"spec": {"securityContext": {"fsGroup": 1000}, "containers": [container]}}

    node = {"name": NODE, "template": {"spec": {"template": pod(**sshd)}}}
    launcher = {
        "name": LAUNCHER,
        "dependsOn": [{"name": NODE, "status": "Ready"}],
        "template": {
            "metadata": {"labels": {ANCESTOR: "trainer"}},
            "spec": {"template": pod()},
        },
    }
    policy = {
        "numProcPerNode": 1,
        "mpiImplementation": "OpenMPI",
        "sshAuthMountPath": "/home/mpiuser/.ssh",
        "runLauncherAsNode": True,
    }
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name, "labels": {"trainer.kubeflow.org/framework": framework}},
        "spec": {
            "mlPolicy": {"numNodes": 1, "mpi": policy},
            "template": {
                "spec": {
                    "network": {"publishNotReadyAddresses": True},
                    "successPolicy": {"operator": "All", "targetReplicatedJobs": [LAUNCHER]},
                    "replicatedJobs": [node, launcher],
                }
            },
        },
    }


RUNTIMES.update(
    {
        "deepspeed-distributed": _mpi_runtime(
            "deepspeed-distributed", "deepspeed", "ghcr.io/kubeflow/trainer/deepspeed-runtime"
        ),
        "mlx-distributed": _mpi_runtime(
            "mlx-distributed", "mlx", "ghcr.io/kubeflow/trainer/mlx-runtime"
        ),
    }
)


class Trainer(Protocol):
    """What the plugins read of a TrainJob's trainer."""

    @property
    def num_proc_per_node(self) -> int | None: ...


def _torch_env(
    resources: dict[str, Any], trainer: Trainer, nodes: int, name: str | None
) -> list[dict[str, Any]]:
    """What Trainer's torch plugin gives the node container (`EnforceMLPolicy`): torchrun's
    PET_* variables, rank 0's host as the master."""
    per_node: str
    if trainer.num_proc_per_node is not None:
        per_node = str(trainer.num_proc_per_node)
    elif gpus(resources):
        per_node = "auto"
    else:
        per_node = str(max(1, _cpus(resources)))
    return [
        {"name": "PET_NNODES", "value": str(nodes)},
        {"name": "PET_NPROC_PER_NODE", "value": per_node},
        {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": INDEX_FIELD}}},
        {"name": "PET_MASTER_ADDR", "value": f"{name}-{NODE}-0-0.{name}"},
        {"name": "PET_MASTER_PORT", "value": str(TRAINER_PORT)},
    ]


def _jax_env(
    resources: dict[str, Any], trainer: Trainer, nodes: int, name: str | None
) -> list[dict[str, Any]]:
    """What Trainer's jax plugin gives: `jax.distributed.initialize()`'s variables."""
    return [
        {"name": "JAX_NUM_PROCESSES", "value": str(nodes)},
        {"name": "JAX_PROCESS_ID", "valueFrom": {"fieldRef": {"fieldPath": INDEX_FIELD}}},
        {"name": "JAX_COORDINATOR_ADDRESS", "value": f"{name}-{NODE}-0-0.{name}:{TRAINER_PORT}"},
    ]


def _xgboost_env(
    resources: dict[str, Any], trainer: Trainer, nodes: int, name: str | None
) -> list[dict[str, Any]]:
    """What Trainer's xgboost plugin gives: the Rabit tracker (rank 0 hosts it) and a
    worker per GPU of every node (one per node without GPUs)."""
    return [
        {"name": "DMLC_TRACKER_URI", "value": f"{name}-{NODE}-0-0.{name}"},
        {"name": "DMLC_TRACKER_PORT", "value": str(TRAINER_PORT)},
        {"name": "DMLC_TASK_ID", "valueFrom": {"fieldRef": {"fieldPath": INDEX_FIELD}}},
        {"name": "DMLC_NUM_WORKER", "value": str(nodes * max(1, gpus(resources)))},
    ]


# Each ML policy: its plugin's env on the node container (after the trainer's), and the names
# its webhook refuses in spec.trainer.env.
POLICIES = {
    "torch": (
        _torch_env,
        ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"),
    ),
    "jax": (_jax_env, ()),
    "xgboost": (
        _xgboost_env,
        ("DMLC_TRACKER_URI", "DMLC_TRACKER_PORT", "DMLC_TASK_ID", "DMLC_NUM_WORKER"),
    ),
}


def gpus(resources: dict[str, Any]) -> int:
    """Trainer's `GetNumGPUPerNode`: the first `*gpu*` request (by name), else limit,
    rounded up."""
    for kind in ("requests", "limits"):
        found = sorted(
            (k, v) for k, v in templates.mapping(resources.get(kind)).items() if "gpu" in k.lower()
        )
        if found and (count := math.ceil(quantity(found[0][1]))):
            return count
    return 0


def _cpus(resources: dict[str, Any]) -> int:
    """Trainer's `getNumCPUPerNode`: the CPU request, else the limit, rounded up."""
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    value = templates.mapping(requests).get("cpu") or templates.mapping(limits).get("cpu") or 0
    return math.ceil(quantity(value))


def upserted(env: list[Any], added: list[dict[str, Any]]) -> list[Any]:
    """Trainer's `UpsertEnvVars`: a variable given again replaces the earlier one in place."""
    result = list(env)
    for entry in added:
        names = [e.get("name") if isinstance(e, dict) else None for e in result]
        at = next((i for i, n in enumerate(names) if n == entry.get("name")), None)
        if at is None:
            result.append(dict(entry))
        else:
            result[at] = dict(entry)
    return result


def node_containers(rjob: dict[str, Any], name: str = NODE) -> list[dict[str, Any]]:
    """A replicated Job's containers named `name` (a malformed one is refused once the JobSet
    is read)."""
    job_spec = templates.mapping(rjob["template"].get("spec"))
    pod = templates.mapping(templates.mapping(job_spec.get("template")).get("spec"))
    containers = templates.listed(pod.get("containers"))
    return [c for c in containers if isinstance(c, dict) and c.get("name") == name]
