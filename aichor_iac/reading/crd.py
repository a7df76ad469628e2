"""A custom resource checked as the API server checks a create, before any door reads it: the
CRD's OpenAPI v3 schema of the operator's pinned release (`crds/`, made by
scripts/crd_schemas.py; each file names its source tag) with strict field validation, as
kubectl applies by default, then the CRD's CEL rules (`x-kubernetes-validations`) that apply on
create. What passes has the shape its door reads: every field of the type the schema gives.

As the API server does: `status` is not read (the status subresource resets it on create),
null fields that are not `nullable` are dropped, a required field with a default is defaulted
rather than missing. Problems come in the API server's words, at the user's path, with a fix.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

from ..problems import Problem, line_for
from . import cel, cel_rules, openapi
from .openapi import Invalid

CRDS = Path(__file__).resolve().parent / "crds"
INT_BOUNDS = {"int32": 2**31 - 1, "int64": 2**63 - 1}
# Required fields an operator's defaulting webhook fills before the schema is checked (JobSet
# v0.12.0 pkg/webhooks/jobset_webhook.go Default: a failure policy rule's name)
DEFAULTED = {"JobSet": re.compile(r"spec\.failurePolicy\.rules\.\d+\.name")}
# CEL rules declared above the fields they are about, and those fields in `self` (the API
# server names the rule's place; the user wrote the field): message -> paths of the fields
NARROWED: dict[str, Any] = {
    "StartupPolicy and DependsOn APIs are mutually exclusive": lambda spec: [
        f"replicatedJobs.{i}.dependsOn.0"
        for i, job in enumerate(spec.get("replicatedJobs") or [])
        if job.get("dependsOn")
    ],
    "namespace cannot be set for VolumeClaimPolicies templates": lambda policy: [
        f"templates.{i}.metadata.namespace"
        for i, template in enumerate(policy.get("templates") or [])
        if (template.get("metadata") or {}).get("namespace")
    ],
}
STRING_META: tuple[str, ...] = ("name", "generateName", "namespace", "uid", "resourceVersion")
STRING_META += ("selfLink", "creationTimestamp", "deletionTimestamp")
# The fields of ObjectMeta a file may give (the rest the API server sets; strict: unknown)
OBJECT_META = {
    "type": "object",
    "properties": {
        **{key: {"type": "string"} for key in STRING_META},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        "finalizers": {"type": "array", "items": {"type": "string"}},
        "generation": {"type": "integer", "format": "int64"},
        "ownerReferences": {"type": "array", "items": {"type": "object"}},
        "managedFields": {"type": "array", "items": {"type": "object"}},
        "deletionGracePeriodSeconds": {"type": "integer", "format": "int64"},
    },
}


class Schema(NamedTuple):
    """One CRD version's schema and where it was taken from (`github.com/<repo>@<tag>`)."""

    root: dict[str, Any]
    source: str
    kind: str

    @property
    def release(self) -> str:
        """The release's tag, or a commit's first 9 digits (a CRD of a branch: trainer
        main's OptimizationJob)."""
        tag = self.source.rsplit("@", 1)[-1]
        return tag[:9] if re.fullmatch(r"[0-9a-f]{40}", tag) else tag


@functools.cache
def _index() -> dict[tuple[str, str, str], Path]:
    """(API group, kind, tag) -> the file of its schema."""
    found = {}
    for path in CRDS.glob("*.json"):
        group, kind, tag = path.stem.split("_")
        found[group, kind, tag] = path
    return found


def releases(api_version: str, kind: str) -> list[str]:
    """The releases whose schema of `kind` is shipped, newest first."""
    group = api_version.split("/")[0]
    tags = [tag for g, k, tag in _index() if (g, k) == (group, kind)]
    return sorted(tags, key=lambda t: [int(p) for p in re.findall(r"\d+", t)], reverse=True)


@functools.cache
def schema(api_version: str, kind: str, release: str | None = None) -> Schema | None:
    """The schema the API server would check a create of `kind` in `api_version` against (the
    pinned release's, or `release`'s), or None when no shipped CRD serves it."""
    group, _, version = api_version.partition("/")
    tags = releases(api_version, kind)
    tag = release if release in tags else tags[0] if tags else None
    if tag is None:
        return None
    data = json.loads(_index()[group, kind, tag].read_text())
    root = data["versions"].get(version)
    if root is None:
        return None
    root = {**root, "properties": {**root["properties"], "metadata": OBJECT_META}}
    return Schema(_strict(root), data["source"], kind)


def pinned(data: dict[str, Any]) -> str | None:
    """A door's `release` where its kinds' pinned CRD checks every resource (None)."""
    return None


def unmoved(data: dict[str, Any]) -> Mapping[str, str]:
    """A door's `fixes` where no field of the version it reads has moved (none)."""
    return {}


def served(api_version: object, kind: object) -> bool:
    """Whether a shipped CRD serves `kind` in `api_version` (any YAML values)."""
    if not (isinstance(api_version, str) and isinstance(kind, str)):
        return False
    return schema(api_version, kind) is not None


def check(
    data: dict[str, Any],
    lines: dict,
    release: str | None = None,
    fixes: Mapping[str, str] | None = None,
) -> tuple[dict[str, Any], list[Problem]]:
    """The resource as the API server would store it (no status, no null fields), and every
    way it breaks its CRD's schema and CEL rules, each at its path and line with a fix (the
    door's own, from `fixes` by path, for an unknown field it knows the place of)."""
    found = schema(data["apiVersion"], data["kind"], release)
    assert found is not None, "check() is for a kind a shipped CRD serves (served())"
    written = _pruned({k: v for k, v in data.items() if k != "status"}, found.root)
    problems = _schema_problems(written, found, fixes or {})
    if not problems:
        problems = _cel_problems(written, found, _named(written))
    located = [
        Problem(p.path, p.message, line_for(tuple(p.path.split(".")), lines)) for p in problems
    ]
    return written, sorted(located, key=lambda p: (p.line or 0, p.path))


def _named(data: dict[str, Any]) -> dict[str, Any]:
    """The resource as CEL rules see it on create: a generateName completed, as the API server
    completes it before validation."""
    metadata = data.get("metadata") or {}
    if "name" in metadata or "generateName" not in metadata:
        return data
    return {**data, "metadata": {**metadata, "name": f"{metadata['generateName']}x2b7k"}}


# -- the schema as a strict JSON Schema (Draft 4, OpenAPI v3's base) -------------------------


def _strict(node: Any) -> Any:
    """A structural schema as Draft 4 checks it (openapi.py): an object's undeclared fields
    refused (the API server prunes them, and strict field validation refuses what it would
    prune) unless it preserves unknown fields; int-or-string as either type; a required field
    with a default not required (defaulting runs first); `nullable` as null allowed."""
    if isinstance(node, list):
        return [_strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strict(v) for k, v in node.items() if k not in ("default", "enum")}
    for key in ("default", "enum"):
        if key in node:
            out[key] = node[key]
    if node.get("x-kubernetes-int-or-string"):
        out.pop("anyOf", None)
        out["type"] = ["integer", "string"]
    if node.get("nullable") and "type" in out:
        out["type"] = [*([out["type"]] if isinstance(out["type"], str) else out["type"]), "null"]
    properties = node.get("properties") or {}
    if "required" in node:
        out["required"] = [r for r in node["required"] if "default" not in properties.get(r, {})]
        if not out["required"]:
            del out["required"]
    preserves = node.get("x-kubernetes-preserve-unknown-fields")
    if node.get("type") == "object" and not preserves and "additionalProperties" not in node:
        out["additionalProperties"] = False
    return out


def _pruned(value: Any, node: dict[str, Any]) -> Any:
    """`value` without the null fields the API server drops (those not `nullable`)."""
    if isinstance(value, dict):
        properties = node.get("properties") or {}
        other = node.get("additionalProperties")
        out = {}
        for key, item in value.items():
            sub = properties.get(key, other if isinstance(other, dict) else {})
            if item is None and not sub.get("nullable") and sub:
                continue
            out[key] = _pruned(item, sub)
        return out
    if isinstance(value, list):
        items = node.get("items")
        return [_pruned(item, items if isinstance(items, dict) else {}) for item in value]
    return value


def _list_type(checker: Any, kind: str, value: Any, node: Any, path: Any) -> Iterator[Invalid]:
    """`x-kubernetes-list-type`: a map list's keys and a set's items unique."""
    if kind not in ("map", "set") or not isinstance(value, list):
        return
    keys = node.get("x-kubernetes-list-map-keys", [])
    defaults = (node.get("items") or {}).get("properties") or {}
    seen: set[str] = set()
    for i, item in enumerate(value):
        if kind == "map" and not isinstance(item, dict):
            continue  # (its type is refused by `items`)
        key = (
            item
            if kind == "set"
            else {k: item.get(k, defaults.get(k, {}).get("default")) for k in keys}
        )
        text = json.dumps(key, sort_keys=True)
        if text in seen:
            yield Invalid((*path, i), "duplicate", node, value, f"Duplicate value: {text}")
        seen.add(text)


def _format(checker: Any, format: str, value: Any, node: Any, path: Any) -> Iterator[Invalid]:
    """The integer formats' bounds, and a date-time's form (no other format is checked)."""
    bound = INT_BOUNDS.get(format)
    if bound and isinstance(value, int) and not isinstance(value, bool):
        if not -bound - 1 <= value <= bound:
            message = f"should be between {-bound - 1} and {bound} ({format})"
            yield Invalid(path, "format", node, value, message)
    elif format == "date-time" and isinstance(value, str):
        try:
            datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            yield Invalid(path, "format", node, value, f"{value!r} is not a 'date-time'")


def _pattern(checker: Any, regex: str, value: Any, node: Any, path: Any) -> Iterator[Invalid]:
    if isinstance(value, str) and _regex(regex).search(value) is None:
        yield Invalid(path, "pattern", node, value, f"{value!r} does not match {regex!r}")


# Draft 4 with Kubernetes' keywords: list types, the integer formats' bounds, RE2 patterns
KEYWORDS = {"x-kubernetes-list-type": _list_type, "format": _format, "pattern": _pattern}


@functools.cache
def _regex(pattern: str) -> Any:
    """A schema's pattern as the API server matches it: RE2, as Go's regexp (linear time; `$`
    is the end of the text, never before a final line break as in Python's `re`)."""
    import re2

    return re2.compile(pattern)


def _schema_problems(
    data: dict[str, Any], found: Schema, fixes: Mapping[str, str]
) -> list[Problem]:
    checker = openapi.Checker(found.root, draft4=True, keywords=KEYWORDS)
    problems: list[Problem] = []
    for error in checker.errors(data):
        problems += _problems_of(error, found, fixes)
    defaulted = DEFAULTED.get(found.kind)
    if defaulted is not None:
        problems = [
            p
            for p in problems
            if not (p.message.startswith("Required") and defaulted.fullmatch(p.path))
        ]
    return sorted(set(problems), key=lambda p: (p.path, p.message))


def _problems_of(error: Invalid, found: Schema, fixes: Mapping[str, str]) -> list[Problem]:
    """One schema error in the API server's words (kube-openapi's), with a fix."""
    path = [str(p) for p in error.path]
    where = ".".join(path)
    kind, node, value = error.keyword, error.node, error.value
    against = f"{found.kind}'s schema, {found.release}"
    if kind == "additionalProperties":
        known = sorted(node.get("properties") or {})
        extra = [".".join([*path, str(k)]) for k in value if k not in known]
        return [
            Problem(
                field,
                f'unknown field "{field}" ({against}): '
                + fixes.get(field, _unknown_fix(field.rsplit(".", 1)[-1], known)),
            )
            for field in extra
        ]
    if kind == "required":
        missing = error.message.split("'")[1] if "'" in error.message else error.message
        return [Problem(".".join([*path, missing]), f"Required value ({against}): add it")]
    if kind == "type":
        wanted = node["type"] if isinstance(node["type"], str) else " or ".join(node["type"])
        message = (
            f"Invalid value: {_go_type(value)}: must be of type {wanted} ({against}): give "
            f"{_article(wanted)} {wanted}"
        )
        return [Problem(where, message)]
    if kind == "enum":
        allowed = ", ".join(json.dumps(v) for v in node["enum"])
        return [
            Problem(
                where,
                f"Unsupported value: {json.dumps(value)}: supported values: {allowed} ({against})",
            )
        ]
    if kind == "duplicate":  # (at the key, when one field is the key)
        keys = node.get("x-kubernetes-list-map-keys", [])
        at = f"{where}.{keys[0]}" if len(keys) == 1 else where
        return [Problem(at, f"{error.message} ({against}): give each item once")]
    if kind == "format":
        return [Problem(where, f"Invalid value: {_short(value)}: {error.message} ({against})")]
    if kind == "pattern" and node.get("x-kubernetes-int-or-string"):  # (a quantity's)
        reason = "must be a quantity such as 500m, 2 or 4Gi"
        return [Problem(where, f"Invalid value: {_short(value)}: {reason} ({against})")]
    bound = _BOUNDS.get(kind)
    if bound is not None:
        sentence = bound.format(limit=node.get(kind))
        return [Problem(where, f"Invalid value: {_short(value)}: {sentence} ({against})")]
    return [Problem(where, f"Invalid value: {_short(value)}: {error.message} ({against})")]


_BOUNDS = {
    "maxLength": "may not be longer than {limit} characters",
    "minLength": "should be at least {limit} characters long",
    "maximum": "should be less than or equal to {limit}",
    "minimum": "should be greater than or equal to {limit}",
    "maxItems": "must have at most {limit} items",
    "minItems": "should have at least {limit} items",
    "maxProperties": "must have at most {limit} fields",
    "minProperties": "should have at least {limit} fields",
    "pattern": "should match '{limit}'",
}


def _unknown_fix(key: str, known: list[str]) -> str:
    near = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if near:
        return f"did you mean '{near[0]}'?"
    if not known:
        return "this object has no fields: remove it"
    return f"remove it (known: {', '.join(known)})"


def _go_type(value: Any) -> str:
    """A value's type as the API server names it in a type error."""
    if isinstance(value, bool):
        return '"boolean"'
    if isinstance(value, int):
        return '"integer"'
    if isinstance(value, float):
        return '"number"'
    if isinstance(value, str):
        return '"string"'
    if isinstance(value, list):
        return '"array"'
    if value is None:
        return '"null"'
    return '"object"'


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else f"{text[:57]}..."


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


# -- CEL rules ---------------------------------------------------------------------------------


def _cel_problems(data: Any, found: Schema, named: dict[str, Any]) -> list[Problem]:
    """The CRD's CEL rules that a create can break (a rule on `oldSelf` only compares with a
    stored object), evaluated where they are declared, as the API server evaluates them."""
    problems: list[Problem] = []
    todo: list[tuple[Any, dict[str, Any], tuple[str, ...]]] = [(named, found.root, ())]
    while todo:
        value, node, path = todo.pop()
        for rule in node.get("x-kubernetes-validations", []):
            if "oldSelf" in rule["rule"] or (broken := _broken(rule["rule"], value)) is None:
                continue
            message = rule.get("message") or f"failed rule: {rule['rule']}"
            if broken:  # (the rule could not be evaluated: a field it reads is absent)
                message = f"{broken} evaluating rule: {message}"
            narrowed = NARROWED[message](value) if message in NARROWED else None
            problems += [
                Problem(
                    ".".join((*path, *sub.strip(".").split("."))).strip("."),
                    f"Invalid value: {_go_type(value)}: {message} ({found.kind}'s schema, "
                    f"{found.release})",
                )
                for sub in narrowed or [rule.get("fieldPath", "")]
            ]
        if isinstance(value, dict):
            properties = node.get("properties") or {}
            other = node.get("additionalProperties")
            for key, item in value.items():
                sub = properties.get(key, other if isinstance(other, dict) else None)
                if sub is not None:
                    todo.append((item, sub, (*path, str(key))))
        elif isinstance(value, list) and isinstance(node.get("items"), dict):
            todo += [(item, node["items"], (*path, str(i))) for i, item in enumerate(value)]
    return sorted(problems, key=lambda p: p.path)


def _broken(rule: str, value: Any) -> str | None:
    """None if a CEL rule holds for `value` as `self`; else "" (it does not), or why it could
    not be evaluated on it (a field it reads is absent), which the API server refuses too.
    The rule compiled at vendor time (cel_rules.py), else cel-python's evaluation of it."""
    compiled = cel_rules.RULES.get(rule)
    if compiled is None:
        return _interpreted(rule, _decoded(value))
    return cel.holds(compiled(_decoded(value)))


def _interpreted(rule: str, value: Any) -> str | None:
    """`_broken` by cel-python (which its compiled form is held to)."""
    import celpy

    try:
        holds = _program(rule).evaluate({"self": celpy.json_to_cel(value)})
    except celpy.CELEvalError as error:
        return str(error.args[0]) if error.args else "an evaluation error"
    return None if holds else ""


@functools.cache
def _program(rule: str) -> Any:
    environment = cel_environment()
    return environment.program(environment.compile(rule))


@functools.cache
def cel_environment() -> Any:
    """cel-python's environment (its Lark parser of CEL's grammar takes 0.3 s to build): for
    compiling the CRDs' rules at vendor time, and a rule not compiled (cel_rules.py)."""
    import celpy

    return celpy.Environment()


def _decoded(value: Any) -> Any:
    """A value as the API server decodes JSON for CEL: an integer past int64 a double."""
    if isinstance(value, dict):
        return {key: _decoded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_decoded(item) for item in value]
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 2**63:
        return float(value)
    return value
