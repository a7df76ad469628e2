"""Pod templates from custom resources (Kubeflow's and KubeRay's): checked as the API server
would check them, and read for what the neutral description needs (resources, quantities).

What both front doors share; each applies its own operator's defaulting on top.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from .limits import Image
from .manifest import Accelerators, Gpu, ManifestError, Problem, Resources, _line_for, _problem

IMAGE = TypeAdapter(Image)


def error(source: str, problems: list[Problem], lines: dict) -> ManifestError:
    """Every problem of one custom resource, each at its line, in the file's order."""
    located = [
        Problem(p.path, p.message, p.line or _line_for(tuple(p.path.split(".")), lines))
        for p in problems
    ]
    return ManifestError(source, sorted(located, key=lambda p: p.line or 0))


def located(error: Any, root: type[BaseModel], prefix: tuple[str, ...]) -> Problem:
    """A pydantic error of the model `root`, found at `prefix` of the resource."""
    problem = _problem(error, {}, root=root)
    path = ".".join((*prefix, problem.path)) if problem.path else ".".join(prefix)
    return Problem(path, problem.message)


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
    if invalid := schema_problems(template, where):
        return invalid
    pod = template.get("spec")
    containers = pod.get("containers") if isinstance(pod, dict) else None
    if not isinstance(containers, list) or not containers:
        return [Problem(f"{where}.spec.containers", "give at least one container")]
    if not all(isinstance(c, dict) and c.get("name") and c.get("image") for c in containers):
        return [Problem(f"{where}.spec.containers", "each container needs a name and image")]
    problems = []
    for i, c in enumerate(containers):  # the image rules a manifest's image is held to
        try:
            IMAGE.validate_python(c["image"])
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
    for error in sorted(pod_template_schema().iter_errors(pod_template), key=str):
        path = ".".join(str(part) for part in list(error.absolute_path)[1:])
        reason = error.message.split("\n")[0]
        problems.append(
            Problem(".".join(filter(None, (where, path))), f"not a valid pod template: {reason}")
        )
    return problems


@functools.cache
def pod_template_schema() -> Any:
    """The strict PodTemplate schema of the newest Kubernetes kubernetes-validate ships, as
    one validator built once (its `validate()` reads the schema files at every call)."""
    from jsonschema import Draft202012Validator
    from kubernetes_validate.utils import latest_version, schema_contents
    from referencing import Registry, Resource

    version = latest_version()
    base = f"kubernetes-json-schema/v{version}-local-strict"
    schema = schema_contents(f"{base}/podtemplate-v1.json", version)
    definitions = schema_contents(f"{base}/_definitions.json", version)
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return Draft202012Validator(schema, registry=registry)


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


SUFFIXES = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def quantity(value: Any) -> float:
    """A Kubernetes quantity (`500m`, `4Gi`, `1e3`) as a number; 0 if it is not one (the
    API server's own check of the rendered objects names it)."""
    if isinstance(value, float) and not math.isfinite(value):
        return 0.0
    text = str(value)
    try:
        for suffix, factor in (*BINARY.items(), *SUFFIXES.items()):
            if text.endswith(suffix):
                return float(text[: -len(suffix)]) * factor
        return float(text)
    except ValueError:
        return 0.0
