"""Kubernetes' OpenAPI schemas, strict, as `kubernetes_validate.validate` checks an object, with
each kind's validator built once: `kubernetes_validate.validate` parses its 1.8 MB of
definitions again on every call (about 25 ms), and the suite checks tens of thousands of
objects."""

from __future__ import annotations

import functools
import re
from typing import Any

import jsonschema
import kubernetes_validate
from kubernetes_validate import utils
from referencing import Registry, Resource

LATEST = kubernetes_validate.latest_version()


def validate(obj: dict[str, Any], desired_version: str = LATEST) -> None:
    """Raise `kubernetes_validate.ValidationError` where `obj` breaks the strict schema of its
    kind in the newest Kubernetes release not newer than `desired_version` (its default: the
    newest kubernetes-validate knows)."""
    version = _release(desired_version)
    validator = _validator(version, obj["kind"], obj["apiVersion"])
    try:
        validator.validate(obj)
    except jsonschema.ValidationError as error:
        raise kubernetes_validate.ValidationError(error, utils.major_minor(version)) from None


@functools.cache
def _release(desired_version: str) -> str:
    """The newest release kubernetes-validate has a schema of, not newer than the one asked
    for (its own choice; it lists its schema folders on every call)."""
    wanted = utils.major_minor(desired_version.lstrip("v"))
    return [v for v in utils.all_versions() if utils.major_minor(v) <= wanted][-1]


@functools.cache
def _validator(version: str, kind: str, api_version: str) -> jsonschema.Validator:
    """kubernetes_validate.validate's validator for one kind, built once (its own steps)."""
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    directory = f"kubernetes-json-schema/v{version}-local-strict"
    if (kind, api_version) == ("Status", "v1"):  # (an API error: in the definitions alone)
        status = "https://kubernetes.io/api/_definitions.json#/$defs/"
        schema = {"$ref": status + "io.k8s.apimachinery.pkg.apis.meta.v1.Status"}
        registry = _definitions(directory, version) @ Registry()
        return jsonschema.validators.Draft202012Validator(schema, registry=registry)
    try:
        schema = utils.schema_contents(f"{directory}/{kind.lower()}-{group}.json", version)
    except FileNotFoundError:
        raise kubernetes_validate.SchemaNotFoundError(
            version=utils.major_minor(version), kind=kind, api_version=api_version
        ) from None
    definitions = _definitions(directory, version)
    registry = definitions @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


@functools.cache
def _definitions(directory: str, version: str) -> Resource:
    return Resource.from_contents(utils.schema_contents(f"{directory}/_definitions.json", version))
