"""Ray from a KubeRay custom resource (RayJob, RayCluster), as KubeRay runs it: each group's
kept pod template with the `ray start` KubeRay generates, KubeRay's env, labels and ports, and
a RayJob's submitter. The AIchor `ray` and `kuberay` operators are `ray.py`'s."""

from __future__ import annotations

import json
import math
import re
import shlex
from typing import Any

from ..experiment.model import Spec
from ..experiment.origin import Kept
from ..rules.limits import quantity
from .base import Endpoint, Env, Group, Names, Plan, expanded, slot_group, slots_of, tpu_env
from .ray import CLIENT, DASHBOARD, GCS, HEAD_GROUP, kuberay_env, retried, submit, submitter

ULIMIT = "ulimit -n ${RAY_START_ULIMIT_OPEN_FILES:-65536}"  # before KubeRay's `ray start`
OVERWRITE = "ray.io/overwrite-container-cmd"  # the template annotation keeping the command
METRICS_PORT, AGENT_PORT = 8080, 52365
# `ray start` options that take "true"/"false" as a value; every other "true" is a switch and
# every other "false" is left out (KubeRay's `convertParamMap`).
BOOLEAN_VALUES = ("log-color", "include-dashboard", "include-log-monitor")
ACCELERATORS = {"aws.amazon.com/neuroncore": "neuron_cores", "google.com/tpu": "TPU"}


def plan(spec: Spec, names: Names) -> Plan:
    """A RayJob or RayCluster as KubeRay runs it (v1.7.0, `controllers/ray/common/pod.go`,
    `job.go`): each group's kept template runs KubeRay's generated `ray start` (after the
    container's own command, unless that starts Ray itself) with KubeRay's env; a RayJob's
    submitter submits the entrypoint once every node has joined, and with
    `shutdownAfterJobFinishes` the cluster stops when the job ends. A RayCluster runs until
    `pulumi destroy`."""
    cluster = _Cluster(spec, names)
    groups = [_head(cluster)]
    for pool in [p for p in spec.types.get("Workers") or [] if p.count]:
        groups += _pools(cluster, pool.name, pool)
    expected = sum(g.count for g in groups)
    if cluster.job is not None:
        groups.append(_submitter(cluster, expected, after=tuple(g.role for g in groups)))
    return Plan(
        framework="ray",
        groups=tuple(groups),
        entry_point=cluster.job or "head",
        addresses={"head": f"{cluster.head_host}:{cluster.port}"},
        secret="password" if cluster.options.auth == "" else None,
        services={cluster.head_service: "head"},
        outputs={
            "rayAddress": f"{cluster.head_host}:{cluster.port}",
            "dashboard": f"kubectl port-forward -n {names.namespace} svc/"
            f"{cluster.head_service} {cluster.dashboard}",
            "dashboardUrl": f"http://{cluster.head_host}:{cluster.dashboard}",
            "expectedNodeCount": expected,
        },
        endless=cluster.job is None,
    )


class _Cluster:
    """What every group of the custom resource's cluster shares: its kept templates and
    options, the head's ports and host, the submitter's role (a RayJob's), the auth env."""

    def __init__(self, spec: Spec, names: Names) -> None:
        assert spec.origin is not None
        self.spec, self.names = spec, names
        assert spec.origin.ray is not None
        self.options, self.kept = spec.origin.ray, spec.origin.kept
        self.params = {group: start_flags(p) for group, p in self.options.params.items()}
        head = self.params["Head"]
        self.port = int(head.get("port", GCS))
        self.dashboard = int(head.get("dashboard-port", DASHBOARD))
        self.client = int(head.get("ray-client-server-port", CLIENT))
        self.head_service = f"{names.experiment}-head"
        self.head_host = names.service_host(self.head_service)
        self.job = "submitter" if spec.origin.kind == "RayJob" else None
        shutdown = self.job and self.options.job and self.options.job.shutdown
        self.follows = names.host(self.job, 0) if shutdown else None  # type: ignore[arg-type]
        self.auth = _auth_env(self.options.auth)

    def labels(self, node_type: str, group: str) -> tuple[tuple[str, str], ...]:
        """KubeRay's labels of a Ray node's pod."""
        return (
            ("ray.io/is-ray-node", "yes"),
            ("ray.io/cluster", self.names.experiment),
            ("ray.io/node-type", node_type),
            ("ray.io/group", group),
        )


def _node(cluster: _Cluster, group: str, worker: bool) -> tuple[tuple[Env, ...], str | None]:
    """A Ray node's env and its command (None: the container's own)."""
    kept, port = cluster.kept[group], cluster.port
    flags = dict(cluster.params[group])
    if worker:
        flags.setdefault("address", f"{cluster.head_host}:{port}")
    else:
        flags.setdefault("dashboard-host", "0.0.0.0")
    flags.setdefault("metrics-export-port", str(METRICS_PORT))
    flags["block"] = True
    flags.setdefault("dashboard-agent-listen-port", str(AGENT_PORT))
    ray_start = start_command(worker, flags, kept.main.get("resources") or {})
    user = frozenset(e["name"] for e in kept.main.get("env", []))
    address = f"{cluster.head_host if worker else '127.0.0.1'}:{port}"
    service = cluster.head_service if worker else None
    name = group if worker else HEAD_GROUP
    env = (
        *(e for e in cluster.auth if e.name not in user),  # on the template, before the rest
        *kuberay_env(cluster.names, name, ray_start, service, port, address, user),
    )
    return env, _command(kept, retried(ray_start) if worker else ray_start)


def _head(cluster: _Cluster) -> Group:
    env, program = _node(cluster, "Head", worker=False)
    ports = (("gcs-server", cluster.port), ("dashboard", cluster.dashboard))
    return Group(
        role="head",
        replica_type="Head",
        spec=cluster.spec.types.get("Head"),
        env=env,
        ports=(*ports, ("client", cluster.client)),
        follows=cluster.follows,
        leader_first=False,
        program=program,
        ready_port=cluster.port,
        labels=cluster.labels("head", HEAD_GROUP),
    )


def _pools(cluster: _Cluster, name: str, pool: Any) -> list[Group]:
    """A worker group's Job; a multi-host group's (`numOfHosts`: a TPU slice) one Job per
    replica, of as many pods as a slice has hosts, with the replica's KubeRay labels
    (`RayMultiHostIndexing`) and GKE's TPU webhook's env."""
    env, program = _node(cluster, name, worker=True)
    groups = []
    for slot in slots_of(name, name, pool):
        replica = (
            (
                ("ray.io/worker-group-replica-index", str(slot.tpu.index)),
                ("ray.io/worker-group-replica-name", slot.role),
            )
            if slot.tpu
            else ()
        )
        groups.append(
            slot_group(
                slot,
                env=(*env, *tpu_env(cluster.names, slot)),
                waits_for=(Endpoint(cluster.head_host, cluster.port),),
                follows=cluster.follows,
                leader_first=False,
                program=program,
                after=("head",),
                labels=(*cluster.labels("worker", name), *replica),
            )
        )
    return groups


def _submitter(cluster: _Cluster, expected: int, after: tuple[str, ...]) -> Group:
    """A RayJob's submitter: KubeRay's `ray job submit` unless the user gave a command."""
    job, dashboard = cluster.options.job, f"{cluster.head_host}:{cluster.dashboard}"
    assert job is not None
    submission = job.job_id or cluster.names.experiment
    program = None
    if not cluster.kept["Submitter"].main.get("command"):
        entrypoint, extra = job.entrypoint, job.extra
        program = submit(
            f"http://{dashboard}", submission, entrypoint, expected, cluster.spec, extra
        )
    return Group(
        role="submitter",
        replica_type="Submitter",
        spec=submitter(),
        env=(
            Env("PYTHONUNBUFFERED", "1"),
            Env("RAY_DASHBOARD_ADDRESS", dashboard),
            Env("RAY_JOB_SUBMISSION_ID", submission),
            *cluster.auth,
        ),
        waits_for=(Endpoint(cluster.head_host, cluster.dashboard),),
        program=program,
        after=after,
    )


def start_command(worker: bool, flags: dict[str, str | bool], resources: dict[str, Any]) -> str:
    """KubeRay's `ray start` (`generateRayStartCommand`): the flags in name order, CPUs, memory
    and accelerators from the container's resources unless given, every value one quoted word
    (KubeRay pastes them into the shell line as they are)."""
    limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
    flags = dict(flags)
    cpu = quantity(limits.get("cpu", 0)) or quantity(requests.get("cpu", 0))
    if "num-cpus" not in flags and cpu:
        flags["num-cpus"] = str(math.ceil(cpu))
    memory = quantity(limits.get("memory", 0))
    if "memory" not in flags and memory:
        flags["memory"] = str(math.ceil(memory))
    extra = json.loads(str(flags.get("resources", "{}")))
    custom = any(name in extra for name in ACCELERATORS.values())
    for key in sorted(limits):
        amount = quantity(limits[key])
        if "num-gpus" not in flags and amount and _gpu(key):
            flags["num-gpus"] = str(math.ceil(amount))
        if not custom and key in ACCELERATORS and amount:
            extra.setdefault(ACCELERATORS[key], amount)
            flags["resources"] = json.dumps(
                {k: int(v) if float(v).is_integer() else v for k, v in extra.items()},
                sort_keys=True,
                separators=(",", ":"),
            )
            custom = True
    words = ["ray", "start", *(["--head"] if not worker else [])]
    for flag in sorted(flags):
        value = flags[flag]
        if isinstance(value, bool):  # a switch: a bare flag, or nothing
            words += [f"--{flag}"] if value else []
        else:
            words.append(f"--{flag}={shlex.quote(value)}")
    return " ".join(words)


def _gpu(resource: str) -> bool:
    """KubeRay's `IsGPUResourceKey`: `nvidia.com/gpu`, any `*gpu`, or a MIG slice."""
    return resource.endswith("gpu") or bool(re.search(r"nvidia\.com/mig-\d+g\.\d+gb$", resource))


def _command(kept: Kept, ray_start: str) -> str | None:
    """A Ray container's command as KubeRay builds it (`BuildPod`): its own command and args
    (shell text, as KubeRay joins them), then `ulimit; ray start`; None when the container
    keeps its command (the `ray.io/overwrite-container-cmd` annotation, or it runs
    `ray start` itself). Run by bash, as KubeRay runs it."""
    main = kept.main
    own = "".join(f"{word} " for word in (*main.get("command", []), *main.get("args", [])))
    annotations = kept.template.get("metadata", {}).get("annotations", {})
    if str(annotations.get(OVERWRITE, "")).lower() == "true" or "ray start" in own:
        return None
    generated = f"{ULIMIT}; {ray_start}"
    text = f"{expanded(own)} && {generated}" if own else generated
    return f"exec /bin/bash -c {shlex.quote(text)}"


def _auth_env(secret: str | None) -> tuple[Env, ...]:
    """Token authentication (`authOptions.mode: token`): the mode, and the token from the
    user's Secret (`secretName`, key `auth_token`) or the experiment's generated one."""
    if secret is None:
        return ()
    token = (
        Env.secret("RAY_AUTH_TOKEN", "auth_token", secret)
        if secret
        else Env.secret("RAY_AUTH_TOKEN", "password")
    )
    return (Env("RAY_AUTH_MODE", "token"), token)


def start_flags(params: dict[str, str]) -> dict[str, str | bool]:
    """A group's `rayStartParams` as KubeRay's `convertParamMap` passes them: a value written
    `true`/`false` in any case is a switch (a bare flag, or nothing) unless the option takes a
    boolean value; any other value is what `ray start` receives from KubeRay's shell line,
    quotes removed (`'"{\\"TPU\\": 4}"'` is `{"TPU": 4}`), nothing expanded (the front door has
    refused values of several words)."""
    result: dict[str, str | bool] = {}
    for flag, value in params.items():
        if value.lower() in ("true", "false") and flag not in BOOLEAN_VALUES:
            result[flag] = value.lower() == "true"
        else:
            words = shlex.split(value)
            result[flag] = words[0] if words else ""
    return result
