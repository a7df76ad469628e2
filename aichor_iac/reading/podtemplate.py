"""Pod templates from custom resources (Kubeflow's and KubeRay's): checked as the API server
would check them, and read for what the neutral description needs (resources, quantities).

What both front doors share; each applies its own operator's defaulting on top.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from ..experiment.groups import Accelerators, Gpu, Model, Resources
from ..experiment.model import Experiment
from ..experiment.origin import Origin
from ..problems import ManifestError, Problem
from ..problems import located as at_lines
from ..rules.limits import DNS_1035, Image, quantity
from . import openapi
from .errors import problem as pydantic_problem
from .openapi import Invalid

KUEUE_LABEL = "kueue.x-k8s.io/queue-name"  # the label that queues a workload in Kueue
M = TypeVar("M", bound="CustomResource")  # (a door's resource)
S = TypeVar("S", bound=BaseModel)  # (any model: a resource's spec, a part of it)


class Metadata(BaseModel):
    """A custom resource's metadata: its name (or its generateName) names the experiment; the
    rest is not used (the stack places the experiment in its namespace, the objects carry
    aichor-iac's labels)."""

    # (built within the custom resources' models that hold it, when a door first reads one)
    model_config = ConfigDict(defer_build=True)

    generate_name: str | None = Field(None, alias="generateName", min_length=1)
    # (read as the API server reads them: string maps; the experiment's objects carry their own)
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    name: str | None = Field(None, min_length=1, validate_default=True)

    @field_validator("name")
    @classmethod
    def _named(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None and not info.data.get("generate_name"):
            raise ValueError("required; add it (or generateName)")
        return value

    @property
    def queue(self) -> str | None:
        """The Kueue queue the resource's label names (the stack's `aichor:kueueQueue`
        decides where its Jobs go; a different one gets a warning)."""
        return (self.labels or {}).get(KUEUE_LABEL)

    def read(self, experiment: Experiment, origin: Origin, source: str, lines: dict) -> Experiment:
        """The experiment of a custom resource with this metadata: its `origin` kept, named by
        the resource, or by its generateName and the stack's name (`Experiment.name_in`)."""
        experiment = experiment.model_copy(update={"spec": experiment.spec.with_origin(origin)})
        if self.name is None:
            experiment = experiment.model_copy(update={"generate_name": self.generate_name})
        return experiment.read_from(source, lines)

    def problems(self, who: str) -> list[Problem]:
        """The name as `who` (the operator's webhook, KubeRay) requires it: a DNS-1035 label;
        a generateName must begin one (the stack's name completes it: `Experiment.name_in`)."""
        if self.name is not None:
            if DNS_1035.match(self.name):
                return []
            reason = (
                f"must be a DNS-1035 label, as {who} requires: lowercase letters, digits and "
                "'-', starting with a letter, at most 63 characters"
            )
            return [Problem("metadata.name", reason)]
        prefix = self.generate_name or ""
        if DNS_1035.match(f"{prefix}a") and len(prefix) <= MAX_PREFIX:
            return []
        reason = (
            "must begin a DNS-1035 label: lowercase letters, digits and '-', starting with a "
            f"letter, at most {MAX_PREFIX} characters (the stack's name follows it)"
        )
        return [Problem("metadata.generateName", reason)]


MAX_PREFIX = 58  # the API server's longest generateName prefix (it adds 5 characters)


class CustomResource(Model):
    """A custom resource's outer shape; each door's model narrows its apiVersion and kind,
    and its spec is read by the door's spec model (`resource_and_spec`)."""

    api_version: str
    kind: str
    metadata: Metadata
    spec: dict[str, Any]
    status: dict[str, Any] | None = None  # a resource read back from a cluster: ignored


def error(source: str, problems: list[Problem], lines: dict) -> ManifestError:
    """Every problem of one custom resource, each at its line, in the file's order."""
    return ManifestError(source, sorted(at_lines(problems, lines), key=lambda p: p.line or 0))


def located(error: Any, root: type[BaseModel], prefix: tuple[str, ...]) -> Problem:
    """A pydantic error of the model `root`, found at `prefix` of the resource."""
    problem = pydantic_problem(error, {}, root)
    path = ".".join((*prefix, problem.path)) if problem.path else ".".join(prefix)
    return Problem(path, problem.message)


def mapping(value: Any) -> dict[str, Any]:
    """A field of a user's template as a mapping; anything else (which the template's own
    checks refuse, at its path) as empty, so that reading it before them cannot crash."""
    return value if isinstance(value, dict) else {}


def listed(value: Any) -> list[Any]:
    """A field of a user's template as a list; anything else as empty (as `mapping`)."""
    return value if isinstance(value, list) else []


def resource_and_spec(
    data: dict[str, Any], fail: Any, kind: str, api_version: str, models: tuple[type[M], type[S]]
) -> tuple[M, S]:
    """A custom resource of one kind and version (else `fail` naming what is read) and its
    spec, each validated by its model (`parsed`)."""
    if data.get("apiVersion") != api_version or data.get("kind") != kind:
        reason = f"{data.get('apiVersion')} {data.get('kind')!s} is not a custom resource "
        raise fail([Problem("kind", f"{reason}aichor-iac reads: give {api_version} {kind}")])
    resource_model, spec_model = models
    resource = parsed(resource_model, data, (), fail)
    return resource, parsed(spec_model, resource.spec, ("spec",), fail)


def parsed(model: type[S], data: Any, prefix: tuple[str, ...], fail: Any) -> S:
    """`data` validated by `model`, found at `prefix` of the resource; or `fail` (the
    resource's error) with every problem at its path."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise fail([located(e, model, prefix) for e in error.errors()]) from None


@functools.cache
def _image() -> TypeAdapter:
    """The image rules a manifest's image is held to (built when a pod template is read)."""
    return TypeAdapter(Image)


def template_problems(template: dict[str, Any], where: str) -> list[Problem]:
    """What makes a pod template unusable: fields a template does not have, a break of the
    strict OpenAPI schema, containers without name or image, images the API server refuses,
    and the host name fields aichor-iac sets. Empty: the template can be kept."""
    unknown = sorted(set(template) - {"metadata", "spec"})
    if unknown:
        return [
            Problem(
                f"{where}.{key}",
                "is not a field of a pod template (metadata and spec), and would be dropped: "
                "remove it",
            )
            for key in unknown
        ]
    if invalid := schema_problems(template, where) or _nulls(template, where):
        return invalid
    pod = mapping(template.get("spec"))
    containers = pod.get("containers")
    if not isinstance(containers, list) or not containers:
        return [Problem(f"{where}.spec.containers", "give at least one container")]
    missing = [
        Problem(f"{where}.spec.containers.{i}.{key}", f"missing: every container needs {what}")
        for i, c in enumerate(containers)
        for key, what in (("name", "a name"), ("image", "an image"))
        if not (isinstance(c, dict) and c.get(key))
    ]
    if missing:
        return missing
    problems = []
    for i, c in enumerate(containers):  # the image rules a manifest's image is held to
        try:
            _image().validate_python(c["image"])
        except ValidationError as invalid_image:
            reason = invalid_image.errors()[0]["msg"].removeprefix("Value error, ")
            problems.append(Problem(f"{where}.spec.containers.{i}.image", reason))
    for field in ("hostname", "subdomain"):
        if field in pod:
            problems.append(
                Problem(
                    f"{where}.spec.{field}",
                    "is set by aichor-iac (each replica's stable host name in the experiment's "
                    "Service): remove it",
                )
            )
    return problems


def without_nulls(value: Any) -> Any:
    """A template as the API server decodes it: a field given as null (`command:` with
    nothing after it) is absent."""
    if isinstance(value, dict):
        return {key: without_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [without_nulls(item) for item in value]
    return value


# A pod template field of a custom resource: nulls read as the API server reads them.
Template = Annotated[dict[str, Any], AfterValidator(without_nulls)]


def _nulls(value: Any, where: str) -> list[Problem]:
    """Each null item of a list (the schema allows them; the API server would read one as an
    empty value): refused, so that nothing reads one."""
    items = value.items() if isinstance(value, dict) else enumerate(value)
    problems = []
    for key, item in items:
        if item is None:
            problems.append(Problem(f"{where}.{key}", "is null: give a value or remove it"))
        elif isinstance(item, dict | list):
            problems += _nulls(item, f"{where}.{key}")
    return problems


def schema_problems(template: dict[str, Any], where: str) -> list[Problem]:
    """Every way a pod template breaks Kubernetes' OpenAPI schema (strict: unknown fields
    too). Everything built from the template relies on its shape."""
    pod_template = {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": "template"},
        "template": template,
    }
    problems = []
    for error in sorted(validator("podtemplate-v1").errors(pod_template), key=Invalid.order):
        path = ".".join(str(part) for part in error.path[1:])
        reason = error.message.split("\n")[0]
        problems.append(
            Problem(".".join(filter(None, (where, path))), f"not a valid pod template: {reason}")
        )
    return problems


# The strict OpenAPI schemas of the Kubernetes kinds checked here (`kubernetes/VERSION` says
# which release; scripts/crd_schemas.py makes them from kubernetes-validate's)
KUBERNETES = Path(__file__).resolve().parent / "kubernetes"


@functools.cache
def validator(name: str) -> openapi.Checker:
    """The strict schema of an object kind (`podtemplate-v1`), checked as Draft 2020-12 (its
    `format`s are not checked: no format checker is given one)."""
    schema = json.loads((KUBERNETES / f"{name}.json").read_text())
    return openapi.Checker(
        schema, draft4=False, definitions=_definitions()["$defs"], keywords={"format": None}
    )


@functools.cache
def _definitions() -> dict[str, Any]:
    return json.loads((KUBERNETES / "_definitions.json").read_text())


def resources(container: dict[str, Any]) -> Resources:
    """What the operator's container asks for, for the experiment's totals (requests, else
    limits, as Kubernetes defaults requests; nothing asked is 0)."""
    resources = container.get("resources") or {}
    asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    gpus = int(quantity((resources.get("limits") or {}).get("nvidia.com/gpu", 0)))
    return Resources.model_construct(
        cpus=quantity(asked.get("cpu", 0)),
        memory=quantity(asked.get("memory", 0)) / 2**30,
        ram_ratio=None,
        cpu_limit_ratio=1,
        shm_size_gb=0,
        # (a count, for the totals; the API server's rules check the limit itself)
        accelerators=Accelerators(gpu=Gpu.model_construct(count=gpus, type="gpu", product=None))
        if gpus
        else Accelerators(),
        rdma=None,
        extra_selectors={},
        extra_tolerations=[],
    )
