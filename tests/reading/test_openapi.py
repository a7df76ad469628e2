"""The OpenAPI checks without jsonschema (aichor_iac/reading/openapi.py) held to jsonschema:
for a CRD's structural schema (Draft 4 with Kubernetes' keywords, as crd.py checked it with
jsonschema before) and Kubernetes' strict schemas of its kinds (Draft 2020-12 with `$ref`s),
the same errors — place, keyword and words — on every custom resource file of the suite, and
on values made from each schema, right and wrong."""

from __future__ import annotations

import functools
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft4Validator, Draft202012Validator, FormatChecker, validators
from jsonschema.exceptions import ValidationError
from referencing import Registry, Resource

from aichor_iac.reading import crd, openapi, podtemplate

KUBERNETES = ROOT / "aichor_iac/reading/kubernetes"
# Keywords checked elsewhere (crd.py's format, list types; CEL) or not checked, as jsonschema
# does not check them either (annotations, Kubernetes' own markers)
IGNORED = {
    "format",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-validations",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-map-type",
    "x-kubernetes-group-version-kind",
    "x-kubernetes-patch-strategy",
    "x-kubernetes-patch-merge-key",
    "x-kubernetes-unions",
    "nullable",
    "default",
    "description",
    "$id",
    "$schema",
    "$defs",
}
CRD_FILES = sorted(ROOT.glob("aichor_iac/reading/crds/*.json"))
KINDS = sorted(p.stem for p in KUBERNETES.glob("*-*.json"))


# -- the reference: jsonschema, as crd.py and podtemplate.py used it ----------------------------


@functools.cache
def reference_crd_class() -> Any:
    def list_type(validator, kind, instance, node):
        if kind not in ("map", "set") or not isinstance(instance, list):
            return
        keys = node.get("x-kubernetes-list-map-keys", [])
        defaults = (node.get("items") or {}).get("properties") or {}
        seen: set[str] = set()
        for i, item in enumerate(instance):
            if kind == "map" and not isinstance(item, dict):
                continue
            key = (
                item
                if kind == "set"
                else {k: item.get(k, defaults.get(k, {}).get("default")) for k in keys}
            )
            text = json.dumps(key, sort_keys=True)
            if text in seen:
                yield ValidationError(f"Duplicate value: {text}", path=[i], validator="duplicate")
            seen.add(text)

    checker = FormatChecker(())

    @checker.checks("date-time", raises=ValueError)
    def _date_time(value):
        if isinstance(value, str):
            datetime.fromisoformat(value.replace("Z", "+00:00"))
        return True

    def integer_format(validator, format, instance, node):
        bound = crd.INT_BOUNDS.get(format)
        if bound and isinstance(instance, int) and not isinstance(instance, bool):
            if not -bound - 1 <= instance <= bound:
                yield ValidationError(
                    f"should be between {-bound - 1} and {bound} ({format})", validator="format"
                )
        elif not bound:
            yield from Draft4Validator.VALIDATORS["format"](validator, format, instance, node)

    def pattern(validator, regex, instance, node):
        if isinstance(instance, str) and crd._regex(regex).search(instance) is None:
            yield ValidationError(f"{instance!r} does not match {regex!r}", validator="pattern")

    keywords = {"x-kubernetes-list-type": list_type, "format": integer_format, "pattern": pattern}
    return validators.extend(Draft4Validator, keywords), checker


def reference_crd_errors(root: dict, value: Any) -> set[tuple]:
    cls, checker = reference_crd_class()
    return {_key(e) for e in cls(root, format_checker=checker).iter_errors(value)}


@functools.cache
def reference_kind(name: str) -> Any:
    schema = json.loads((KUBERNETES / f"{name}.json").read_text())
    definitions = json.loads((KUBERNETES / "_definitions.json").read_text())
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return Draft202012Validator(schema, registry=registry)


def _key(error: Any) -> tuple:
    if isinstance(error, openapi.Invalid):
        return error.path, error.keyword, error.message
    return tuple(error.absolute_path), error.validator, error.message


def ours_crd(root: dict, value: Any) -> set[tuple]:
    checker = openapi.Checker(root, draft4=True, keywords=crd.KEYWORDS)
    return {_key(e) for e in checker.errors(value)}


# -- values made from a schema, right and wrong -------------------------------------------------

WRONG = st.sampled_from([None, 0, -1, 1.5, 2**40, "", "x", True, [], {}, {"unknownField": 1}])
STRINGS = st.sampled_from(
    ["", "a", "Always", "1", "500m", "2Gi", "a-b", "A_B", "2024-01-01T00:00:00Z"]
)


def values(node: dict, resolve: Any, depth: int = 0) -> st.SearchStrategy:
    """Values of a schema node, its object's required fields and up to three others, to a
    depth of 5; at each node, sometimes a value of another type."""
    if "$ref" in node:
        node = resolve(node["$ref"])
    return st.one_of(_right(node, resolve, depth), WRONG) if depth else _right(node, resolve, 0)


def _right(node: dict, resolve: Any, depth: int) -> st.SearchStrategy:
    if "enum" in node:
        return st.sampled_from(node["enum"])
    kinds = node.get("type") or ["object"]
    kinds = [kinds] if isinstance(kinds, str) else [k for k in kinds if k != "null"] or ["null"]
    return st.one_of(*[_of(kind, node, resolve, depth) for kind in kinds])


def _of(kind: str, node: dict, resolve: Any, depth: int) -> st.SearchStrategy:
    if kind == "string":
        return STRINGS | st.text(max_size=4)
    if kind in ("integer", "number"):
        return st.integers(-3, 70) | st.sampled_from([2**31, 2**63, -(2**63) - 1, 0.5, 2.0])
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        items = node.get("items")
        if depth >= 5 or not isinstance(items, dict):
            return st.just([])
        return st.lists(values(items, resolve, depth + 1), max_size=3)
    properties = node.get("properties") or {}
    if depth >= 5 or not properties:
        return st.just({}) | st.just({"k": "v"})
    required = [k for k in node.get("required", []) if k in properties]

    def made(keys: list[str]) -> st.SearchStrategy:
        chosen = dict.fromkeys([*required, *keys])
        return st.fixed_dictionaries({k: values(properties[k], resolve, depth + 1) for k in chosen})

    return st.lists(st.sampled_from(sorted(properties)), max_size=3, unique=True).flatmap(made)


# -- the tests ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [*CRD_FILES, *sorted(KUBERNETES.glob("*.json"))], ids=str)
def test_every_keyword_a_shipped_schema_uses_is_checked_or_ignored_on_purpose(path: Path):
    data = json.loads(path.read_text())
    roots = data["versions"].values() if "versions" in data else [data]
    for root in roots:
        assert openapi.unknown_keywords(root, sorted(IGNORED)) == set()


def _custom_resources() -> list[tuple[str, dict]]:
    found = []
    for path in sorted(ROOT.glob("tests/**/*.yaml")) + sorted(ROOT.glob("examples/**/*.yaml")):
        try:
            documents = list(yaml.load_all(path.read_text(), Loader=yaml.CSafeLoader))  # (fast)
        except yaml.YAMLError:
            continue
        for data in documents:
            if isinstance(data, dict) and crd.served(data.get("apiVersion"), data.get("kind")):
                found.append((str(path.relative_to(ROOT)), data))
    return found


CUSTOM_RESOURCES = _custom_resources()


def test_every_custom_resource_file_of_the_suite_gets_jsonschemas_errors():
    assert len(CUSTOM_RESOURCES) > 150
    differ = []
    for where, data in CUSTOM_RESOURCES:
        found = crd.schema(data["apiVersion"], data["kind"])
        written = crd._pruned({k: v for k, v in data.items() if k != "status"}, found.root)
        if ours_crd(found.root, written) != reference_crd_errors(found.root, written):
            differ.append(where)
    assert differ == []


def _pod_templates(value: Any) -> list[dict]:
    if isinstance(value, list):
        return [t for item in value for t in _pod_templates(item)]
    if not isinstance(value, dict):
        return []
    here = (
        [value]
        if isinstance((value.get("spec") or {}), dict) and "containers" in (value.get("spec") or {})
        else []
    )
    return here + [t for item in value.values() for t in _pod_templates(item)]


def test_every_pod_template_of_the_suite_gets_jsonschemas_errors():
    templates = [t for _, data in CUSTOM_RESOURCES for t in _pod_templates(data)]
    assert len(templates) > 150
    for template in templates:
        whole = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}}
        whole["template"] = template
        ours = {_key(e) for e in podtemplate.validator("podtemplate-v1").errors(whole)}
        assert ours == {_key(e) for e in reference_kind("podtemplate-v1").iter_errors(whole)}


@pytest.mark.parametrize("path", CRD_FILES, ids=lambda p: p.stem)
def test_a_crds_schema_gives_jsonschemas_errors_on_values_made_from_it(path: Path):
    group, kind, tag = path.stem.split("_")
    version = next(iter(json.loads(path.read_text())["versions"]))
    root = crd.schema(f"{group}/{version}", kind, tag).root

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(values(root, None))
    def same(value):
        assert ours_crd(root, value) == reference_crd_errors(root, value)

    same()


@pytest.mark.parametrize("name", KINDS)
def test_a_kinds_schema_gives_jsonschemas_errors_on_values_made_from_it(name: str):
    definitions = podtemplate._definitions()["$defs"]
    root = json.loads((KUBERNETES / f"{name}.json").read_text())

    def resolve(ref: str) -> dict:
        return definitions[ref.partition("#/$defs/")[2]]

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(values(root, resolve))
    def same(value):
        ours = {_key(e) for e in podtemplate.validator(name).errors(value)}
        assert ours == {_key(e) for e in reference_kind(name).iter_errors(value)}

    same()
