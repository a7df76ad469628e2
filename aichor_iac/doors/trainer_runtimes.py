"""Kubeflow Trainer's standard runtimes, known by name without a cluster: the
`ClusterTrainingRuntime`s of kubeflow/trainer v2.3.0 (`manifests/base/runtimes/`), as data.

A TrainJob names one in `runtimeRef` (kind `ClusterTrainingRuntime`, the default); a runtime
given in the same file takes precedence over one of these by the same name. Only those whose
ML policy aichor-iac runs are listed; the others are named in `NOT_RUN` with the reason.
"""

from __future__ import annotations

from typing import Any

VERSION = "v2.3.0"  # the kubeflow/trainer release these follow
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"


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
}

# The standard runtimes whose ML policy is not run here yet: why, and what runs instead.
NOT_RUN = {
    "deepspeed-distributed": "its MPI policy (hostfile, SSH keys, launcher) is not read from a "
    "TrainJob yet: run it as a kubeflow.org/v2beta1 MPIJob",
    "mlx-distributed": "its MPI policy is not read from a TrainJob yet: run it as a "
    "kubeflow.org/v2beta1 MPIJob",
    "jax-distributed": "its JAX policy is not read from a TrainJob yet: run it as a "
    "kubeflow.org/v1 JAXJob",
    "xgboost-distributed": "its XGBoost policy is not read from a TrainJob yet: run it as a "
    "kubeflow.org/v1 XGBoostJob",
}
