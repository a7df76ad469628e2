"""The OpenAPI schemas shipped here checked as jsonschema checks them: a CRD's structural schema
(Draft 4, with Kubernetes' keywords: crd.py's) and Kubernetes' strict schemas of its kinds
(Draft 2020-12, `$ref`s into one file of definitions: podtemplate.py's). The keywords those
schemas use, walked over the value only, without jsonschema and the libraries it imports
(40 ms, a sixth of every `validate` of a custom resource). tests/reading/test_openapi.py holds
it to jsonschema: the same errors, at the same places, in the same words, on every file of the
suite and on values made from each schema.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Path = tuple[str | int, ...]


@dataclass(frozen=True)
class Invalid:
    """One way a value breaks its schema: where (`path`, in the value), which keyword of
    which schema node, the value there, and why (jsonschema's words)."""

    path: Path
    keyword: str
    node: Mapping[str, Any]
    value: Any
    message: str

    def order(self) -> tuple[str, str, str]:
        """A stable order of a check's errors (why first, as jsonschema's text sorts)."""
        return self.message, self.keyword, ".".join(map(str, self.path))


# A keyword's check: (the checker, the keyword's argument, the value, its node, its path)
Keyword = Callable[["Checker", Any, Any, Mapping[str, Any], Path], Iterator[Invalid]]


class Checker:
    """A schema's checker. `draft4`: Draft 4's rules (a `$ref` hides its siblings; an integer
    is never a float); else Draft 2020-12's. `definitions`: what a `$ref` names (`#/$defs/X`,
    in this file or another). `keywords`: more keywords, or other checks of one (None: not
    checked, as `format` is where no format checker is given)."""

    def __init__(
        self,
        root: Mapping[str, Any],
        draft4: bool,
        definitions: Mapping[str, Any] | None = None,
        keywords: Mapping[str, Keyword | None] | None = None,
    ) -> None:
        self.root, self.draft4 = root, draft4
        self.definitions = definitions or {}
        self.keywords = {**KEYWORDS, **(keywords or {})}

    def errors(self, value: Any) -> list[Invalid]:
        """Every way `value` breaks the schema."""
        return list(self.descend(value, self.root, ()))

    def valid(self, value: Any, node: Mapping[str, Any]) -> bool:
        return next(self.descend(value, node, ()), None) is None

    def descend(self, value: Any, node: Mapping[str, Any], path: Path) -> Iterator[Invalid]:
        if self.draft4 and "$ref" in node:
            yield from self.descend(value, self._resolved(node["$ref"]), path)
            return
        for keyword, argument in node.items():
            if (check := self.keywords.get(keyword)) is not None:
                yield from check(self, argument, value, node, path)

    def _resolved(self, ref: str) -> Mapping[str, Any]:
        _, _, name = ref.partition("#/$defs/")
        return self.definitions[name]

    def is_type(self, value: Any, kind: str) -> bool:
        if kind == "integer" and not self.draft4 and isinstance(value, float):
            return value.is_integer()
        return _TYPES[kind](value)


_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
}


def _ref(checker: Checker, ref: str, value: Any, node: Any, path: Path) -> Iterator[Invalid]:
    yield from checker.descend(value, checker._resolved(ref), path)


def _type(checker: Checker, types: Any, value: Any, node: Any, path: Path) -> Iterator[Invalid]:
    kinds = [types] if isinstance(types, str) else types
    if not any(checker.is_type(value, kind) for kind in kinds):
        named = ", ".join(repr(kind) for kind in kinds)
        yield Invalid(path, "type", node, value, f"{value!r} is not of type {named}")


def _properties(checker: Checker, properties: Any, value: Any, node: Any, path: Path) -> Any:
    if isinstance(value, dict):
        for key, sub in properties.items():
            if key in value:
                yield from checker.descend(value[key], sub, (*path, key))


def _additional(checker: Checker, other: Any, value: Any, node: Any, path: Path) -> Any:
    if not isinstance(value, dict):
        return
    extras = [key for key in value if key not in node.get("properties", {})]
    if isinstance(other, dict):
        for key in extras:
            yield from checker.descend(value[key], other, (*path, key))
    elif other is False and extras:
        named = sorted(extras, key=str)
        verb = "was" if len(named) == 1 else "were"
        listed = ", ".join(repr(key) for key in named)
        message = f"Additional properties are not allowed ({listed} {verb} unexpected)"
        yield Invalid(path, "additionalProperties", node, value, message)


def _items(checker: Checker, items: Any, value: Any, node: Any, path: Path) -> Iterator[Invalid]:
    if isinstance(value, list) and isinstance(items, dict):
        for index, item in enumerate(value):
            yield from checker.descend(item, items, (*path, index))


def _required(checker: Checker, required: Any, value: Any, node: Any, path: Path) -> Any:
    if isinstance(value, dict):
        for key in required:
            if key not in value:
                yield Invalid(path, "required", node, value, f"{key!r} is a required property")


def _enum(checker: Checker, allowed: Any, value: Any, node: Any, path: Path) -> Any:
    if not any(equal(each, value) for each in allowed):
        yield Invalid(path, "enum", node, value, f"{value!r} is not one of {allowed!r}")


def equal(one: Any, two: Any) -> bool:
    """JSON's equality (jsonschema's): a boolean is not a number, in lists and maps too."""
    if isinstance(one, str) or isinstance(two, str):
        return bool(one == two)
    if isinstance(one, list) and isinstance(two, list):
        return len(one) == len(two) and all(map(equal, one, two))
    if isinstance(one, dict) and isinstance(two, dict):
        return one.keys() == two.keys() and all(equal(one[k], two[k]) for k in one)
    if isinstance(one, bool) or isinstance(two, bool):
        return one is two
    return bool(one == two)


def _pattern(checker: Checker, regex: str, value: Any, node: Any, path: Path) -> Any:
    if isinstance(value, str) and _python_regex(regex).search(value) is None:
        yield Invalid(path, "pattern", node, value, f"{value!r} does not match {regex!r}")


@functools.cache
def _python_regex(pattern: str) -> Any:
    import re

    return re.compile(pattern)


def _any_of(checker: Checker, options: Any, value: Any, node: Any, path: Path) -> Any:
    if not any(checker.valid(value, option) for option in options):
        message = f"{value!r} is not valid under any of the given schemas"
        yield Invalid(path, "anyOf", node, value, message)


def _one_of(checker: Checker, options: Any, value: Any, node: Any, path: Path) -> Any:
    valid = [option for option in options if checker.valid(value, option)]
    if not valid:
        message = f"{value!r} is not valid under any of the given schemas"
        yield Invalid(path, "oneOf", node, value, message)
    elif len(valid) > 1:  # (jsonschema names the others, then the first valid one)
        named = ", ".join(repr(option) for option in (*valid[1:], valid[0]))
        yield Invalid(path, "oneOf", node, value, f"{value!r} is valid under each of {named}")


def _all_of(checker: Checker, options: Any, value: Any, node: Any, path: Path) -> Any:
    for option in options:
        yield from checker.descend(value, option, path)


def _bound(
    keyword: str, applies: str, fails: Callable[[Any, Any, Mapping[str, Any]], str | None]
) -> Keyword:
    """A keyword that bounds a value of type `applies`: `fails` says why it breaks it."""

    def check(checker: Checker, limit: Any, value: Any, node: Any, path: Path) -> Any:
        if checker.is_type(value, applies) and (why := fails(value, limit, node)):
            yield Invalid(path, keyword, node, value, f"{value!r} {why}")

    return check


def _minimum(value: Any, limit: Any, node: Mapping[str, Any]) -> str | None:
    exclusive = node.get("exclusiveMinimum", False)
    if value <= limit if exclusive else value < limit:
        cmp = "less than or equal to" if exclusive else "less than"
        return f"is {cmp} the minimum of {limit!r}"
    return None


def _maximum(value: Any, limit: Any, node: Mapping[str, Any]) -> str | None:
    exclusive = node.get("exclusiveMaximum", False)
    if value >= limit if exclusive else value > limit:
        cmp = "greater than or equal to" if exclusive else "greater than"
        return f"is {cmp} the maximum of {limit!r}"
    return None


def _at_least(one: str, more: str) -> Callable[[Any, Any, Any], str | None]:
    return lambda value, limit, _: (one if limit == 1 else more) if len(value) < limit else None


def _at_most(none: str, more: str) -> Callable[[Any, Any, Any], str | None]:
    return lambda value, limit, _: (none if limit == 0 else more) if len(value) > limit else None


KEYWORDS: dict[str, Keyword | None] = {
    "$ref": _ref,
    "type": _type,
    "properties": _properties,
    "additionalProperties": _additional,
    "items": _items,
    "required": _required,
    "enum": _enum,
    "pattern": _pattern,
    "anyOf": _any_of,
    "oneOf": _one_of,
    "allOf": _all_of,
    "minimum": _bound("minimum", "number", _minimum),
    "maximum": _bound("maximum", "number", _maximum),
    "minLength": _bound("minLength", "string", _at_least("should be non-empty", "is too short")),
    "maxLength": _bound("maxLength", "string", _at_most("is expected to be empty", "is too long")),
    "minItems": _bound("minItems", "array", _at_least("should be non-empty", "is too short")),
    "maxItems": _bound("maxItems", "array", _at_most("is expected to be empty", "is too long")),
    "minProperties": _bound(
        "minProperties",
        "object",
        _at_least("should be non-empty", "does not have enough properties"),
    ),
    "maxProperties": _bound(
        "maxProperties", "object", _at_most("is expected to be empty", "has too many properties")
    ),
}


# The keywords whose values are schemas (the others' are data: enum, default, required...)
SCHEMAS = ("additionalProperties", "items", "anyOf", "oneOf", "allOf", "not")
NAMED = ("properties", "$defs", "definitions")  # (a map of names to schemas)


def unknown_keywords(root: Any, known: Sequence[str]) -> set[str]:
    """The keywords of a schema that neither KEYWORDS nor `known` (checked elsewhere, or
    ignored on purpose) name: a schema newly vendored that uses one is refused by the tests."""
    found: set[str] = set()
    todo = [root]
    while todo:
        node = todo.pop()
        if isinstance(node, list):
            todo += node
        elif isinstance(node, dict):
            found |= {key for key in node if key not in KEYWORDS and key not in known}
            todo += [node[key] for key in SCHEMAS if isinstance(node.get(key), dict | list)]
            todo += [sub for key in NAMED for sub in (node.get(key) or {}).values()]
    return found
