"""Ray (AIchor's Ray operator; KubeRay for `operator: kuberay`): `Head`, worker pools under
`Workers`, and `Job` (or, for kuberay, a submitter).

The head runs `ray start --head` (GCS 6379, dashboard 8265 on all interfaces, client 10001)
behind the Service `<experiment>-head`; each pool runs `ray start --address=… --block` with a
custom resource named after the pool. The job joins the cluster, waits until the head reports
every head and pool node, then runs the manifest command, so a bare `ray.init()` connects
(`RAY_ADDRESS`). The kuberay submitter instead submits the command to the head through the Ray
Jobs API, follows its logs and fails if the Ray job failed. Head and pools follow the entry
point: once it has ended they stop, so no GPU stays held.

Flags are those `ray start` has from Ray 1.6 to the newest 2.x. The cluster's secret is
`--redis-password` for Ray 1.x and token authentication (`RAY_AUTH_MODE=token`, Ray 2.52 and
later; earlier 2.x releases ignore it) otherwise.
"""

from __future__ import annotations

import functools
import json
import math
import shlex
from dataclasses import dataclass, replace
from typing import Any

from .. import pods
from ..experiment.groups import RayGroup, ReplicaType
from ..experiment.model import Spec
from ..experiment.rules import ray_flag, ray_version
from .base import Endpoint, Env, Group, Names, Plan, slot_group, slots_of, tpu_env

GCS, DASHBOARD, CLIENT = 6379, 8265, 10001
PORTS = (("gcs", GCS), ("dashboard", DASHBOARD), ("client", CLIENT))

HEAD_FLAGS = {
    "head": True,
    "port": GCS,
    "dashboard-host": "0.0.0.0",
    "dashboard-port": DASHBOARD,
    "ray-client-server-port": CLIENT,
    "block": True,  # in the foreground: the head is Ready once its GCS accepts connections
}
EVERY_NODE = '""'  # the kuberay entrypoint runs on the head: every node counts


@functools.cache
def submitter() -> ReplicaType:
    """What the kuberay submitter asks for (KubeRay's default submitter: 500m CPU, 1Gi); made
    when first asked, not when a validation imports this module."""
    return ReplicaType.model_validate({"count": 1, "resources": {"cpus": 0.5, "memory": 1}})


@dataclass(frozen=True)
class _Cluster:
    """What every group of one Ray cluster shares: where its head is, how its nodes join."""

    spec: Spec
    names: Names
    legacy: bool  # Ray 1.x

    @property
    def head_service(self) -> str:
        return f"{self.names.experiment}-head"

    @property
    def head_host(self) -> str:
        return self.names.service_host(self.head_service)

    @property
    def address(self) -> str:
        return f"{self.head_host}:{GCS}"

    @property
    def env(self) -> tuple[Env, ...]:
        return cluster_env(self.address, self.legacy)

    @property
    def entry_host(self) -> str:
        return self.names.host("job" if self.spec.operator == "ray" else "submitter", 0)


def plan(spec: Spec, names: Names) -> Plan:
    """AIchor's `ray` (a Job group joins the cluster and runs the command) and `kuberay` (a
    submitter submits it to the head's Jobs API): head, pools, then the entry point."""
    cluster = _Cluster(spec, names, (ray_version(spec) or (2, 0)) < (2, 0))
    groups = [_head(cluster), *_pools(cluster)]
    started = tuple(g.role for g in groups)
    expected = sum(g.count for g in groups)  # the head and every pool replica
    entry = _job(cluster, expected) if spec.operator == "ray" else _submitter(cluster, expected)
    groups.append(replace(entry, after=started))
    head_service, address = cluster.head_service, cluster.address
    return Plan(
        framework="ray",
        groups=tuple(groups),
        jupyter_role="head",  # (where the driver's cluster is)
        entry_point=entry.role,
        addresses={"head": address},
        secret="password",
        services={head_service: "head"},
        outputs={
            "rayAddress": address,
            "dashboard": f"kubectl port-forward -n {names.namespace} svc/{head_service} "
            f"{DASHBOARD}",
            "dashboardUrl": f"http://{cluster.head_host}:{DASHBOARD}",
            "expectedNodeCount": expected,
        },
    )


def _head(cluster: _Cluster) -> Group:
    head_spec = cluster.spec.types.get("Head")
    assert head_spec is not None  # the manifest rules require it
    head_start = start(head_spec, HEAD_FLAGS, cluster.legacy)
    return Group(
        role="head",
        replica_type="Head",
        spec=head_spec,
        env=(*cluster.env, *kuberay_env(cluster.names, HEAD_GROUP, head_start, None)),
        ports=PORTS,
        follows=cluster.entry_host,
        leader_first=False,
        program=head_start,
        ready_port=GCS,
    )


def _pools(cluster: _Cluster) -> list[Group]:
    """Each worker pool (a multi-host TPU pool: a group per slice), joining the head."""
    groups = []
    for pool in [p for p in cluster.spec.types.get("Workers") or [] if p.count > 0]:
        resources = {pool.name: _cpus(pool)}
        flags = {"address": cluster.address, "block": True}
        pool_start = start(pool, flags, cluster.legacy, resources)
        node = kuberay_env(cluster.names, pool.name, pool_start, cluster.head_service)
        for slot in slots_of(pool.name, "Workers", pool):
            groups.append(
                slot_group(
                    slot,
                    env=(*cluster.env, *node, *tpu_env(cluster.names, slot)),
                    waits_for=(Endpoint(cluster.head_host, GCS),),
                    follows=cluster.entry_host,
                    leader_first=False,
                    program=retried(pool_start),
                    after=("head",),
                )
            )
    return groups


def _job(cluster: _Cluster, expected: int) -> Group:
    """`ray`: a node that joins the cluster, waits for every node, then runs the command."""
    job = cluster.spec.types.get("Job")
    join = start(job, {"address": cluster.address}, cluster.legacy)
    program = f"""{retried(join)}
{wait_for_nodes(expected, '"$CURRENT_POD_IP"', cluster.spec)} || exit 1
exec /bin/sh -c {shlex.quote(cluster.spec.command)}"""
    return Group(
        role="job",
        replica_type="Job",
        spec=job,
        env=cluster.env,
        waits_for=(Endpoint(cluster.head_host, GCS),),
        program=program,
    )


def _submitter(cluster: _Cluster, expected: int) -> Group:
    """`kuberay`: KubeRay's submitter, which submits the command to the head's Jobs API."""
    names, dashboard = cluster.names, f"{cluster.head_host}:{DASHBOARD}"
    # The user's command as one argument: `;`, `||` or a newline in it cannot run anything
    # before (or instead of) the wait.
    program = submit(
        f"http://{dashboard}", names.experiment, cluster.spec.command, expected, cluster.spec, {}
    )
    # What KubeRay's submitter Job sees (`ray job submit --address=http://$RAY_DASHBOARD_
    # ADDRESS --submission-id=$RAY_JOB_SUBMISSION_ID`).
    submitter_env = (
        Env("RAY_DASHBOARD_ADDRESS", dashboard),
        Env("RAY_JOB_SUBMISSION_ID", names.experiment),
    )
    return Group(
        role="submitter",
        replica_type="Submitter",
        spec=submitter(),
        env=(*cluster.env, *submitter_env),
        waits_for=(Endpoint(cluster.head_host, DASHBOARD),),
        program=program,
    )


def submit(
    url: str, job: str, command: str, expected: int, spec: Spec, options: dict[str, Any]
) -> str:
    """The submitter's program: submit `command` as Ray job `job` once every node of the
    cluster has joined (the user's command as one argument: `;`, `||` or a newline in it
    cannot run anything before, or instead of, the wait), follow it, exit with its outcome."""
    entrypoint = (
        f"{wait_for_nodes(expected, EVERY_NODE, spec)} && /bin/sh -c {shlex.quote(command)}"
    )
    options_json = json.dumps(options, sort_keys=True, separators=(",", ":"))
    args = (pods.source("ray_submit"), url, job, entrypoint, str(_deadline(spec)), options_json)
    return "python3 -c " + " ".join(map(shlex.quote, args))


def cluster_env(address: str, legacy: bool) -> tuple[Env, ...]:
    """DESIGN §5's Ray row, on every container; the secret by reference only. `RAY_ADDRESS`
    is the head's Service on the head too: KubeRay gives the head `127.0.0.1:6379`, but our
    head's GCS listens on the pod's address (`--node-ip-address`), not on the loopback."""
    env = [
        Env.field("CURRENT_POD_IP", "status.podIP"),
        Env.secret("REDIS_PASSWORD", "password"),
        Env("RAY_SERVER", address),
        Env("RAY_ADDRESS", address),
    ]
    if not legacy:
        env += [Env("RAY_AUTH_MODE", "token"), Env.secret("RAY_AUTH_TOKEN", "password")]
    return (*env, Env("PYTHONUNBUFFERED", "1"))


HEAD_GROUP = "headgroup"  # KubeRay's `ray.io/group` label value of the head


def kuberay_env(
    names: Names,
    group: str,
    ray_start: str,
    head_service: str | None,
    port: int = GCS,
    address: str | None = None,
    user: frozenset[str] = frozenset(),
) -> tuple[Env, ...]:
    """What KubeRay gives a Ray node's container (ray-operator `setContainerEnvVars`, in
    controllers/ray/common/pod.go), in its order: for a worker the head's Service (`FQ_RAY_IP`,
    and `RAY_IP` its first label); the cluster's name and namespace, the pod's name, its group
    (`headgroup` for the head), the generated `ray start` command; then, unless the container
    sets them (`user`), the GCS port, `address` as RAY_ADDRESS, the dashboard's disk usage,
    and (ours, not KubeRay's) no drain on TERM. Left out: KubeRay's own usage-stats tags
    (`RAY_USAGE_STATS_*`), which would report this cluster as KubeRay's."""
    env = []
    if head_service is not None:
        head = names.service_host(head_service)
        env += [Env("FQ_RAY_IP", head), Env("RAY_IP", head_service)]
    env += [
        Env("RAY_CLUSTER_NAME", names.experiment),
        Env.field("RAY_CLUSTER_NAMESPACE", "metadata.namespace"),
        Env.field("RAY_CLOUD_INSTANCE_ID", "metadata.name"),
        Env("RAY_NODE_TYPE_NAME", group),
        Env.literal("KUBERAY_GEN_RAY_START_CMD", ray_start),
    ]
    unless_set = [
        Env("RAY_PORT", str(port)),
        *([Env("RAY_ADDRESS", address)] if address else []),
        Env("RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE", "1"),
        # A node is stopped (TERM to its process group) only when its whole cluster ends or
        # restarts. Since ray-project/ray#64454, `ray start --block` first drains the node
        # through the GCS (30 s by default in Ray 2.60), for Serve replicas that a cluster
        # ending with its job has no use for; its GCS stopped too, it waited out the 30 s.
        Env("RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S", "0"),
    ]
    return (*env, *(e for e in unless_set if e.name not in user))


def start(
    group: RayGroup,
    flags: dict[str, object],
    legacy: bool,
    resources: dict[str, int] | None = None,
) -> str:
    """`ray start` for a group: the given flags, its share of the pod's resources, the
    cluster password on Ray 1.x, then the group's `rayStartParams` (which win, except for
    the flags that wire the cluster, rejected by the manifest rules)."""
    derived: dict[str, object] = {
        **flags,
        "node-ip-address": EnvRef("CURRENT_POD_IP"),
        "num-cpus": _cpus(group),
        "num-gpus": group.resources.gpus,
        "memory": int(group.resources.memory_gib * 2**30),
    }
    if legacy:
        derived["redis-password"] = EnvRef("REDIS_PASSWORD")
    params = {ray_flag(k): v for k, v in group.ray_start_params.items()}
    if resources or "resources" in params:
        derived["resources"] = json.dumps(
            {**(resources or {}), **json.loads(str(params.pop("resources", "{}")))},
            separators=(",", ":"),
        )
    derived.update(params)
    args = []
    for flag, value in derived.items():  # names checked by the manifest rules (RAY_FLAG)
        if flag in RAY_SWITCHES:  # on or off: a bare flag, or nothing
            if value is True or str(value).lower() == "true":
                args.append(f"--{flag}")
        elif isinstance(value, EnvRef):  # the pod's own env, expanded by the shell
            args.append(f'--{flag}="${value.name}"')
        else:  # the user's values: quoted, never expanded; booleans as Ray's click reads them
            text = str(value).lower() if isinstance(value, bool) else str(value)
            args.append(f"--{flag}={shlex.quote(text)}")
    return "ray start " + " ".join(args)


START_ATTEMPTS, START_PAUSE = 3, 5


def retried(ray_start: str) -> str:
    """`ray start`, tried again (at most START_ATTEMPTS times, after `ray stop --force`) when
    it fails, as KubeRay's restart of a worker's container does: a node whose head has opened
    its GCS port but not yet registered itself ("No node info found for head node"), or whose
    raylet missed Ray's fixed 30 s to register on a loaded machine, joins at the next try. A
    node stopped by its follower (TERM to its process group) is not started again."""
    return f"""\
attempt=1
until {ray_start}; do
  if [ "$attempt" -ge {START_ATTEMPTS} ]; then exit 1; fi
  echo "aichor: ray start failed ($attempt of {START_ATTEMPTS} tries), again in {START_PAUSE}s" >&2
  ray stop --force >/dev/null 2>&1; attempt=$((attempt + 1)); sleep {START_PAUSE}
done"""


@dataclass(frozen=True)
class EnvRef:
    """A `ray start` value the replica's shell takes from its env (never a user value)."""

    name: str


# `ray start`'s on/off options (`is_flag` in ray/scripts/scripts.py, Ray 2.x): they take no
# value. Every other option takes one, booleans too (`--include-dashboard=false`).
RAY_SWITCHES = frozenset(
    {
        "block",
        "head",
        "disable-usage-stats",
        "enable-object-reconstruction",
        "enable-resource-isolation",
        "no-monitor",
        "no-redirect-output",
        "ray-debugger-external",
    }
)


def wait_for_nodes(expected: int, me: str, spec: Spec) -> str:
    return f"python3 -c {shlex.quote(pods.source('ray_wait'))} {expected} {me} {_deadline(spec)}"


def _deadline(spec: Spec) -> int:
    """How long the job waits for nodes: the experiment's timeout, else 30 minutes."""
    return spec.timeout_seconds or 1800


def _cpus(group: ReplicaType) -> int:
    """Whole CPUs for Ray, rounded up as KubeRay does."""
    return max(1, math.ceil(group.resources.cpus))
