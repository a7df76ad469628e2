"""The AIchor experiment manifest (`kind: AIchorManifest`, apiVersion 0.2.1–0.2.3).

Loading turns YAML into validated pydantic models or raises `ManifestError` holding every
problem found, each with the manifest path, a sentence and (when the YAML gives it) a line.
"""

from __future__ import annotations

import difflib
import functools
import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from .experiment import Origin
from .limits import DNS_1035, INT32, MAX_INDEXED, Image, LabelKey, LabelValue

OPERATORS = (
    "ray",
    "kuberay",
    "tf",
    "pytorch",
    "xgboost",
    "jax",
    "paddle",
    "mpi",
    "jobset",
    "batchjob",
)
Operator = Literal[
    "ray", "kuberay", "tf", "pytorch", "xgboost", "jax", "paddle", "mpi", "jobset", "batchjob"
]
# Operators of AIchor manifests that target another platform than Kubernetes: one clear refusal.
OTHER_PLATFORMS = {
    "vertexai": "Google Cloud's Vertex AI custom jobs (workerPoolSpecs)",
    "slurm": "a Slurm cluster (sbatch jobs)",
}

# Canonical names of the fixed replica types, looked up case-insensitively (`worker` is
# `Worker`). jobset's types have free lowercase names instead (JOBSET_TYPE).
TYPE_NAMES = ("Master", "Worker", "Chief", "PS", "Evaluator", "Head", "Job", "Workers", "Launcher")
_CANONICAL_TYPE = {name.lower(): name for name in TYPE_NAMES}
JOBSET_TYPE = re.compile(r"[a-z][a-z0-9-]*\Z")

# Ray groups' Job names, which pool names must not take.
RAY_ROLES = ("head", "job", "submitter")
RAY_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.\d+)?\Z")
# `ray start` flags that wire the cluster together (address, ports, auth, lifetime).
RAY_MANAGED_FLAGS = frozenset(
    {
        "head",
        "address",
        "block",
        "port",
        "node-ip-address",
        "redis-password",
        "dashboard-port",
        "dashboard-host",
        "ray-client-server-port",
    }
)
MIG_PROFILE = re.compile(r"^mig-\d+g\.\d+gb\Z")
# The name part of an extended resource (`<prefix>/<name>`): a Kubernetes qualified name.
RESOURCE_NAME = r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"


DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?\Z")
DURATION_UNITS = (86400, 3600, 60, 1)


def dns_label(value: str, limit: int = 63) -> str:
    """`value`, if it is a DNS label of at most `limit` characters (a name that ends up in
    host names); else the ValueError that says what one is."""
    if not DNS_1035.match(value) or len(value) > limit:
        raise ValueError(
            f"{value!r} must be a DNS label: lowercase letters, digits and '-', starting with a "
            f"letter, at most {limit} characters"
        )
    return value


class Model(BaseModel):
    """Base: camelCase keys as in AIchor manifests, unknown keys rejected."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        allow_inf_nan=False,  # .inf and .nan are YAML floats no quantity can be
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
    accelerators: Accelerators = Accelerators()
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
            return {_CANONICAL_TYPE.get(str(k).lower(), k): v for k, v in data.items()}
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
RULES: dict[str, OperatorRule] = {
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
    "tf": OperatorRule(
        {
            "Chief": TypeRule(count=(0, 1)),
            "PS": TypeRule(),
            "Worker": TypeRule(),
            "Evaluator": TypeRule(count=(0, 1)),
        },
        (("Chief", "Worker"), "spec.types", "TF needs a Chief or at least one Worker"),
    ),
    "ray": OperatorRule(
        {
            "Head": _HEAD,
            "Workers": TypeRule(RayPool, required=True, pools=True),
            "Job": TypeRule(RayGroup, (1, 1), required=True),
        }
    ),
    # A kuberay cluster may be the head alone (no pool, or pools of count 0).
    "kuberay": OperatorRule({"Head": _HEAD, "Workers": TypeRule(RayPool, pools=True)}),
    "mpi": OperatorRule(
        {"Launcher": TypeRule(count=(1, 1), required=True), "Worker": TypeRule()},
        (("Worker",), "spec.types.Worker.count", "MPI needs at least one Worker"),
    ),
    "batchjob": OperatorRule(
        {"Worker": TypeRule()},
        (("Worker",), "spec.types.Worker.count", "batchjob needs at least one Worker"),
    ),
    "jobset": OperatorRule(
        {}, ((), "spec.types", "give at least one type with count ≥ 1"), JobSetTypes
    ),
}


@functools.cache
def types_model(operator: str) -> type[Types]:
    """The model of an operator's `types`, from its rules."""
    rule = RULES[operator]
    if rule.model is not None:
        return rule.model
    fields: dict[str, Any] = {
        name: (list[t.model] if t.pools else t.model) | None for name, t in rule.types.items()
    }
    return create_model(  # type: ignore[call-overload,no-any-return]
        f"{operator.capitalize()}Types",
        __base__=Types,
        **{name: (annotation, None) for name, annotation in fields.items()},
    )


class SharedVolume(Model):
    mount_point: str = "/mnt/shared"
    size_gb: int = Field(ge=1, alias="sizeGB")
    storage_class: str | None = None
    access_mode: Literal["ReadWriteOnce", "ReadWriteMany", "ReadWriteOncePod"] = "ReadWriteMany"


class ExistingPvc(Model):
    name: str
    mount_point: str


class Storage(Model):
    shared_volume: SharedVolume | None = None
    attach_existing_pvcs: list[ExistingPvc] = Field(
        default_factory=list, alias="attachExistingPVCs"
    )


class Tensorboard(Model):
    enabled: bool = False


class RestartPolicy(Model):
    backoff_limit: int = Field(
        0, ge=0, le=INT32, description="Pod failures tolerated per replica group."
    )


class SecurityContext(Model):
    ptrace: bool = False


class SecretKeyRef(Model):
    name: str = Field(description="An existing Secret in the experiment's namespace.")
    key: str = Field(description="The key inside that Secret.")


class EnvVar(Model):
    """`spec.env` entry: a plain value or (extension) a reference to an existing Secret's key."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    value: str | None = None
    secret_key_ref: SecretKeyRef | None = None

    @model_validator(mode="after")
    def _one_source(self) -> EnvVar:
        if (self.value is None) == (self.secret_key_ref is None):
            raise ValueError("give exactly one of value or secretKeyRef")
        return self


class VsCode(Model):
    enabled: bool = False
    path: str | None = Field(None, description="AIchor: where the code is checked out.")
    provider: str | None = Field(None, description="AIchor: the code's host, e.g. github.")


class Debug(Model):
    """AIchor's interactive debugging options."""

    jupyter: bool = Field(False, description="A Jupyter server beside the entry point.")
    vscode: VsCode = VsCode()


class Spec(Model):
    operator: Operator
    image: Image = Field(description="Container image.")
    command: str = Field(min_length=1, description="One shell command line.")
    types: Types = Field(description="Replica types; which ones depends on the operator.")
    tensorboard: Tensorboard = Tensorboard()
    timeout: str | None = Field(None, description='Deadline such as "4m", "6h", "1d".')
    active_deadline_seconds: int | None = Field(
        None,
        ge=1,
        le=INT32,
        description="Deadline in seconds (older form of timeout, which wins).",
    )
    restart_policy: RestartPolicy = RestartPolicy()
    ray_version: str | None = None
    storage: Storage = Storage()
    security_context: SecurityContext = SecurityContext()
    slots_per_worker: int | None = Field(None, ge=1, description="mpi: MPI slots per worker.")
    mpi_implementation: Literal["OpenMPI", "Intel", "MPICH"] = "OpenMPI"
    env: list[EnvVar] = Field(
        default_factory=list,
        description="Env of every replica: a map of names to values, or a list of "
        "{name, value} / {name, secretKeyRef} (extension).",
    )
    debug: Debug = Debug()
    engine_name: LabelValue | None = Field(
        None,
        description="AIchor's compute cluster: recorded as a label (the stack's Kubernetes "
        "provider picks the cluster).",
    )

    @field_validator("types", mode="before")
    @classmethod
    def _operator_types(cls, value: Any, info: ValidationInfo) -> Any:
        operator = info.data.get("operator")
        if operator not in RULES:
            return Types()  # the operator's own error says what is wrong
        return types_model(operator).model_validate(value)

    @field_validator("env", mode="before")
    @classmethod
    def _env_map(cls, value: Any) -> Any:
        """AIchor's map form, `{NAME: value}`, as the list form."""
        if not isinstance(value, dict):
            return value
        return [{"name": str(k), "value": _env_text(v)} for k, v in value.items()]

    @field_validator("timeout")
    @classmethod
    def _duration(cls, value: str | None) -> str | None:
        if value is not None and (not value or not DURATION.match(value)):
            raise ValueError(f'\'{value}\' is not a duration such as "30m", "6h" or "1d2h"')
        if value is not None and _seconds(value) > INT32:
            raise ValueError(f"'{value}' is longer than {INT32} seconds (68 years)")
        return value

    # A custom resource's templates and options (aichor_iac.experiment); None for a manifest.
    _origin: Origin | None = PrivateAttr(None)

    @property
    def origin(self) -> Origin | None:
        return self._origin

    @property
    def timeout_seconds(self) -> int | None:
        """`timeout`, else `activeDeadlineSeconds`, in seconds."""
        return self.active_deadline_seconds if self.timeout is None else _seconds(self.timeout)


def _seconds(duration: str) -> int:
    """A duration such as "1d2h" (DURATION) in seconds."""
    parts = DURATION.match(duration).groups()  # type: ignore[union-attr]
    return sum(int(p) * unit for p, unit in zip(parts, DURATION_UNITS, strict=True) if p)


def _env_text(value: Any) -> Any:
    """A YAML scalar as the text an env value is (`true`, `1`); anything else stays as is, to be
    refused with its path."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value) if isinstance(value, int | float) else value


class Manifest(Model):
    kind: Literal["AIchorManifest"] = "AIchorManifest"
    api_version: Literal["0.2.1", "0.2.2", "0.2.3"] = "0.2.2"
    name: str | None = Field(None, description="Experiment name (default: the stack name).")
    builder: dict[str, Any] | None = Field(None, description="Image build settings (ignored).")
    spec: Spec

    _source: str = PrivateAttr("<manifest>")
    _lines: dict[tuple[str, ...], int] = PrivateAttr(default_factory=dict)

    @field_validator("api_version", mode="before")
    @classmethod
    def _version_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int | float) else value

    @property
    def source(self) -> str:
        """The file the manifest came from (`<stdin>`, `<manifest>` for a text)."""
        return self._source

    def located(self, problems: list[Problem]) -> list[Problem]:
        """Problems found after loading, each with the line of the manifest it is about."""
        return [
            Problem(p.path, p.message, p.line or _line_for(tuple(p.path.split(".")), self._lines))
            for p in problems
        ]

    def error(self, problems: list[Problem]) -> ManifestError:
        """Problems found after loading, with the file and lines the manifest came from."""
        return ManifestError(self._source, self.located(problems))


@dataclass(frozen=True)
class Problem:
    path: str
    message: str
    line: int | None = None

    def format(self, source: str) -> str:
        """One line, whatever the message quotes (a user's value may hold line breaks)."""
        where = f"{source}:{self.line}" if self.line else source
        text = f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"
        return one_line(text)


def one_line(text: str) -> str:
    """Control characters (line breaks, NUL, escapes) as Python writes them in a string."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class ManifestError(Exception):
    """Every problem found in one manifest; `str()` gives one line per problem."""

    def __init__(self, source: str, problems: list[Problem]):
        self.source = source
        self.problems = problems
        super().__init__("\n".join(p.format(source) for p in problems))


def load(path: str | Path) -> Manifest:
    """The experiment in a file; `-` is standard input (as `kubectl apply -f -` reads it)."""
    stdin = str(path) == "-"
    path = Path("<stdin>") if stdin else Path(path)
    try:
        if stdin:
            data = sys.stdin.buffer.read(MAX_BYTES + 1)
        else:
            with path.open("rb") as file:
                data = file.read(MAX_BYTES + 1)  # never more: it may be endless (/dev/zero)
        _bounded(len(data), str(path))
        text = data.decode("utf-8")
    except OSError as error:
        raise ManifestError(str(path), [Problem("", f"cannot read: {error.strerror}")]) from None
    except UnicodeDecodeError as error:
        reason = f"not UTF-8 text (byte {error.object[error.start]:#04x} at offset {error.start})"
        raise ManifestError(str(path), [Problem("", reason)]) from None
    return parse(text, source=str(path))


MAX_BYTES = 1024 * 1024  # a manifest's text (its objects are at most 1.5 MiB in etcd anyway)
MAX_NODES = 100_000  # keys and list items of a manifest, once YAML aliases are expanded
MAX_DEPTH = 64  # levels of nesting (a manifest needs fewer than 10)


def _bounded(size: int, source: str) -> None:
    if size > MAX_BYTES:
        reason = f"larger than {MAX_BYTES:,} bytes: a manifest is a few kilobytes"
        raise ManifestError(source, [Problem("", reason)])


def parse(text: str, source: str = "<manifest>") -> Manifest:
    """The experiment a YAML text describes: one document, or a custom resource with the
    ConfigMaps its pods mount beside it (KubeRay's samples ship their code so)."""
    _bounded(len(text.encode("utf-8", "surrogatepass")), source)
    try:
        nodes = [n for n in yaml.compose_all(text, Loader=yaml.SafeLoader) if n is not None]
        problems = [p for n in nodes for p in _shape_problems(n)]  # before aliases expand
        if problems:
            raise ManifestError(source, problems)
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        reason = getattr(error, "problem", None) or str(error)
        line = mark.line + 1 if mark else None
        reason = " ".join(str(reason).split())  # one line per problem
        raise ManifestError(source, [Problem("", f"invalid YAML: {reason}", line)]) from None
    except RecursionError:  # PyYAML's composer recurses once per level
        raise ManifestError(source, [Problem("", f"nested more than {MAX_DEPTH} levels")]) from None
    if not documents or not all(isinstance(d, dict) for d in documents):
        raise ManifestError(source, [Problem("", "a manifest is a YAML mapping with a spec")])
    lines = [n.start_mark.line + 1 for n in nodes]
    custom = [
        i for i, d in enumerate(documents) if str(d.get("apiVersion", "")).startswith(CR_GROUPS)
    ]
    index = custom[0] if custom else 0
    others = [i for i, d in enumerate(documents) if i != index and not _companion(d)]
    if len(documents) > 1 and (others or not custom):
        problems = [Problem("", _beside(documents[i]), lines[i]) for i in others]
        reason = (
            "holds several YAML documents: give one AIchor manifest, or one custom resource "
            "(kubeflow.org, ray.io) with the v1 ConfigMaps its pods mount"
        )
        raise ManifestError(source, problems if custom else [Problem("", reason, lines[1])])
    companions = [d for i, d in enumerate(documents) if i != index]
    return validate(documents[index], source, _key_lines(nodes[index]), companions)


def _beside(document: dict[str, Any]) -> str:
    """Why a document beside the experiment's is refused."""
    kind = document.get("kind")
    what = f"a {kind}" if isinstance(kind, str) else "a document"
    secret = "; its data would be printed by `render`" if kind == "Secret" else ""
    return one_line(
        f"{what} beside the experiment: aichor-iac creates only the v1 ConfigMaps a custom "
        "resource's pods mount; create it beside the stack (kubectl apply, or a resource of "
        f"the Pulumi program) and remove it from this file{secret}"
    )


CR_GROUPS = ("kubeflow.org/", "ray.io/")  # custom resources a manifest file may hold


def _companion(document: dict[str, Any]) -> bool:
    """A document that only stands beside a custom resource: a ConfigMap its pods mount."""
    return document.get("apiVersion") == "v1" and document.get("kind") == "ConfigMap"


def validate(
    data: dict[str, Any],
    source: str = "<manifest>",
    lines: dict | None = None,
    companions: list[dict[str, Any]] | None = None,
) -> Manifest:
    """The experiment `data` describes, by its front door: an AIchor manifest, or a Kubeflow
    or KubeRay custom resource (with `companions`, the ConfigMaps beside it)."""
    lines = lines or {}
    api_version = str(data.get("apiVersion", ""))
    if api_version.startswith(CR_GROUPS):
        # The custom resources' front doors build on this module's models.
        if api_version.startswith("ray.io/"):
            from . import kuberay as door
        else:
            from . import kubeflow as door
        return door.validate(data, source, lines, companions or [])
    spec = data.get("spec")
    operator = spec.get("operator") if isinstance(spec, dict) else None
    if isinstance(operator, str) and operator in OTHER_PLATFORMS:
        raise ManifestError(
            source,
            [
                Problem(
                    "spec.operator",
                    f"'{operator}' targets {OTHER_PLATFORMS[operator]}, another platform: "
                    f"aichor-iac runs AIchor's Kubernetes operators ({', '.join(OPERATORS)}); "
                    "rewrite the experiment for one of them",
                    _line_for(("spec", "operator"), lines),
                )
            ],
        )
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as error:
        problems = [_problem(e, lines, operator) for e in error.errors()]
        raise ManifestError(source, sorted(problems, key=lambda p: p.line or 0)) from None
    manifest._source, manifest._lines = source, lines
    problems = _operator_rules(manifest.spec)
    if problems:
        raise manifest.error(problems)
    return manifest


def _operator_rules(spec: Spec) -> list[Problem]:
    """Rules across fields: which types an operator needs and how many of each."""
    op, types, problems = spec.operator, spec.types.present(), []
    rule = RULES[op]
    seen_env: set[str] = set()
    for i, var in enumerate(spec.env):
        if var.name in seen_env:
            problems.append(Problem(f"spec.env.{i}.name", f"'{var.name}' is given twice"))
        seen_env.add(var.name)
    for name, type_rule in rule.types.items():
        group = types.get(name)
        if type_rule.pools:
            if type_rule.required and not group:
                problems.append(Problem(f"spec.types.{name}", "give at least one worker pool"))
            continue
        if group is None:
            if type_rule.required:
                problems.append(Problem(f"spec.types.{name}", f"operator '{op}' needs a {name}"))
            continue
        low, high = type_rule.count
        if low == high and group.count != low:
            problems.append(
                Problem(f"spec.types.{name}.count", f"must be {low}, not {group.count}")
            )
        elif high is not None and group.count > high:
            problems.append(Problem(f"spec.types.{name}.count", f"at most one {name}"))
    if rule.needs:
        names, path, sentence = rule.needs
        counted = [g for n, g in types.items() if n in names or not names]
        if not any(isinstance(g, ReplicaType) and g.count > 0 for g in counted):
            problems.append(Problem(path, sentence))
    if op in ("ray", "kuberay"):
        problems += _ray_rules(spec)
    if spec.debug.vscode.enabled:
        problems.append(
            Problem(
                "spec.debug.vscode.enabled",
                "VS Code sessions are AIchor's own service and are not run here: set it to false "
                "and use `kubectl exec -it` into a replica, or VS Code's Kubernetes extension "
                "(attach to a running pod)",
            )
        )
    return problems


def ray_version(spec: Spec) -> tuple[int, int] | None:
    """`rayVersion` as (major, minor); None when not given (the newest 2.x is assumed)."""
    if spec.ray_version is None:
        return None
    match = RAY_VERSION.match(spec.ray_version)
    return (int(match.group(1)), int(match.group(2))) if match else None


RAY_FLAG = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*\Z")  # a `ray start` option's name


def ray_flag(key: str) -> str:
    """A `rayStartParams` key as the `ray start` flag it names (`num_cpus` is `num-cpus`)."""
    return key.lstrip("-").replace("_", "-")


def _ray_rules(spec: Spec) -> list[Problem]:
    """Ray versions this package knows the flags of, and the `ray start` flags it owns."""
    problems = []
    if spec.ray_version is not None:
        version = ray_version(spec)
        if version is None or not (1, 6) <= version < (3, 0):
            problems.append(
                Problem(
                    "spec.rayVersion",
                    f"'{spec.ray_version}' is not a supported Ray version: give 1.6 to 2.x, "
                    "e.g. '2.9.3'",
                )
            )
        elif spec.operator == "kuberay" and version < (2, 0):
            problems.append(
                Problem(
                    "spec.rayVersion",
                    "operator 'kuberay' submits with the Ray Jobs API of Ray 2.0 and later; "
                    "use operator 'ray' for Ray 1.x",
                )
            )
    pools = spec.types.get("Workers") or []
    seen: set[str] = set()
    for i, pool in enumerate(pools):
        where = f"spec.types.Workers.{i}.name"
        if pool.name in seen:
            problems.append(Problem(where, f"duplicate pool name '{pool.name}'"))
        seen.add(pool.name)
        if pool.name in RAY_ROLES:
            problems.append(
                Problem(
                    where, f"'{pool.name}' names the {pool.name} group's Job; choose another name"
                )
            )
    groups = [("Head", spec.types.get("Head")), ("Job", spec.types.get("Job"))]
    groups += [(f"Workers.{i}", pool) for i, pool in enumerate(pools)]
    for path, group in groups:
        if group is None:
            continue
        for key, value in group.ray_start_params.items():
            flag = ray_flag(key)
            where = f"spec.types.{path}.rayStartParams.{key}"
            if not RAY_FLAG.match(flag):
                problems.append(
                    Problem(
                        where,
                        "is not a `ray start` option: lowercase letters, digits and '-' or '_' "
                        "(e.g. num-cpus)",
                    )
                )
            elif flag in RAY_MANAGED_FLAGS:
                problems.append(
                    Problem(where, f"--{flag} is set by aichor-iac; remove it from rayStartParams")
                )
            elif flag == "resources" and not _json_object(value):
                problems.append(Problem(where, "must be a JSON object such as '{\"TPU\": 4}'"))
    return problems


def _json_object(value: object) -> bool:
    try:
        return isinstance(json.loads(str(value)), dict)
    except ValueError:
        return False


# --- error formatting -------------------------------------------------------------------------


def _problem(
    error: dict[str, Any], lines: dict, operator: Any = None, root: type[BaseModel] | None = None
) -> Problem:
    """A pydantic error as a problem of the document whose model is `root` (a manifest's by
    default): its path, a sentence, its line."""
    loc = tuple(str(part) for part in error["loc"])
    kind, message = error["type"], error["msg"]
    if kind == "extra_forbidden":
        *parent, key = loc
        allowed = _allowed_keys(tuple(parent), operator, root or Manifest)
        if tuple(parent) == ("spec", "types") and key in TYPE_NAMES:
            message = f"operator '{operator}' has no {key}; its types are {', '.join(allowed)}"
        else:
            message = f"unknown key '{key}'" + _did_you_mean(key, allowed)
    elif kind == "missing":
        message = "required; add it"
    elif kind == "literal_error":
        message = f"must be {error['ctx']['expected']}"
    elif kind == "value_error":
        message = message.removeprefix("Value error, ")
    return Problem(".".join(loc), message, _line_for(loc, lines))


def _did_you_mean(key: str, allowed: list[str]) -> str:
    by_lower = {a.lower(): a for a in allowed}
    matches = difflib.get_close_matches(key.lower(), list(by_lower), n=1, cutoff=0.6)
    if matches:
        return f"; did you mean '{by_lower[matches[0]]}'?"
    return f"; allowed keys: {', '.join(allowed)}" if allowed else ""


def _allowed_keys(
    loc: tuple[str, ...], operator: Any = None, root: type[BaseModel] | None = None
) -> list[str]:
    """The keys the model at `loc` accepts (walks the model tree along the error path)."""
    model: Any = root or Manifest
    for part in loc:
        if model is JobSetTypes:
            model = JobSetType
            continue
        field = _field_by_key(model, part)
        if field is None:
            if part.isdigit() or model is None:
                continue
            return []
        model = _model_of(field.annotation)
        if model is Types:
            model = types_model(operator) if operator in RULES else None
    if model is None or not isinstance(model, type) or not issubclass(model, BaseModel):
        return []
    return [f.alias or name for name, f in model.model_fields.items()]


def _field_by_key(model: Any, key: str) -> Any:
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return None
    for name, field in model.model_fields.items():
        if key in (name, field.alias):
            return field
    return None


def _model_of(annotation: Any) -> Any:
    """The pydantic model inside `X | None` or `list[X]`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _shape_problems(root: yaml.Node | None) -> list[Problem]:
    """What YAML allows and a manifest must not have: a key given twice (YAML keeps the last
    silently; `Worker` and `worker` are the same type), NUL characters, deep nesting, and a
    document that grows past MAX_NODES once its aliases are expanded (an alias bomb).
    Iterative, and it stops counting at the limit, so no input makes it slow."""
    problems: list[Problem] = []
    todo: list[tuple[yaml.Node | None, tuple[str, ...]]] = [(root, ())]
    for _ in range(MAX_NODES + 1):
        if not todo:
            return problems
        node, path = todo.pop()
        if len(path) > MAX_DEPTH:
            return [Problem("", f"nested more than {MAX_DEPTH} levels")]
        if isinstance(node, yaml.MappingNode):
            first: dict[str, int] = {}
            for key, value in node.value:
                name = str(key.value)
                same = name.lower() if path[-1:] == ("types",) else name
                line = key.start_mark.line + 1
                if same in first:
                    where = ".".join((*path, name))
                    reason = f"given twice (also on line {first[same]}); keep one"
                    problems.append(Problem(where, reason, line))
                first.setdefault(same, line)
                todo.append((value, (*path, name)))
        elif isinstance(node, yaml.SequenceNode):
            todo += [(item, (*path, str(i))) for i, item in enumerate(node.value)]
        elif isinstance(node, yaml.ScalarNode) and "\0" in node.value:
            reason = "holds a NUL character, which no command, env value or name can hold"
            problems.append(Problem(".".join(path), reason, node.start_mark.line + 1))
    reason = f"too large: more than {MAX_NODES} keys and items once its YAML aliases are expanded"
    return [Problem("", reason)]


def _key_lines(node: yaml.Node | None, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], int]:
    """Line (1-based) of every key and list item in the YAML document, by path."""
    lines: dict[tuple[str, ...], int] = {}
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            sub = (*path, str(key.value))
            lines[sub] = key.start_mark.line + 1
            lines.update(_key_lines(value, sub))
            if path and path[-1] == "types":  # errors name fixed types canonically
                canonical = (*path, _CANONICAL_TYPE.get(str(key.value).lower(), str(key.value)))
                if canonical != sub:
                    lines.setdefault(canonical, key.start_mark.line + 1)
                    lines.update(_key_lines(value, canonical))
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            sub = (*path, str(i))
            lines[sub] = item.start_mark.line + 1
            lines.update(_key_lines(item, sub))
    return lines


def _line_for(loc: tuple[str, ...], lines: dict) -> int | None:
    for end in range(len(loc), 0, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return None


def json_schema() -> dict[str, Any]:
    """The manifest's JSON Schema, for editors (`aichor-iac schema`): `types` follows the
    operator (if/then per operator), type keys in either casing, `env` in either form."""
    schema = Manifest.model_json_schema(by_alias=True)
    defs = schema["$defs"]
    spec = defs["Spec"]
    spec["properties"]["types"] = {
        "type": "object",
        "description": spec["properties"]["types"].get("description", ""),
    }
    env = spec["properties"]["env"]
    spec["properties"]["env"] = {
        "anyOf": [
            {"type": "array", "items": env["items"]},
            {
                "type": "object",
                "propertyNames": {"pattern": EnvVar.model_fields["name"].metadata[0].pattern},
                "additionalProperties": {"type": ["string", "number", "boolean"]},
            },
        ],
        "description": env["description"],
    }
    spec["allOf"] = []
    for operator in OPERATORS:
        model = types_model(operator)
        sub = model.model_json_schema(by_alias=True, ref_template="#/$defs/{model}")
        defs.update(sub.pop("$defs", {}))
        properties = sub.get("properties", {})
        properties.update({k.lower(): v for k, v in list(properties.items())})
        if model is JobSetTypes:
            sub["propertyNames"] = {"pattern": "^" + JOBSET_TYPE.pattern.removesuffix("\\Z") + "$"}
        defs[model.__name__] = sub
        spec["allOf"].append(
            {
                "if": {"properties": {"operator": {"const": operator}}, "required": ["operator"]},
                "then": {"properties": {"types": {"$ref": f"#/$defs/{model.__name__}"}}},
            }
        )
    defs.pop("Types", None)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "AIchor experiment manifest (aichor-iac)"
    return schema
