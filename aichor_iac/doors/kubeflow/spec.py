"""The Training Operator's kinds (`kubeflow.org/v1` PyTorchJob, XGBoostJob, JAXJob, TFJob,
PaddleJob; the MPI Operator's `v2beta1` MPIJob) as this product reads them: each kind as data
(`KINDS`, its `*_types.go` and `*_defaults.go`), and the models its spec is validated against,
unknown keys refused with their path. Pod templates stay plain JSON."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import Field

from ...experiment.groups import Model
from ...reading import podtemplate as templates
from ...reading.podtemplate import Template
from ...rules.limits import INT32, MAX_INDEXED


@dataclass(frozen=True)
class Kind:
    """One kind of the Training Operator, as data (its `*_types.go` and `*_defaults.go`)."""

    operator: str  # aichor-iac's framework
    specs: str  # the field holding the replica specs
    types: tuple[str, ...]  # replica types, in rank order
    container: str | None  # the operator's container (env, port, command); None: the first
    port: tuple[str, int] | None  # the port the operator puts on that container unless named
    restart: Literal["Never", "OnFailure"]  # default replicaSpec restartPolicy
    needs: tuple[str, ...] = ()  # replica types of which at least one must be given
    single: tuple[str, ...] = ()  # replica types of exactly one replica
    restarts: tuple[tuple[str, Literal["Never", "OnFailure"]], ...] = ()  # per type, if other
    default: tuple[str, ...] = ()  # the container's command when it has neither command nor args
    positive: bool = False  # the webhook refuses 0 replicas of the types not in `single`


KINDS = {
    "PyTorchJob": Kind(
        "pytorch",
        "pytorchReplicaSpecs",
        ("Master", "Worker"),
        "pytorch",
        ("pytorchjob-port", 23456),
        "OnFailure",
        needs=("Master", "Worker"),
        single=("Master",),
        positive=True,
    ),
    "XGBoostJob": Kind(
        "xgboost",
        "xgbReplicaSpecs",
        ("Master", "Worker"),
        "xgboost",
        ("xgboostjob-port", 9999),
        "Never",
        needs=("Master",),
        single=("Master",),
    ),
    "JAXJob": Kind(
        "jax", "jaxReplicaSpecs", ("Worker",), "jax", ("jaxjob-port", 6666), "Never", ("Worker",)
    ),
    "TFJob": Kind(
        "tf",
        "tfReplicaSpecs",
        ("Chief", "PS", "Worker", "Evaluator"),
        "tensorflow",
        ("tfjob-port", 2222),
        "Never",
        needs=("Chief", "Worker"),
        single=("Chief",),
    ),
    "PaddleJob": Kind(
        "paddle",
        "paddleReplicaSpecs",
        ("Master", "Worker"),
        "paddle",
        ("master", 36543),
        "OnFailure",
        needs=("Worker",),
    ),
    # kubeflow/mpi-operator v2 (`pkg/apis/kubeflow/v2beta1`, `pkg/controller`): the first
    # container is the operator's; a worker with no command runs `/usr/sbin/sshd -De`.
    "MPIJob": Kind(
        "mpi",
        "mpiReplicaSpecs",
        ("Launcher", "Worker"),
        None,
        None,
        "Never",
        needs=("Launcher",),
        single=("Launcher",),
        restarts=(("Launcher", "OnFailure"),),
        default=("/usr/sbin/sshd", "-De"),
        positive=True,
    ),
}


class SchedulingPolicy(Model):
    where: ClassVar[str] = "spec.runPolicy.schedulingPolicy"
    scheduler: ClassVar[str | None] = None  # (any gang scheduler's PodGroup)

    min_available: int | None = Field(None, ge=1, le=INT32)
    queue: str | None = None
    min_resources: dict[str, Any] | None = None
    priority_class: str | None = None
    schedule_timeout_seconds: int | None = Field(None, ge=1, le=INT32)

    def pod_group(self, scheduler: str) -> dict[str, Any]:
        """What the operator puts in its PodGroup's spec (release-1.9 `ReconcileJobs`) beside
        minMember: Volcano's queue and priority class, scheduler-plugins' timeout, either's
        minResources; minMember itself is `minAvailable` when given."""
        spec: dict[str, Any] = {"minMember": self.min_available} if self.min_available else {}
        if scheduler == "volcano":
            spec["queue"] = self.queue or "default"
            if self.priority_class:
                spec["priorityClassName"] = self.priority_class
        elif self.schedule_timeout_seconds:
            spec["scheduleTimeoutSeconds"] = self.schedule_timeout_seconds
        if self.min_resources:
            spec["minResources"] = dict(self.min_resources)
        return spec


class RunPolicy(Model):
    clean_pod_policy: Literal["None", "Running", "All"] | None = None
    ttl_seconds_after_finished: int | None = Field(None, ge=0, le=INT32)
    active_deadline_seconds: int | None = Field(None, ge=1, le=INT32)
    backoff_limit: int | None = Field(None, ge=0, le=INT32)
    scheduling_policy: SchedulingPolicy | None = None
    suspend: bool = False
    managed_by: str | None = None


class RdzvConf(Model):
    key: str
    value: str = ""


class ElasticPolicy(Model):
    min_replicas: int | None = Field(None, ge=1, le=MAX_INDEXED)
    max_replicas: int | None = Field(None, ge=1, le=MAX_INDEXED)
    rdzv_backend: Literal["c10d", "etcd", "etcd-v2"] | None = None
    rdzv_port: int | None = Field(None, ge=1, le=65535)
    rdzv_host: str | None = None
    rdzv_id: str | None = None
    rdzv_conf: list[RdzvConf] = Field(default_factory=list)
    standalone: bool | None = None
    n_proc_per_node: int | None = Field(None, ge=1, le=INT32)
    max_restarts: int | None = Field(None, ge=0, le=INT32)
    metrics: list[dict[str, Any]] | None = None


class ReplicaSpec(Model):
    replicas: int = Field(1, ge=0, le=MAX_INDEXED)
    restart_policy: Literal["Always", "OnFailure", "Never", "ExitCode"] | None = None
    template: Template


class JobSpec(Model):
    """What every kind's spec has beside its replica specs (which are read per type)."""

    run_policy: RunPolicy = RunPolicy()


class PyTorchJobSpec(JobSpec):
    pytorch_replica_specs: dict[str, Any]
    elastic_policy: ElasticPolicy | None = None
    nproc_per_node: str | None = None


class XGBoostJobSpec(JobSpec):
    xgb_replica_specs: dict[str, Any]


class JAXJobSpec(JobSpec):
    jax_replica_specs: dict[str, Any] = Field(alias="jaxReplicaSpecs")


class TFJobSpec(JobSpec):
    tf_replica_specs: dict[str, Any]
    success_policy: Literal["", "AllWorkers"] = ""
    enable_dynamic_worker: bool = False


class PaddleJobSpec(JobSpec):
    paddle_replica_specs: dict[str, Any]
    elastic_policy: dict[str, Any] | None = None


class MPIJobSpec(JobSpec):
    mpi_replica_specs: dict[str, Any] = Field(alias="mpiReplicaSpecs")
    slots_per_worker: int = Field(1, ge=1, le=MAX_INDEXED)
    run_launcher_as_worker: bool = False
    ssh_auth_mount_path: str = Field("/root/.ssh", pattern=r"^/")
    launcher_creation_policy: Literal["AtStartup", "WaitForWorkersReady"] = "AtStartup"
    mpi_implementation: Literal["OpenMPI", "Intel", "MPICH"] = "OpenMPI"


SPEC_MODELS: dict[str, type[JobSpec]] = {
    "MPIJob": MPIJobSpec,
    "PyTorchJob": PyTorchJobSpec,
    "XGBoostJob": XGBoostJobSpec,
    "JAXJob": JAXJobSpec,
    "TFJob": TFJobSpec,
    "PaddleJob": PaddleJobSpec,
}
# The kinds' own fields that aichor-iac does not run (yet), and why: each a clear error.
UNSUPPORTED = {
    ("TFJob", "successPolicy"): "AllWorkers (success once every worker succeeded) is not run "
    "here: remove it (the chief, or worker 0, decides the experiment's end)",
    ("TFJob", "enableDynamicWorker"): "a sparse TF_CONFIG for workers added at run time is not "
    "given here: remove it (every replica gets the whole cluster)",
    ("PaddleJob", "elasticPolicy"): "elastic PaddlePaddle jobs are not run here yet: remove it "
    "(the replicas run at their count)",
}


Resource = templates.CustomResource
