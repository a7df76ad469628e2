"""AIchor's `jobset` operator (a JobSet of replicated Jobs) and `batchjob` (one Indexed Job):
independent parallel work, no rendezvous.

jobset: each type (free name, manifest order) is `count` Jobs `<experiment>-<type>-<j>` of
`completions` pods, at most `parallelisms` of them running at once, so pod `i` of Job `j` is the
host `<experiment>-<type>-<j>-<i>.<experiment>`, as JobSet names them. Every pod sees AIchor's
JobSet variables: `JOB_INDEX` (j), `JOB_GLOBAL_INDEX` (the Job's index across all types, in
manifest order), `GLOBAL_REPLICAS` (Jobs of all types), `REPLICATED_JOB_NAME` (the type),
`REPLICATED_JOB_REPLICAS` (the type's count), beside Kubernetes' `JOB_COMPLETION_INDEX` (i).
The experiment succeeds when every Job has completed.

batchjob: the `Worker` type as one Indexed Job of `count` pods, all running at once; each pod
sees `JOB_COMPLETION_INDEX`.

A JobSet custom resource (`from_resource`) has the same Jobs and host names, with the JobSet
controller's labels and annotations instead of AIchor's variables (v0.12.0,
`labelAndAnnotateObject`), and its policies as Pulumi's order: `startupPolicy: InOrder` and
`dependsOn: Ready` create a replicated Job's Jobs once the earlier ones' pods are all Ready,
`dependsOn: Complete` once they have completed; a `successPolicy` that ends the JobSet early
makes its one target Job the entry point the other Jobs follow (they stop when it ends, as the
controller deletes a finished JobSet's active Jobs).
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

from ..experiment.groups import JobSetType
from ..experiment.model import Spec
from ..experiment.options import JobSetJob, JobSetSuccess, TrainerMpi
from . import mpi as mpi_framework
from .base import Env, Group, Names, Plan

PREFIX = "jobset.sigs.k8s.io/"  # the JobSet controller's labels and annotations
EXCLUSIVE_TOPOLOGY = "alpha.jobset.sigs.k8s.io/exclusive-topology"
EXCLUSIVE_NODES = "alpha.jobset.sigs.k8s.io/node-selector"


def plan(spec: Spec, names: Names) -> Plan:
    if spec.origin is not None:
        return from_resource(spec, names)
    types = {
        name: t
        for name, t in spec.types.present().items()
        if isinstance(t, JobSetType) and t.count > 0
    }
    jobs = sum(t.count for t in types.values())
    groups: list[Group] = []
    for name, replicated in types.items():
        for j in range(replicated.count):
            groups.append(
                Group(
                    role=f"{name}-{j}",
                    replica_type=name,
                    spec=replicated,
                    env=(
                        Env("JOB_INDEX", str(j)),
                        Env("JOB_GLOBAL_INDEX", str(len(groups))),
                        Env("GLOBAL_REPLICAS", str(jobs)),
                        Env("REPLICATED_JOB_NAME", name),
                        Env("REPLICATED_JOB_REPLICAS", str(replicated.count)),
                    ),
                    completions=replicated.completions,
                    parallelism=min(replicated.parallelisms, replicated.completions),
                )
            )
    roles = tuple(g.role for g in groups)
    return Plan(
        framework="jobset",
        groups=tuple(groups),
        entry_point=roles[0],
        completes=roles,
        independent=True,
    )


def batch_plan(spec: Spec, names: Names) -> Plan:
    worker = spec.types.get("Worker")
    # (a Job's pods at once, where a batch/v1 Job gives its parallelism: all, else)
    parallelism = spec.origin.parallelism if spec.origin else None
    group = Group(role="worker", replica_type="Worker", spec=worker, parallelism=parallelism)
    return Plan(framework="batchjob", groups=(group,), entry_point="worker", independent=True)


def from_resource(spec: Spec, names: Names) -> Plan:
    """A JobSet's Jobs, in its order, with the controller's labels and annotations."""
    assert spec.origin is not None
    options = spec.origin.jobset
    assert options is not None
    rjobs = options.replicated_jobs
    roles = {r.name: [f"{r.name}-{j}" for j in range(r.replicas)] for r in rjobs}
    gates = {d: status for r in rjobs for d, status in r.depends_on.items()}
    entry, completes = _success(options.success, roles)
    groups: list[Group] = []
    earlier: list[str] = []
    for r in rjobs:
        name = r.name
        after = tuple(earlier) if options.in_order else _after(r, roles)
        gate = "ready" if options.in_order else gates.get(name, "").lower()
        exclusive = r.exclusive
        for j, role in enumerate(roles[name]):
            metadata = _metadata(spec, names, rjobs, r, j)
            groups.append(
                Group(
                    role=role,
                    replica_type=name,
                    spec=spec.types.get(name),
                    completions=spec.types.get(name).completions,
                    parallelism=spec.types.get(name).parallelisms,
                    after=after,
                    gate=gate,  # type: ignore[arg-type]
                    labels=metadata,
                    annotations=(*metadata, *sorted(exclusive.items())),
                    labels_on_job=True,
                    exclusive=exclusive.get(EXCLUSIVE_TOPOLOGY),
                    exclusive_nodes=EXCLUSIVE_NODES in exclusive,
                )
            )
        earlier += roles[name]
    groups = _following(groups, entry, names) if options.success.early else groups
    plan = Plan(
        framework="jobset",
        groups=tuple(groups),
        entry_point=entry,
        completes=completes,
        independent=True,
    )
    return _with_mpi(plan, spec, names, options.mpi) if options.mpi else plan


def _with_mpi(plan: Plan, spec: Spec, names: Names, mpi: TrainerMpi) -> Plan:
    """A TrainJob on an MPI runtime: the generated key pair on the `node` and `launcher` Jobs,
    the hostfile on the launcher's, listing the `node` Jobs' pods (and the launcher's, when
    it ranks too) in the JobSet's order, each with the runtime's slots."""
    ssh, hostfile = mpi_framework.trainer_mounts(mpi.mount_path)
    ranked = ("node", "launcher") if mpi.as_node else ("node",)
    hosts = [
        _host(names, group.role, i)
        for group in plan.groups
        if group.replica_type in ranked
        for i in range(spec.types.get(group.replica_type).completions)
    ]
    mounts = {"node": (ssh,), "launcher": (ssh, hostfile)}
    groups = tuple(
        replace(g, mounts=(*g.mounts, *mounts.get(g.replica_type, ()))) for g in plan.groups
    )
    text = mpi_framework.hostfile("OpenMPI", hosts, mpi.slots)
    return replace(
        plan,
        groups=groups,
        secret="ssh",
        files={**plan.files, "hostfile": text},
        outputs={**plan.outputs, "hostfile": mpi_framework.HOSTFILE},
    )


def _host(names: Names, role: str, index: int) -> str:
    """Pod `index` of a Job as the JobSet controller and Trainer name it for its peers:
    `<pod>.<subdomain>`, looked up in the pod's namespace."""
    return f"{names.pod_host(role, index)}.{names.service}"


def _after(rjob: JobSetJob, roles: dict[str, list[str]]) -> tuple[str, ...]:
    return tuple(role for d in rjob.depends_on for role in roles[d])


def _success(success: JobSetSuccess, roles: dict[str, list[str]]) -> tuple[str, tuple[str, ...]]:
    """The entry point and the Jobs that must complete: every Job (or the targets'); for a
    JobSet that ends early, its one target Job."""
    targets = success.targets or list(roles)
    wanted = tuple(role for name in targets for role in roles[name])
    if success.early:
        return wanted[0], wanted[:1]
    every = tuple(role for rs in roles.values() for role in rs)
    return (wanted or every)[0], wanted


def _following(groups: list[Group], entry: str, names: Names) -> list[Group]:
    """Every Job but the entry point follows it: it stops (and succeeds) once the entry
    point's pod has ended. One created before the entry point does not wait for it."""
    before = set()
    for group in groups:
        if group.role == entry:
            break
        before.add(group.role)
    host = names.host(entry, 0)
    return [
        g if g.role == entry else replace(g, follows=host, leader_first=g.role not in before)
        for g in groups
    ]


def _metadata(
    spec: Spec, names: Names, rjobs: tuple[JobSetJob, ...], rjob: JobSetJob, j: int
) -> tuple[tuple[str, str], ...]:
    """The JobSet controller's labels (and, the same, annotations) of Job `j` of `rjob`; the
    JobSet's UID aside (there is no JobSet object) and its restart attempt 0."""
    job = names.job(f"{rjob.name}-{j}")
    group = [r for r in rjobs if r.group_name == rjob.group_name]
    before = sum(r.replicas for r in rjobs[: rjobs.index(rjob)])
    in_group = sum(r.replicas for r in group[: group.index(rjob)])
    values = {
        "jobset-name": names.experiment,
        "replicatedjob-name": rjob.name,
        "restart-attempt": "0",
        "replicatedjob-replicas": str(rjob.replicas),
        "global-replicas": str(sum(r.replicas for r in rjobs)),
        "job-index": str(j),
        "job-key": hashlib.sha1(f"{names.namespace}/{job}".encode()).hexdigest(),
        "job-global-index": str(before + j),
        "group-name": rjob.group_name,
        "group-replicas": str(sum(r.replicas for r in group)),
        "job-group-index": str(in_group + j),
    }
    jobset = spec.origin.jobset if spec.origin else None
    if coordinator := jobset.coordinator if jobset else None:
        name, job_index, pod_index = coordinator
        values["coordinator"] = _host(names, f"{name}-{job_index}", pod_index)
    return tuple((PREFIX + key, value) for key, value in sorted(values.items()))
