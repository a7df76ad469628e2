"""What a framework decides, as plain data: replica groups, ports, env, waits and order.

No Pulumi or Kubernetes import here: `aichor_iac.k8s` turns a `Plan` into objects, so each
framework module is a small pure function from the manifest spec to a `Plan`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..manifest import ReplicaType, Types

INDEX_VAR = "JOB_COMPLETION_INDEX"


@dataclass(frozen=True)
class Names:
    """How the experiment's objects and hosts are named (DESIGN §4).

    One headless Service named after the experiment; one Indexed Job `<experiment>-<role>` per
    group, whose pod `i` gets the stable host
    `<experiment>-<role>-<i>.<experiment>.<namespace>.svc.<cluster domain>`.
    """

    experiment: str
    namespace: str
    cluster_domain: str = "cluster.local"

    @property
    def service(self) -> str:
        return self.experiment

    def job(self, role: str) -> str:
        return f"{self.experiment}-{role}"

    def host(self, role: str, index: int) -> str:
        return f"{self.job(role)}-{index}.{self.service}.{self.namespace}.svc.{self.cluster_domain}"


@dataclass(frozen=True)
class Env:
    """One environment variable: a literal (which may use Kubernetes' `$(VAR)` references to
    earlier entries), or the replica's index plus an offset (computed in the container)."""

    name: str
    value: str = ""
    index_offset: int | None = None

    @classmethod
    def index(cls, name: str, offset: int = 0) -> Env:
        return cls(name, index_offset=offset)


@dataclass(frozen=True)
class Endpoint:
    """A host, and the port that must accept connections (None: the host must resolve)."""

    host: str
    port: int | None = None

    def __str__(self) -> str:
        return self.host if self.port is None else f"{self.host}:{self.port}"


@dataclass(frozen=True)
class Group:
    """One replica type of the manifest, run as one Indexed Job.

    `waits_for`: an endpoint that must accept TCP before this group's replicas start (a replica
    never waits for itself). `follows`: the host of the entry point; replicas start once it
    resolves and, once it has gone, stop and succeed, so nothing keeps holding GPUs after the
    experiment ends.
    """

    role: str
    replica_type: str
    spec: ReplicaType
    env: tuple[Env, ...] = ()
    ports: tuple[tuple[str, int], ...] = ()
    waits_for: Endpoint | None = None
    follows: str | None = None
    after: tuple[str, ...] = ()  # roles whose Jobs are created before this one

    @property
    def count(self) -> int:
        return self.spec.count


@dataclass(frozen=True)
class Plan:
    framework: str
    groups: tuple[Group, ...]
    entry_point: str  # role of the group whose end is the experiment's end
    addresses: dict[str, str] = field(default_factory=dict)  # role -> host:port

    def __post_init__(self) -> None:
        earlier: set[str] = set()
        for group in self.groups:
            if not set(group.after) <= earlier:
                raise ValueError(f"{self.framework}: {group.role} is after a later group")
            earlier.add(group.role)

    @property
    def pods(self) -> int:
        return sum(g.count for g in self.groups)

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


@dataclass(frozen=True)
class Slot:
    """A replica group placed in a global rank order: its replica i has rank `offset + i`."""

    role: str
    replica_type: str
    spec: ReplicaType
    offset: int


def ranked(types: Types, order: tuple[str, ...]) -> list[Slot]:
    """The manifest's groups of `order` that have replicas, with their rank offsets."""
    slots, offset = [], 0
    for name in order:
        group = getattr(types, name)
        if group is not None and group.count > 0:
            slots.append(Slot(name.lower(), name, group, offset))
            offset += group.count
    return slots


def world_size(slots: list[Slot]) -> int:
    return sum(slot.spec.count for slot in slots)


def coordinated(
    framework: str,
    slots: list[Slot],
    coordinator: Endpoint,
    env: Callable[[Slot], tuple[Env, ...]],
    address_key: str | None = None,
) -> Plan:
    """A plan around rank 0 (the entry point), port named after the framework: every other
    replica waits until rank 0 accepts connections and stops once rank 0 has ended. Rank 0
    itself does neither."""
    leader = slots[0].role
    groups = []
    for slot in slots:
        rank_zero_only = slot.offset == 0 and slot.spec.count == 1
        groups.append(
            Group(
                role=slot.role,
                replica_type=slot.replica_type,
                spec=slot.spec,
                env=env(slot),
                ports=((framework, coordinator.port),) if coordinator.port else (),
                waits_for=None if rank_zero_only else coordinator,
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
