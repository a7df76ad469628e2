"""Which custom resources the front doors read — API versions and kinds, as data — so that the
router picks a door, and refuses what none reads, without importing the doors it does not use.
Each door takes its own names from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

KUBEFLOW = "kubeflow.org"
# The Training Operator's kinds and the version of each read (the MPI Operator's MPIJob)
KUBEFLOW_KINDS = {
    "PyTorchJob": "v1",
    "XGBoostJob": "v1",
    "JAXJob": "v1",
    "TFJob": "v1",
    "PaddleJob": "v1",
    "MPIJob": "v2beta1",
}
JOB = ("batch/v1", "Job")  # a Katib trial's most common kind (door `job`)
KATIB = ("kubeflow.org/v1beta1", "Experiment")  # a sweep of trials, in Kubeflow's group
RAY = "ray.io/v1"
RAY_KINDS = ("RayJob", "RayCluster")
JOBSET = "jobset.x-k8s.io/v1alpha2"
JOBSET_KINDS = ("JobSet",)
TRAINER = "trainer.kubeflow.org/v1alpha1"
TRAINER_KINDS = ("TrainJob",)
# Trainer's sweep of TrainJobs (on trainer main, after v2.3.0)
OPTIMIZATION = (TRAINER, "OptimizationJob")
RUNTIME_KINDS = ("TrainingRuntime", "ClusterTrainingRuntime")


@dataclass(frozen=True)
class Entrance:
    """A custom resource read as an experiment (Katib's Experiment: as a sweep of them), and
    its door: a module under this package, imported when a file needs it."""

    api_version: str
    kind: str
    door: str

    @property
    def group(self) -> str:
        return self.api_version.split("/")[0] + "/"


# Every custom resource a door reads, in the order messages list them: the one table a new
# kind is added to (beside its door and its CRD's schema in reading/crds)
ENTRANCES = (
    *(Entrance(f"{KUBEFLOW}/{v}", kind, "kubeflow.door") for kind, v in KUBEFLOW_KINDS.items()),
    Entrance(*KATIB, "katib.door"),
    *(Entrance(RAY, kind, "kuberay.door") for kind in RAY_KINDS),
    *(Entrance(JOBSET, kind, "jobset.door") for kind in JOBSET_KINDS),
    *(Entrance(TRAINER, kind, "trainer.door") for kind in TRAINER_KINDS),
    Entrance(*OPTIMIZATION, "trainer.optimization"),
)
# The sweeps: each one's door (its `trials`) and where in it its trials' template is (each
# trial's custom resource has that template's lines)
SWEEPS = {
    KATIB: ("katib.door", ("spec", "trialTemplate", "trialSpec")),
    OPTIMIZATION: ("trainer.optimization", ("spec", "trainJobTemplate")),
}
# The door of each API group a custom resource may be in (Kubeflow's: its training jobs;
# a sweep is told apart first)
DOORS = {e.group: e.door for e in ENTRANCES if (e.api_version, e.kind) not in SWEEPS}


def is_runtime(data: Any) -> bool:
    """Whether a document is a Trainer runtime (read with the TrainJob that names it)."""
    return (
        isinstance(data, dict)
        and data.get("apiVersion") == TRAINER
        and data.get("kind") in RUNTIME_KINDS
    )
