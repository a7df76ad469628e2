"""The groups of an experiment and what each replica of a group asks for: resources (CPU,
memory, /dev/shm, accelerators, RDMA, node placement) and, per framework, which groups it has
and how many replicas each may have (`RULES`). Part of the neutral model every front door fills.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from types import GenericAlias
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator
from pydantic.alias_generators import to_camel

from ..rules.limits import MAX_INDEXED, LabelKey, LabelValue, dns_label

# Canonical names of the fixed replica types, looked up case-insensitively (`worker` is
# `Worker`). jobset's types have free lowercase names instead (JOBSET_TYPE).
TYPE_NAMES = ("Master", "Worker", "Chief", "PS", "Evaluator", "Head", "Job", "Workers", "Launcher")
CANONICAL_TYPE = {name.lower(): name for name in TYPE_NAMES}
JOBSET_TYPE = re.compile(r"[a-z][a-z0-9-]*\Z")

# Ray groups' Job names, which pool names must not take.
RAY_ROLES = ("head", "job", "submitter")
MIG_PROFILE = re.compile(r"^mig-\d+g\.\d+gb\Z")
# The name part of an extended resource (`<prefix>/<name>`): a Kubernetes qualified name.
RESOURCE_NAME = r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"


class Model(BaseModel):
    """Base: camelCase keys as in AIchor manifests, unknown keys rejected."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        allow_inf_nan=False,  # .inf and .nan are YAML floats no quantity can be
        defer_build=True,
    )


# Bounds no node exceeds (beside the API server's, from `limits`), so no number can overflow
# what is derived from it.
MAX_GIB = 1_048_576  # 1 PiB of memory or /dev/shm per replica
MAX_DEVICES = 1024  # GPUs or TPU chips per replica
MAX_JOBS = 1000  # Jobs of one jobset experiment (each is a resource of the stack)


class Gpu(Model):
    count: int = Field(ge=0, le=MAX_DEVICES, description="GPUs per replica.")
    type: str = Field("gpu", description="`gpu` for whole GPUs or a MIG profile (`mig-1g.10gb`).")
    product: LabelValue | None = Field(
        None, description="GPU product (node label value), e.g. `Quadro-RTX-4000`."
    )

    @field_validator("type")
    @classmethod
    def _gpu_type(cls, value: str) -> str:
        if value != "gpu" and not MIG_PROFILE.match(value):
            raise ValueError(f"'{value}' is neither 'gpu' nor a MIG profile such as 'mig-1g.10gb'")
        return value

    @property
    def resource_name(self) -> str:
        """The extended resource the NVIDIA device plugin advertises for this type."""
        return "nvidia.com/gpu" if self.type == "gpu" else f"nvidia.com/{self.type}"


# What GKE's TPU nodes advertise and are labelled with (accelerator, topology).
TPU_RESOURCE = "google.com/tpu"
TPU_SELECTORS = ("cloud.google.com/gke-tpu-accelerator", "cloud.google.com/gke-tpu-topology")


class Tpu(Model):
    type: str = Field(description="TPU accelerator (GKE `cloud.google.com/gke-tpu-accelerator`).")
    topology: str = Field(
        pattern=r"^[1-9][0-9]*(x[1-9][0-9]*){1,2}$", description="TPU topology, e.g. `2x2`, `4x4`."
    )
    tpu_chips_count: int = Field(ge=1, le=MAX_DEVICES, description="TPU chips per host (VM).")

    @model_validator(mode="after")
    def _divides(self) -> Tpu:
        if self.chips % self.tpu_chips_count:
            raise ValueError(
                f"topology {self.topology} has {self.chips} chips, which {self.tpu_chips_count} "
                "chips per host do not divide: give the chips each host of this slice has"
            )
        return self

    @property
    def chips(self) -> int:
        return math.prod(int(n) for n in self.topology.split("x"))

    @property
    def hosts(self) -> int:
        """Hosts (VMs, one pod each) of one slice."""
        return self.chips // self.tpu_chips_count


class Accelerators(Model):
    gpu: Gpu | None = None
    tpu: Tpu | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Accelerators:
        if self.gpu and self.tpu and self.gpu.count and self.tpu.tpu_chips_count:
            raise ValueError("give gpu or tpu, not both")
        return self


class Toleration(Model):
    """A Kubernetes toleration, held to the API server's rules for one."""

    key: LabelKey | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: LabelValue | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = Field(None, ge=-(2**63), le=2**63 - 1)

    @model_validator(mode="after")
    def _consistent(self) -> Toleration:
        if not self.key and self.operator != "Exists":
            raise ValueError("a toleration without a key needs operator: Exists")
        if self.operator == "Exists" and self.value:
            raise ValueError("a toleration with operator: Exists has no value")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError("tolerationSeconds needs effect: NoExecute")
        return self


class Rdma(Model):
    """SR-IOV NICs for GPU-to-GPU traffic: one virtual function of each device."""

    devices: list[Annotated[str, Field(pattern=RESOURCE_NAME)]] = Field(
        min_length=1,
        description="Device (SR-IOV resource) names, e.g. sriov_a; each is requested once and "
        "its network attached.",
    )

    @field_validator("devices")
    @classmethod
    def _once(cls, value: list[str]) -> list[str]:
        twice = sorted({d for d in value if value.count(d) > 1})
        if twice:
            raise ValueError(f"{', '.join(twice)} given twice")
        return value


class Resources(Model):
    # At least 1m: Kubernetes counts CPU in thousandths, a smaller request would round to 0.
    cpus: float = Field(1, ge=0.001, le=MAX_INDEXED, description="CPU request per replica.")
    ram_ratio: float | None = Field(None, gt=0, le=MAX_GIB, description="Memory GiB per CPU.")
    memory: float | None = Field(None, gt=0, le=MAX_GIB, description="Memory GiB per replica.")
    cpu_limit_ratio: float = Field(
        2, ge=1, le=1000, description="CPU limit = cpus × cpuLimitRatio."
    )
    shm_size_gb: float = Field(
        0,
        ge=0,
        le=MAX_GIB,
        alias="shmSizeGB",
        description="Size of a memory-backed /dev/shm (GiB).",
    )
    accelerators: Accelerators = Accelerators.model_construct()
    rdma: Rdma | None = None
    extra_selectors: dict[LabelKey, LabelValue] = Field(
        default_factory=dict, description="Node selectors (node label keys and values)."
    )
    extra_tolerations: list[Toleration] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_memory(self) -> Resources:
        if (self.ram_ratio is None) == (self.memory is None):
            raise ValueError("give exactly one of ramRatio or memory")
        return self

    @property
    def memory_gib(self) -> float:
        return self.memory if self.memory is not None else self.cpus * (self.ram_ratio or 0)

    @property
    def gpus(self) -> int:
        return self.accelerators.gpu.count if self.accelerators.gpu else 0


class ReplicaType(Model):
    count: int = Field(1, ge=0, le=MAX_INDEXED, description="Number of replicas.")
    resources: Resources


class RayGroup(ReplicaType):
    """Ray's Head and Job: `ray start` flags beside the resources."""

    ray_start_params: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="Extra `ray start` flags."
    )


class RayPool(RayGroup):
    name: str = Field(description="Pool name (a DNS label); also the pool's Ray custom resource.")
    count: int = Field(0, ge=0)

    @field_validator("name")
    @classmethod
    def _dns_label(cls, value: str) -> str:
        return dns_label(value, 40)


class JobSetType(ReplicaType):
    """A jobset type: `count` Jobs of `completions` pods each, `parallelisms` at once per Job."""

    # Each Job is a resource of the stack: past a thousand, `pulumi up` plans and tracks
    # thousands of resources; wide work is `completions` (pods of one Job), not more Jobs.
    count: int = Field(1, ge=0, le=MAX_JOBS, description="Jobs of this type.")
    completions: int = Field(1, ge=1, le=MAX_INDEXED, description="Pods per Job.")
    parallelisms: int = Field(
        1, ge=1, le=MAX_INDEXED, description="Pods of one Job running at once."
    )


Group = ReplicaType | list[RayPool]


class Types(Model):
    """A manifest's replica types. Each operator has its own model (`types_model`), built from
    its rules (`RULES`); keys are matched case-insensitively (`worker` is `Worker`)."""

    model_config = ConfigDict(alias_generator=None)

    @model_validator(mode="before")
    @classmethod
    def _canonical_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {CANONICAL_TYPE.get(str(k).lower(), k): v for k, v in data.items()}
        return data

    def present(self) -> dict[str, Group]:
        """The types the manifest gives, in the operator's order (jobset: the manifest's)."""
        fields = {n: getattr(self, n) for n in type(self).model_fields}
        return {n: g for n, g in {**fields, **(self.model_extra or {})}.items() if g is not None}

    def get(self, name: str) -> Any:
        return self.present().get(name)


class JobSetTypes(Types):
    """jobset's types: free names, each a `JobSetType`."""

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, JobSetType]

    @model_validator(mode="before")
    @classmethod
    def _canonical_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            bad = [str(k) for k in data if not JOBSET_TYPE.match(str(k)) or len(str(k)) > 40]
            if bad:
                raise ValueError(
                    f"jobset type names are lowercase letters, digits and '-', starting with a "
                    f"letter, at most 40 characters: rename {', '.join(map(repr, bad))}"
                )
        return data


@dataclass(frozen=True)
class TypeRule:
    """One replica type an operator accepts."""

    model: type[ReplicaType] = ReplicaType
    count: tuple[int, int | None] = (0, None)  # the counts allowed, bounds included
    required: bool = False
    pools: bool = False  # a list of named pools (Ray's `Workers`)


@dataclass(frozen=True)
class OperatorRule:
    """What an operator's `types` hold: its types by canonical name, in rank order, and which
    types must have a pod between them (`needs`: types, error path, sentence; no types: all)."""

    types: dict[str, TypeRule]
    needs: tuple[tuple[str, ...], str, str] | None = None
    model: type[Types] | None = None  # a model of its own (jobset's free names)


_SINGLE = TypeRule(count=(1, 1))
_MASTER_WORKER = OperatorRule(
    {"Master": _SINGLE, "Worker": TypeRule()},
    (
        ("Master", "Worker"),
        "spec.types",
        "give Master (count 1) and Worker, or a Worker with count ≥ 1",
    ),
)
_HEAD = TypeRule(RayGroup, (1, 1), required=True)
# Each framework's groups and counts, by operator: the one list of the frameworks (their order
# is the manifest's schema's and the error messages')
RULES: dict[str, OperatorRule] = {
    "ray": OperatorRule(
        {
            "Head": _HEAD,
            "Workers": TypeRule(RayPool, required=True, pools=True),
            "Job": TypeRule(RayGroup, (1, 1), required=True),
        }
    ),
    # A kuberay cluster may be the head alone (no pool, or pools of count 0).
    "kuberay": OperatorRule({"Head": _HEAD, "Workers": TypeRule(RayPool, pools=True)}),
    "tf": OperatorRule(
        {
            "Chief": TypeRule(count=(0, 1)),
            "PS": TypeRule(),
            "Worker": TypeRule(),
            "Evaluator": TypeRule(count=(0, 1)),
        },
        (("Chief", "Worker"), "spec.types", "TF needs a Chief or at least one Worker"),
    ),
    "pytorch": _MASTER_WORKER,
    "xgboost": _MASTER_WORKER,
    "jax": OperatorRule(
        {"Worker": TypeRule()},
        (("Worker",), "spec.types.Worker.count", "JAX needs at least one Worker"),
    ),
    # PaddleJob: Workers alone (collective), or Master parameter servers and Worker trainers.
    "paddle": OperatorRule(
        {"Master": TypeRule(), "Worker": TypeRule()},
        (("Worker",), "spec.types.Worker.count", "PaddlePaddle needs at least one Worker"),
    ),
    "mpi": OperatorRule(
        {"Launcher": TypeRule(count=(1, 1), required=True), "Worker": TypeRule()},
        (("Worker",), "spec.types.Worker.count", "MPI needs at least one Worker"),
    ),
    "jobset": OperatorRule(
        {}, ((), "spec.types", "give at least one type with count ≥ 1"), JobSetTypes
    ),
    "batchjob": OperatorRule(
        {"Worker": TypeRule()},
        (("Worker",), "spec.types.Worker.count", "batchjob needs at least one Worker"),
    ),
}
OPERATORS = tuple(RULES)
Operator = Literal[OPERATORS]  # type: ignore[valid-type]  # (the same names, as a type)


@functools.cache
def types_model(operator: str) -> type[Types]:
    """The model of an operator's `types`, from its rules."""
    rule = RULES[operator]
    if rule.model is not None:
        return rule.model
    fields: dict[str, Any] = {
        name: (GenericAlias(list, t.model) if t.pools else t.model) | None
        for name, t in rule.types.items()
    }
    return create_model(  # type: ignore[call-overload]
        f"{operator.capitalize()}Types",
        __base__=Types,
        **{name: (annotation, None) for name, annotation in fields.items()},
    )
