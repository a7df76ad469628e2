"""The AIchor experiment manifest (`kind: AIchorManifest`, apiVersion 0.2.1–0.2.3).

Loading turns YAML into validated pydantic models or raises `ManifestError` holding every
problem found, each with the manifest path, a sentence and (when the YAML gives it) a line.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

OPERATORS = ("ray", "kuberay", "tf", "pytorch", "xgboost", "jax", "mpi")
Operator = Literal["ray", "kuberay", "tf", "pytorch", "xgboost", "jax", "mpi"]

# Canonical replica type names, looked up case-insensitively (`worker` is `Worker`).
TYPE_NAMES = ("Master", "Worker", "Chief", "PS", "Evaluator", "Head", "Job", "Workers", "Launcher")
_CANONICAL_TYPE = {name.lower(): name for name in TYPE_NAMES}

# Which replica types each operator accepts.
OPERATOR_TYPES: dict[str, tuple[str, ...]] = {
    "pytorch": ("Master", "Worker"),
    "xgboost": ("Master", "Worker"),
    "jax": ("Worker",),
    "tf": ("Chief", "PS", "Worker", "Evaluator"),
    "ray": ("Head", "Workers", "Job"),
    "kuberay": ("Head", "Workers"),
    "mpi": ("Launcher", "Worker"),
}

# Ray groups' Job names, which pool names must not take.
RAY_ROLES = ("head", "job", "submitter")
RAY_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.\d+)?$")
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
MIG_PROFILE = re.compile(r"^mig-\d+g\.\d+gb$")
DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
DURATION_UNITS = (86400, 3600, 60, 1)


class Model(BaseModel):
    """Base: camelCase keys as in AIchor manifests, unknown keys rejected."""

    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )


class Gpu(Model):
    count: int = Field(ge=0, description="GPUs per replica.")
    type: str = Field("gpu", description="`gpu` for whole GPUs or a MIG profile (`mig-1g.10gb`).")
    product: str | None = Field(
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
    topology: str = Field(description="TPU topology, e.g. `2x2`.")
    tpu_chips_count: int = Field(ge=1, description="TPU chips per replica.")


class Accelerators(Model):
    gpu: Gpu | None = None
    tpu: Tpu | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Accelerators:
        if self.gpu and self.tpu and self.gpu.count and self.tpu.tpu_chips_count:
            raise ValueError("give gpu or tpu, not both")
        return self


class Toleration(Model):
    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None


class Resources(Model):
    cpus: float = Field(1, gt=0, description="CPU request per replica.")
    ram_ratio: float | None = Field(None, gt=0, description="Memory GiB per CPU.")
    memory: float | None = Field(None, gt=0, description="Memory GiB per replica.")
    cpu_limit_ratio: float = Field(2, ge=1, description="CPU limit = cpus × cpuLimitRatio.")
    shm_size_gb: float = Field(
        0, ge=0, alias="shmSizeGB", description="Size of a memory-backed /dev/shm (GiB)."
    )
    accelerators: Accelerators = Accelerators()
    extra_selectors: dict[str, str] = Field(default_factory=dict, description="Node selectors.")
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
    count: int = Field(1, ge=0, description="Number of replicas.")
    resources: Resources
    ray_start_params: dict[str, str | int | float | bool] = Field(default_factory=dict)


class RayPool(ReplicaType):
    name: str = Field(description="Pool name (a DNS label); also the pool's Ray custom resource.")
    count: int = Field(0, ge=0)

    @field_validator("name")
    @classmethod
    def _dns_label(cls, value: str) -> str:
        if not DNS_LABEL.match(value) or len(value) > 40:
            raise ValueError(
                f"'{value}' must be a DNS label: lowercase letters, digits and '-', "
                "starting with a letter, at most 40 characters"
            )
        return value


def _lowercase_type_keys(schema: dict[str, Any]) -> None:
    """Editors: accept `worker` as well as `Worker`, as the loader does."""
    properties = schema.get("properties", {})
    properties.update({k.lower(): v for k, v in list(properties.items())})


class Types(Model):
    """Replica types; keys are matched case-insensitively (`worker` is `Worker`)."""

    model_config = ConfigDict(alias_generator=None, json_schema_extra=_lowercase_type_keys)

    Master: ReplicaType | None = None
    Worker: ReplicaType | None = None
    Chief: ReplicaType | None = None
    PS: ReplicaType | None = None
    Evaluator: ReplicaType | None = None
    Head: ReplicaType | None = None
    Job: ReplicaType | None = None
    Launcher: ReplicaType | None = None
    Workers: list[RayPool] | None = None

    @model_validator(mode="before")
    @classmethod
    def _canonical_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {_CANONICAL_TYPE.get(str(k).lower(), k): v for k, v in data.items()}
        return data

    def present(self) -> dict[str, ReplicaType | list[RayPool]]:
        """The types the manifest gives, in canonical order."""
        return {n: getattr(self, n) for n in TYPE_NAMES if getattr(self, n) is not None}


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
    backoff_limit: int = Field(0, ge=0, description="Pod failures tolerated per replica group.")


class SecurityContext(Model):
    ptrace: bool = False


class SecretKeyRef(Model):
    name: str = Field(description="An existing Secret in the experiment's namespace.")
    key: str = Field(description="The key inside that Secret.")


class EnvVar(Model):
    """`spec.env` (extension): a plain value or a reference to an existing Secret's key."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    value: str | None = None
    secret_key_ref: SecretKeyRef | None = None

    @model_validator(mode="after")
    def _one_source(self) -> EnvVar:
        if (self.value is None) == (self.secret_key_ref is None):
            raise ValueError("give exactly one of value or secretKeyRef")
        return self


class Spec(Model):
    operator: Operator
    image: str = Field(min_length=1)
    command: str = Field(min_length=1, description="One shell command line.")
    types: Types
    tensorboard: Tensorboard = Tensorboard()
    timeout: str | None = Field(None, description='Deadline such as "4m", "6h", "1d".')
    restart_policy: RestartPolicy = RestartPolicy()
    ray_version: str | None = None
    storage: Storage = Storage()
    security_context: SecurityContext = SecurityContext()
    slots_per_worker: int | None = Field(None, ge=1, description="mpi: MPI slots per worker.")
    mpi_implementation: Literal["OpenMPI", "Intel", "MPICH"] = "OpenMPI"
    env: list[EnvVar] = Field(
        default_factory=list, description="Extension: env of every replica (values or Secrets)."
    )

    @field_validator("timeout")
    @classmethod
    def _duration(cls, value: str | None) -> str | None:
        if value is not None and (not value or not DURATION.match(value)):
            raise ValueError(f'\'{value}\' is not a duration such as "30m", "6h" or "1d2h"')
        return value

    @property
    def timeout_seconds(self) -> int | None:
        if self.timeout is None:
            return None
        parts = DURATION.match(self.timeout).groups()  # type: ignore[union-attr]
        return sum(int(p) * unit for p, unit in zip(parts, DURATION_UNITS, strict=True) if p)


class Manifest(Model):
    kind: Literal["AIchorManifest"] = "AIchorManifest"
    api_version: Literal["0.2.1", "0.2.2", "0.2.3"] = "0.2.2"
    name: str | None = Field(None, description="Experiment name (default: the stack name).")
    builder: dict[str, Any] | None = Field(None, description="Image build settings (ignored).")
    spec: Spec

    @field_validator("api_version", mode="before")
    @classmethod
    def _version_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int | float) else value


@dataclass(frozen=True)
class Problem:
    path: str
    message: str
    line: int | None = None

    def format(self, source: str) -> str:
        where = f"{source}:{self.line}" if self.line else source
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class ManifestError(Exception):
    """Every problem found in one manifest; `str()` gives one line per problem."""

    def __init__(self, source: str, problems: list[Problem]):
        self.source = source
        self.problems = problems
        super().__init__("\n".join(p.format(source) for p in problems))


def load(path: str | Path) -> Manifest:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ManifestError(str(path), [Problem("", f"cannot read: {error.strerror}")]) from None
    return parse(text, source=str(path))


def parse(text: str, source: str = "<manifest>") -> Manifest:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        reason = getattr(error, "problem", None) or str(error)
        line = mark.line + 1 if mark else None
        raise ManifestError(source, [Problem("", f"invalid YAML: {reason}", line)]) from None
    if not isinstance(data, dict):
        raise ManifestError(source, [Problem("", "a manifest is a YAML mapping with a spec")])
    return validate(data, source, _key_lines(node))


def validate(
    data: dict[str, Any], source: str = "<manifest>", lines: dict | None = None
) -> Manifest:
    lines = lines or {}
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as error:
        problems = [_problem(e, lines) for e in error.errors()]
        raise ManifestError(source, sorted(problems, key=lambda p: p.line or 0)) from None
    problems = _operator_rules(manifest.spec)
    if problems:
        for i, p in enumerate(problems):
            problems[i] = Problem(p.path, p.message, _line_for(tuple(p.path.split(".")), lines))
        raise ManifestError(source, problems)
    return manifest


def _operator_rules(spec: Spec) -> list[Problem]:
    """Rules that depend on the operator: which types exist and how many of each."""
    op, types, problems = spec.operator, spec.types.present(), []
    seen_env: set[str] = set()
    for i, var in enumerate(spec.env):
        if var.name in seen_env:
            problems.append(Problem(f"spec.env.{i}.name", f"'{var.name}' is given twice"))
        seen_env.add(var.name)
    allowed = OPERATOR_TYPES[op]
    for name in types:
        if name not in allowed:
            problems.append(
                Problem(
                    f"spec.types.{name}",
                    f"operator '{op}' has no {name}; its types are {', '.join(allowed)}",
                )
            )

    def count(name: str) -> int:
        group = types.get(name)
        return group.count if isinstance(group, ReplicaType) else 0

    def exactly_one(name: str) -> None:
        if name in types and count(name) != 1:
            problems.append(Problem(f"spec.types.{name}.count", f"must be 1, not {count(name)}"))

    if op in ("pytorch", "xgboost"):
        exactly_one("Master")
        if "Master" not in types and count("Worker") < 1:
            problems.append(
                Problem(
                    "spec.types", "give Master (count 1) and Worker, or a Worker with count ≥ 1"
                )
            )
    elif op == "jax":
        if count("Worker") < 1:
            problems.append(Problem("spec.types.Worker.count", "JAX needs at least one Worker"))
    elif op == "tf":
        if count("Chief") > 1:
            problems.append(Problem("spec.types.Chief.count", "at most one Chief"))
        if count("Evaluator") > 1:
            problems.append(Problem("spec.types.Evaluator.count", "at most one Evaluator"))
        if count("Chief") + count("Worker") < 1:
            problems.append(Problem("spec.types", "TF needs a Chief or at least one Worker"))
    elif op in ("ray", "kuberay"):
        problems += _ray_rules(spec)
        for name in ("Head", "Job") if op == "ray" else ("Head",):
            if name not in types:
                problems.append(Problem(f"spec.types.{name}", f"operator '{op}' needs a {name}"))
            exactly_one(name)
        pools = spec.types.Workers or []
        if not pools:
            problems.append(Problem("spec.types.Workers", "give at least one worker pool"))
        seen: set[str] = set()
        for i, pool in enumerate(pools):
            if pool.name in seen:
                problems.append(
                    Problem(f"spec.types.Workers.{i}.name", f"duplicate pool name '{pool.name}'")
                )
            seen.add(pool.name)
            if pool.name in RAY_ROLES:
                problems.append(
                    Problem(
                        f"spec.types.Workers.{i}.name",
                        f"'{pool.name}' names the {pool.name} group's Job; choose another name",
                    )
                )
    elif op == "mpi":
        if "Launcher" not in types:
            problems.append(Problem("spec.types.Launcher", "operator 'mpi' needs a Launcher"))
        exactly_one("Launcher")
        if count("Worker") < 1:
            problems.append(Problem("spec.types.Worker.count", "MPI needs at least one Worker"))
    return problems


def ray_version(spec: Spec) -> tuple[int, int] | None:
    """`rayVersion` as (major, minor); None when not given (the newest 2.x is assumed)."""
    if spec.ray_version is None:
        return None
    match = RAY_VERSION.match(spec.ray_version)
    return (int(match.group(1)), int(match.group(2))) if match else None


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
    groups = [("Head", spec.types.Head), ("Job", spec.types.Job)]
    groups += [(f"Workers.{i}", pool) for i, pool in enumerate(spec.types.Workers or [])]
    for path, group in groups:
        if group is None:
            continue
        for key, value in group.ray_start_params.items():
            flag = ray_flag(key)
            where = f"spec.types.{path}.rayStartParams.{key}"
            if flag in RAY_MANAGED_FLAGS:
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


def _problem(error: dict[str, Any], lines: dict) -> Problem:
    loc = tuple(str(part) for part in error["loc"])
    kind, message = error["type"], error["msg"]
    if kind == "extra_forbidden":
        *parent, key = loc
        message = f"unknown key '{key}'" + _did_you_mean(key, _allowed_keys(tuple(parent)))
        loc = (*parent, key)
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


def _allowed_keys(loc: tuple[str, ...]) -> list[str]:
    """The keys the model at `loc` accepts (walks the model tree along the error path)."""
    model: Any = Manifest
    for part in loc:
        field = _field_by_key(model, part)
        if field is None:
            if part.isdigit() or model is None:
                continue
            return []
        model = _model_of(field.annotation)
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


def _key_lines(node: yaml.Node | None, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], int]:
    """Line (1-based) of every key and list item in the YAML document, by path."""
    lines: dict[tuple[str, ...], int] = {}
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            sub = (
                *path,
                str(_CANONICAL_TYPE.get(key.value.lower(), key.value))
                if path and path[-1] == "types"
                else str(key.value),
            )
            lines[sub] = key.start_mark.line + 1
            lines.update(_key_lines(value, sub))
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
    """The manifest's JSON Schema, for editors (`aichor-iac schema`)."""
    schema = Manifest.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "AIchor experiment manifest (aichor-iac)"
    return schema
