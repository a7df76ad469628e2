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
"""

from __future__ import annotations

from ..experiment.groups import JobSetType
from ..experiment.model import Spec
from .base import Env, Group, Names, Plan


def plan(spec: Spec, names: Names) -> Plan:
    types: dict[str, JobSetType] = {
        name: t for name, t in spec.types.present().items() if t.count > 0
    }
    jobs = sum(t.count for t in types.values())
    groups = []
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
    group = Group(role="worker", replica_type="Worker", spec=worker)
    return Plan(framework="batchjob", groups=(group,), entry_point="worker", independent=True)
