"""What a framework decides, as plain data: replica groups, ports, env, waits and order.

No Pulumi or Kubernetes import here: `aichor_iac.k8s` turns a `Plan` into objects, so each
framework module is a small pure function from the manifest spec to a `Plan`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from ..experiment.groups import ReplicaType, Types

INDEX_VAR = "JOB_COMPLETION_INDEX"


@dataclass(frozen=True)
class Names:
    """How the experiment's objects and hosts are named (DESIGN §4).

    One headless Service named after the experiment (or the input's subdomain); one Indexed
    Job `<experiment>-<role>` per group, whose pod `i` gets the stable host
    `<experiment>-<role>-<i>.<service>.<namespace>.svc.<cluster domain>`.
    """

    experiment: str
    namespace: str
    cluster_domain: str = "cluster.local"
    subdomain: str | None = None  # the Service's name when the input names it (JobSet's)

    @property
    def service(self) -> str:
        return self.subdomain or self.experiment

    def job(self, role: str) -> str:
        return f"{self.experiment}-{role}"

    @property
    def secret(self) -> str:
        """The Secret generated for the experiment (cluster password, SSH key)."""
        return f"{self.experiment}-secret"

    @property
    def config(self) -> str:
        """The ConfigMap of files the replicas mount (e.g. MPI's hostfile)."""
        return f"{self.experiment}-config"

    def service_host(self, service: str) -> str:
        return f"{service}.{self.namespace}.svc.{self.cluster_domain}"

    def pod_host(self, role: str, index: int | str) -> str:
        """The host name of the group's replica `index` (its pod's `hostname`)."""
        return f"{self.job(role)}-{index}"

    def host(self, role: str, index: int | str) -> str:
        return self.service_host(f"{self.pod_host(role, index)}.{self.service}")


@dataclass(frozen=True)
class Env:
    """One environment variable: a literal (which may use Kubernetes' `$(VAR)` references to
    earlier entries), the replica's index plus an offset (computed in the container), a pod
    field (downward API), or a key of the experiment's generated Secret (by reference only).

    Replica 0 of a group may see it otherwise: `first` is its value there (exported by the
    command's prelude; `$VAR` is the pod's env), and with `only_first` no other replica keeps
    it (a Kubeflow operator's env that differs for rank 0, e.g. PaddleJob's `POD_IP_DUMMY`)."""

    name: str
    value: str = ""
    index_offset: int | None = None
    field_path: str | None = None
    secret_key: str | None = None
    first: str | None = None
    only_first: bool = False
    secret_name: str | None = None  # another Secret than the experiment's (the user's)

    @classmethod
    def index(cls, name: str, offset: int = 0) -> Env:
        return cls(name, index_offset=offset)

    @classmethod
    def literal(cls, name: str, text: str) -> Env:
        """A value Kubernetes passes as it is (`$` kept: no `$(VAR)` reference expands)."""
        return cls(name, text.replace("$", "$$"))

    @classmethod
    def field(cls, name: str, path: str, only_first: bool = False) -> Env:
        return cls(name, field_path=path, only_first=only_first)

    @classmethod
    def secret(cls, name: str, key: str, secret: str | None = None) -> Env:
        return cls(name, secret_key=key, secret_name=secret)


@dataclass(frozen=True)
class Endpoint:
    """A host, and the port that must accept connections (None: the host must resolve).

    With `replicas` N, `host` is a pattern holding `$i` and stands for the N hosts of a group
    (`Names.host(role, "$i")`), so waiting for 1,000 workers stays a short loop."""

    host: str
    port: int | None = None
    replicas: int = 0

    def __str__(self) -> str:
        host = (
            self.host.replace("$i", f"{{0..{self.replicas - 1}}}") if self.replicas else self.host
        )
        return host if self.port is None else f"{host}:{self.port}"


@dataclass(frozen=True)
class File:
    """A key of the experiment's generated Secret or ConfigMap, as a file of a mount."""

    source: Literal["secret", "config"]
    key: str
    path: str
    mode: int | None = None  # the mount's mode otherwise


@dataclass(frozen=True)
class Mount:
    """Files projected read-only into a directory of the replica, with one file mode."""

    name: str
    path: str
    files: tuple[File, ...]
    mode: int = 0o644
    secret_name: str | None = None  # another Secret than the experiment's (its sweep's)


@dataclass(frozen=True)
class Group:
    """One replica type of the manifest, run as one Indexed Job.

    `waits_for`: endpoints that must accept TCP before this group's replicas start (a replica
    never waits for itself). `follows`: the host of the entry point; once it has gone, the
    replicas stop and succeed, so nothing keeps holding GPUs after the experiment ends. When the
    entry point is created before this group (`leader_first`), replicas start once it resolves;
    otherwise they start at once and only a host they have seen can be gone.
    `program`: what the replicas run instead of the manifest command (`ray start`, sshd).
    `ready_port`: a replica is Ready once it accepts connections there, and the Jobs created
    after this group wait until all its replicas are Ready (`pulumi.com/waitFor`); `gate`
    makes them wait so without a port (Ready as the pod's own probes say), or (`complete`)
    until the Job has completed.
    """

    role: str
    replica_type: str
    spec: ReplicaType
    env: tuple[Env, ...] = ()
    ports: tuple[tuple[str, int], ...] = ()
    waits_for: tuple[Endpoint, ...] = ()
    follows: str | None = None
    leader_first: bool = True
    after: tuple[str, ...] = ()  # roles whose Jobs are created before this one
    program: str | None = None
    ready_port: int | None = None
    # The Jobs created after this one wait until its pods are all Ready, or until it completes
    gate: Literal["", "ready", "complete"] = ""
    dns_searches: tuple[str, ...] = ()  # domains short host names are looked up in
    capabilities: tuple[str, ...] = ()  # added to the container's (all others are dropped)
    mounts: tuple[Mount, ...] = ()
    completions: int | None = None  # pods of the Job (default: the type's count)
    parallelism: int | None = None  # pods running at once (default: all)
    colocate: str | None = None  # a topology key the Job's pods must share (a TPU slice's)
    # JobSet's exclusive placement: the topology key whose domains the Jobs keep to themselves,
    # and whether by its node-selector strategy (nodes labelled with each Job beforehand)
    exclusive: str | None = None
    exclusive_nodes: bool = False
    labels: tuple[tuple[str, str], ...] = ()  # the operator's labels on a kept template's pods
    annotations: tuple[tuple[str, str], ...] = ()  # and its annotations
    labels_on_job: bool = False  # the Job carries them too (a JobSet's controller's)

    @property
    def count(self) -> int:
        return self.spec.count if self.completions is None else self.completions

    @property
    def at_once(self) -> int:
        """How many of the Job's pods exist at once: the Job controller keeps `parallelism`
        of them at a time (Kueue's and JobSet's pod count of a Job: min(parallelism,
        completions))."""
        return min(self.parallelism or self.count, self.count)

    @property
    def waits(self) -> tuple[Endpoint, ...]:
        """What a replica waits for before its command: `waits_for`, and, for a follower whose
        entry point is created first, the entry point's host (so that its disappearance can be
        told apart from its not existing yet)."""
        if (
            self.follows
            and self.leader_first
            and all(t.host != self.follows for t in self.waits_for)
        ):
            return (*self.waits_for, Endpoint(self.follows))
        return self.waits_for

    @property
    def gates(self) -> bool:
        """Whether the Jobs created after this group's wait until all its pods are Ready."""
        return bool(self.gate) or self.ready_port is not None

    @property
    def computed(self) -> list[str]:
        """The variables a replica's command computes from its index (Kubernetes cannot add to
        a number or set a value for replica 0 only)."""
        return [e.name for e in self.env if e.index_offset or e.first is not None or e.only_first]

    @property
    def sees_entry_first(self) -> bool:
        """Whether the entry point has resolved before a replica's command starts: it was
        created first, or the replica waited for it. Only then may a follower count
        it gone without having seen it itself (an entry point that ended between the wait's
        check and the follower's first look would otherwise be waited for
        forever)."""
        return self.leader_first or any(t.host == self.follows for t in self.waits_for)


@dataclass(frozen=True)
class Plan:
    framework: str
    groups: tuple[Group, ...]
    entry_point: str  # role of the group whose end is the experiment's end
    addresses: dict[str, str] = field(default_factory=dict)  # role -> host:port
    secret: Literal["password", "ssh"] | None = None  # what `Names.secret` holds, if created
    files: dict[str, str] = field(default_factory=dict)  # the `Names.config` ConfigMap's data
    outputs: dict[str, Any] = field(default_factory=dict)  # framework-specific stack outputs
    services: dict[str, str] = field(default_factory=dict)  # Service name -> role it selects
    # Roles whose Jobs must all complete for the experiment to succeed (default: the entry point)
    completes: tuple[str, ...] = ()
    # Pods that run and end on their own (jobset, batchjob): "all running" is no stable state
    independent: bool = False
    # A cluster that runs until destroyed (a RayCluster): nothing completes
    endless: bool = False
    # Roles whose members leave and rejoin while the others train on (torchrun's elastic
    # agents): a member's failure restarts its container in place, not the experiment's end
    rejoining: tuple[str, ...] = ()
    # Why some replicas run as root, which the stack's aichor:runAsNonRoot or runAsUser refuses
    runs_as_root: str = ""
    # Where `debug.jupyter` puts its server (default: beside the entry point)
    jupyter_role: str = ""

    def __post_init__(self) -> None:
        earlier: set[str] = set()
        for group in self.groups:
            if not set(group.after) <= earlier:
                raise ValueError(f"{self.framework}: {group.role} is after a later group")
            earlier.add(group.role)
        if not self.completes and not self.endless:
            object.__setattr__(self, "completes", (self.entry_point,))

    @property
    def pods(self) -> int:
        """Every pod the experiment runs, over its whole life."""
        return sum(g.count for g in self.groups)

    @property
    def at_once(self) -> int:
        """The most pods of the experiment that exist at once."""
        return sum(g.at_once for g in self.groups)

    def totals(self) -> dict[str, object]:
        """What the experiment asks of the cluster: pods, GPUs by product, CPUs, memory."""
        gpus: dict[str, int] = {}
        for group in self.groups:
            gpu = group.spec.resources.accelerators.gpu
            if gpu and gpu.count and group.count:
                key = gpu.product or gpu.resource_name
                gpus[key] = gpus.get(key, 0) + gpu.count * group.count
        return {
            "pods": self.pods,
            "gpus": dict(sorted(gpus.items())),
            "cpus": sum(g.spec.resources.cpus * g.count for g in self.groups),
            "memoryGiB": sum(g.spec.resources.memory_gib * g.count for g in self.groups),
        }

    @property
    def ports(self) -> tuple[tuple[str, int], ...]:
        """Every named port, once, for the headless Service."""
        seen: dict[str, int] = {}
        for group in self.groups:
            seen.update(group.ports)
        return tuple(sorted(seen.items(), key=lambda item: item[1]))


# A multi-host TPU slice is one GKE node pool: its hosts' pods are kept together there.
TPU_SLICE_TOPOLOGY = "cloud.google.com/gke-nodepool"


@dataclass(frozen=True)
class TpuSlice:
    """Slice `index` of `slices` of a multi-host TPU group; `first` is slice 0's role."""

    index: int
    slices: int
    first: str


@dataclass(frozen=True)
class Slot:
    """A replica group placed in a global rank order: its `count` replicas have ranks
    `offset` … `offset + count - 1`. A multi-host TPU group is one slot per slice."""

    role: str
    replica_type: str
    spec: ReplicaType
    offset: int
    count: int
    tpu: TpuSlice | None = None


def slots_of(role: str, replica_type: str, spec: ReplicaType, offset: int = 0) -> list[Slot]:
    """A group as slots: itself, or, for a multi-host TPU topology, one slot `<role>-<s>` per
    slice (`count` is then the number of slices), of as many replicas as a slice has hosts."""
    tpu = spec.resources.accelerators.tpu
    if tpu is None or tpu.hosts == 1:
        return [Slot(role, replica_type, spec, offset, spec.count)]
    return [
        Slot(
            f"{role}-{s}",
            replica_type,
            spec,
            offset + s * tpu.hosts,
            tpu.hosts,
            TpuSlice(s, spec.count, f"{role}-0"),
        )
        for s in range(spec.count)
    ]


def ranked(types: Types, order: tuple[str, ...]) -> list[Slot]:
    """The manifest's groups of `order` that have replicas, with their rank offsets."""
    slots: list[Slot] = []
    for name in order:
        group = types.get(name)
        if group is not None and group.count > 0:
            slots += slots_of(name.lower(), name, group, world_size(slots))
    return slots


def world_size(slots: list[Slot]) -> int:
    return sum(slot.count for slot in slots)


def tpu_env(names: Names, slot: Slot) -> tuple[Env, ...]:
    """What GKE's TPU webhook gives each host of a multi-host slice (worker id in the slice,
    the slice's hosts, its name) and, across slices, the multislice (Megascale) variables."""
    if slot.tpu is None:
        return ()
    hosts = ",".join(names.host(slot.role, w) for w in range(slot.count))
    env: tuple[Env, ...] = (
        Env.index("TPU_WORKER_ID"),
        Env("TPU_WORKER_HOSTNAMES", hosts),
        Env("TPU_NAME", slot.role),
    )
    if slot.tpu.slices > 1:
        env += (
            Env("MEGASCALE_COORDINATOR_ADDRESS", names.host(slot.tpu.first, 0)),
            Env("MEGASCALE_NUM_SLICES", str(slot.tpu.slices)),
            Env("MEGASCALE_SLICE_ID", str(slot.tpu.index)),
        )
    return env


def slot_group(slot: Slot, **fields: Any) -> Group:
    """The Job of a slot: its replicas, kept on one node pool when it is a TPU slice."""
    return Group(
        role=slot.role,
        replica_type=slot.replica_type,
        spec=slot.spec,
        completions=slot.count,
        colocate=TPU_SLICE_TOPOLOGY if slot.tpu else None,
        **fields,
    )


def coordinated(
    framework: str,
    slots: list[Slot],
    coordinator: Endpoint,
    env: Callable[[Slot], tuple[Env, ...]],
    address_key: str | None = None,
    port_name: str | None = None,
) -> Plan:
    """A plan around rank 0 (the entry point), its port named `port_name` (default: after the
    framework): every other replica waits until rank 0 accepts connections and stops once
    rank 0 has ended. Rank 0 itself does neither."""
    leader = slots[0].role
    groups = []
    for slot in slots:
        rank_zero_only = slot.offset == 0 and slot.count == 1
        groups.append(
            slot_group(
                slot,
                env=env(slot),
                ports=((port_name or framework, coordinator.port),) if coordinator.port else (),
                waits_for=() if rank_zero_only else (coordinator,),
                follows=None if rank_zero_only else coordinator.host,
                after=() if slot.role == leader else (leader,),
            )
        )
    return Plan(
        framework=framework,
        groups=tuple(groups),
        entry_point=leader,
        addresses={address_key or leader: str(coordinator)},
    )


def master_env(coordinator: Endpoint, slots: list[Slot], slot: Slot) -> tuple[Env, ...]:
    """Kubeflow's rank-0 rendezvous variables (PyTorchJob and XGBoostJob alike)."""
    return (
        Env("MASTER_ADDR", coordinator.host),
        Env("MASTER_PORT", str(coordinator.port)),
        Env("WORLD_SIZE", str(world_size(slots))),
        Env.index("RANK", slot.offset),
    )


SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def expanded(text: str) -> str:
    """Shell text from a container's command, as the shell sees it once Kubernetes has
    expanded it: `$(VAR)` is the variable's value if the container has it (the shell's
    `${VAR-$(VAR)}`, which otherwise runs `$(VAR)` as the shell would have), `$$` one `$`.
    Values are substituted by the shell, never re-read as shell text."""
    out, i = [], 0
    while i < len(text):
        rest = text[i + 1 :]
        if text[i] == "$" and rest.startswith("$"):
            out.append("$")
            i += 2
        elif text[i] == "$" and rest.startswith("(") and ")" in rest:
            name = rest[1 : rest.index(")")]
            out.append(f"${{{name}-$({name})}}" if SHELL_NAME.match(name) else f"$({name})")
            i += len(name) + 3
        else:
            out.append(text[i])
            i += 1
    return "".join(out)
