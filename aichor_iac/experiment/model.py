"""The neutral description of an experiment, which every front door fills and every layer
below reads: `Experiment` (a name and a `Spec`: framework, image and command, groups, policies,
services) and where it was read from, so that later problems name their file and line.
Pure data: no Pulumi or Kubernetes import.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from ..problems import ManifestError, Problem, located
from ..rules.limits import INT32, Image, LabelValue
from .groups import RULES, Model, Operator, Types, types_model
from .origin import Origin
from .trial import Trial

DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?\Z")
DURATION_UNITS = (86400, 3600, 60, 1)


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


@dataclass(frozen=True)
class RestartRule:
    """What a replica's failure does, the first rule that matches deciding: `fail` (the
    experiment fails at once), `count` (every replica restarts, counted against the budget) or
    `free` (restarts without counting). It matches a failure of a pod of `jobs` (the input's
    replica types, e.g. Worker or a JobSet's replicated Job; every group when empty) whose exit
    code is `op` (In, NotIn) `codes` (any code without `op`). `name` says which rule decided,
    in the reason a failed experiment gives."""

    name: str
    action: Literal["fail", "count", "free"]
    jobs: tuple[str, ...] = ()
    op: Literal["In", "NotIn"] | None = None
    codes: tuple[int, ...] = ()


@dataclass(frozen=True)
class FailurePolicy:
    """The whole group's restart: every replica stops and starts again together when one
    fails, at most `max_restarts` counted times, as `rules` say (none matching: counted); the
    attempt number reaches the command as AICHOR_RESTART_ATTEMPT and as `attempt_names` (the
    input's own names for it). `source` names where it was asked for, for problems."""

    max_restarts: int = 0
    rules: tuple[RestartRule, ...] = ()
    attempt_names: tuple[str, ...] = ()
    source: str = "aichor:maxRestarts"

    @property
    def restarts(self) -> bool:
        """Whether the group restarts at all: a budget, or a rule that may restart (even
        with none left, a disruption restarts the group without counting)."""
        return self.max_restarts > 0 or any(r.action != "fail" for r in self.rules)


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
    vscode: VsCode = VsCode.model_construct()


class Spec(Model):
    operator: Operator
    image: Image = Field(description="Container image.")
    command: str = Field(min_length=1, description="One shell command line.")
    types: Types = Field(description="Replica types; which ones depends on the operator.")
    tensorboard: Tensorboard = Tensorboard.model_construct()
    timeout: str | None = Field(None, description='Deadline such as "4m", "6h", "1d".')
    active_deadline_seconds: int | None = Field(
        None,
        ge=1,
        le=INT32,
        description="Deadline in seconds (older form of timeout, which wins).",
    )
    restart_policy: RestartPolicy = RestartPolicy.model_construct()
    ray_version: str | None = None
    storage: Storage = Storage.model_construct()
    security_context: SecurityContext = SecurityContext.model_construct()
    slots_per_worker: int | None = Field(None, ge=1, description="mpi: MPI slots per worker.")
    mpi_implementation: Literal["OpenMPI", "Intel", "MPICH"] = "OpenMPI"
    env: list[EnvVar] = Field(
        default_factory=list,
        description="Env of every replica: a map of names to values, or a list of "
        "{name, value} / {name, secretKeyRef} (extension).",
    )
    debug: Debug = Debug.model_construct()
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

    # A custom resource's templates and options (`origin.Origin`); None for a manifest.
    _origin: Origin | None = PrivateAttr(None)
    # The group restart the input asks for in its own terms (None: it asks for none)
    _failure_policy: FailurePolicy | None = PrivateAttr(None)

    @property
    def origin(self) -> Origin | None:
        return self._origin

    @property
    def failure_policy(self) -> FailurePolicy | None:
        return self._failure_policy

    def with_origin(self, origin: Origin | None) -> Spec:
        """This spec as read from the custom resource `origin` (None: from a manifest)."""
        spec = self.model_copy()
        spec._origin = origin
        return spec

    def with_failure_policy(self, policy: FailurePolicy | None) -> Spec:
        """This spec with the group restart its input asks for."""
        spec = self.model_copy()
        spec._failure_policy = policy
        return spec

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


class Experiment(Model):
    """One experiment, whichever door it came in by: its name (None: the stack's) and `spec`."""

    name: str | None = Field(None, description="Experiment name (default: the stack name).")
    # A custom resource's metadata.generateName: the name is this prefix and the stack's.
    generate_name: str | None = None
    spec: Spec

    _source: str = PrivateAttr("<manifest>")
    _lines: dict[tuple[str, ...], int] = PrivateAttr(default_factory=dict)
    _trial: Trial | None = PrivateAttr(None)  # its place in a sweep, if it is a trial

    @property
    def trial(self) -> Trial | None:
        return self._trial

    def as_trial(self, trial: Trial) -> Experiment:
        """This experiment as `trial` of a sweep."""
        experiment = self.model_copy()
        experiment._trial = trial
        return experiment

    def read_from(self, source: str, lines: dict[tuple[str, ...], int]) -> Experiment:
        """This experiment, noted as read from `source`, whose keys are on `lines`."""
        self._source, self._lines = source, lines
        return self

    @property
    def source(self) -> str:
        """The file the experiment came from (`<stdin>`, `<manifest>` for a text)."""
        return self._source

    def name_in(self, stack: str) -> str:
        """The experiment's name in a stack: its own; else, given a generateName, that prefix
        and the stack's name (the API server adds a random suffix, which would make every
        `pulumi up` a new experiment: the stack's name is stable and differs per stack);
        else the stack's name."""
        if self.name:
            return self.name
        return f"{self.generate_name}{stack}" if self.generate_name else stack

    def located(self, problems: list[Problem]) -> list[Problem]:
        """Problems found after reading, each with the line of the input it is about."""
        return located(problems, self._lines)

    def error(self, problems: list[Problem]) -> ManifestError:
        """Problems found after reading, with the file and lines the experiment came from."""
        return ManifestError(self._source, self.located(problems))
