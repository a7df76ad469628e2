"""What a framework reads of a custom resource beyond its pod templates, one type each: a
KubeRay RayCluster's or RayJob's (`RayOptions`) and a JobSet's (`JobSetOptions`, a TrainJob's
too). A Kubeflow kind's own spec fields are kept as written (`Origin.fields`): its framework
reads a few of them by their names, and `convert` lists the others."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RaySubmission:
    """A RayJob's submission, as its submitter runs `ray job submit`."""

    entrypoint: str
    job_id: str | None
    shutdown: bool  # shutdownAfterJobFinishes
    submitter: bool  # a submitter pod template or config is given
    # what else it submits with, as `ray job submit` names it (runtime_env, metadata, …)
    extra: dict[str, Any]


@dataclass(frozen=True)
class RayOptions:
    """A RayCluster's (or a RayJob's cluster's) fields the Ray framework reads."""

    params: dict[str, dict[str, Any]]  # each group's rayStartParams: Head, then each pool
    auth: str | None  # token auth: its Secret's name ("": a generated one); None: no auth
    autoscaling: tuple[str, ...]  # the autoscaler's fields given, by path (none runs here)
    job: RaySubmission | None = None  # a RayJob's; None: a RayCluster


@dataclass(frozen=True)
class JobSetJob:
    """A JobSet's replicated Job, as its controller reads it."""

    name: str
    replicas: int
    group_name: str
    depends_on: dict[str, str]  # the replicated Jobs it waits for, and for what: Ready, Complete
    exclusive: dict[str, str]  # its exclusive placement's annotations


@dataclass(frozen=True)
class JobSetSuccess:
    """A JobSet's success policy: All or Any of its `targets` (none: every replicated Job);
    `early`: the set ends once it has succeeded, with Jobs still running."""

    operator: str
    targets: tuple[str, ...]
    early: bool


@dataclass(frozen=True)
class TrainerMpi:
    """A TrainJob's MPI plugin: where the key pair is mounted, slots per node, and whether
    the launcher is a node too."""

    mount_path: str
    slots: int
    as_node: bool


@dataclass(frozen=True)
class JobSetOptions:
    """A JobSet's fields the JobSet framework reads (a TrainJob's, as the JobSet Trainer
    makes)."""

    replicated_jobs: tuple[JobSetJob, ...]
    success: JobSetSuccess
    in_order: bool  # startupPolicy InOrder
    coordinator: tuple[str, int, int] | None  # (replicated Job, Job index, pod index)
    mpi: TrainerMpi | None = None  # a TrainJob on an MPI runtime
    runtime: str = ""  # a TrainJob's: the Trainer runtime it names
