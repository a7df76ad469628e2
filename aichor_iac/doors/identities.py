"""Which custom resources the front doors read — API versions and kinds, as data — so that the
router picks a door, and refuses what none reads, without importing the doors it does not use.
Each door takes its own names from here.
"""

from __future__ import annotations

from typing import Any

KUBEFLOW = "kubeflow.org"  # (its kinds' versions: `kubeflow.door.KINDS`)
JOB = ("batch/v1", "Job")  # a Katib trial's most common kind (door `job`)
KATIB = (
    "kubeflow.org/v1beta1",
    "Experiment",
)  # a sweep of trials, in Kubeflow's group (`katib.door`)
RAY = "ray.io/v1"
RAY_KINDS = ("RayJob", "RayCluster")
JOBSET = "jobset.x-k8s.io/v1alpha2"
JOBSET_KINDS = ("JobSet",)
TRAINER = "trainer.kubeflow.org/v1alpha1"
TRAINER_KINDS = ("TrainJob",)
RUNTIME_KINDS = ("TrainingRuntime", "ClusterTrainingRuntime")
# The door (module under this package) of each API group a custom resource may be in
DOORS = {
    "kubeflow.org/": "kubeflow.door",
    "ray.io/": "kuberay.door",
    "jobset.x-k8s.io/": "jobset.door",
    "trainer.kubeflow.org/": "trainer.door",
}


def is_runtime(data: Any) -> bool:
    """Whether a document is a Trainer runtime (read with the TrainJob that names it)."""
    return (
        isinstance(data, dict)
        and data.get("apiVersion") == TRAINER
        and data.get("kind") in RUNTIME_KINDS
    )
