"""What a framework decides, as plain data: replica groups, ports, env, waits and order.

No Pulumi or Kubernetes import here: `aichor_iac.k8s` turns a `Plan` into objects, so each
framework module is a small pure function from the manifest spec to a `Plan`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..manifest import ReplicaType

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
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class Group:
    """One replica type of the manifest, run as one Indexed Job.

    `waits_for`: an endpoint that must accept TCP before this group's replicas start (a replica
    never waits for itself). `follows`: the host of the entry point; once it has gone, this
    group's replicas stop and succeed, so nothing keeps holding GPUs after the experiment ends.
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
