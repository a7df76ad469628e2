"""A pydantic validation error as a `Problem` of the input: its path, a sentence a person can
act on (the allowed keys, a near miss), its line."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from ..experiment.groups import RULES, TYPE_NAMES, JobSetType, JobSetTypes, Types, types_model
from ..problems import Problem, line_for


def problem(
    error: Mapping[str, Any], lines: dict, root: type[BaseModel], operator: Any = None
) -> Problem:
    """A pydantic error as a problem of the document whose model is `root`: its path, a
    sentence, its line. `operator` picks the model of an experiment's `types`."""
    loc = tuple(str(part) for part in error["loc"])
    kind, message = error["type"], error["msg"]
    if kind == "extra_forbidden":
        *parent, key = loc
        allowed = allowed_keys(tuple(parent), root, operator)
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
    elif (wanted := _wanted(kind)) is not None:
        message = f"must be {wanted[0]}, not {_given(error.get('input'))}: {wanted[1]}"
    return Problem(".".join(loc), message, line_for(loc, lines))


# pydantic's type errors (`<type>_type`, `<type>_parsing`): what the field takes, and the fix,
# worded as the custom resources' doors word a schema's type error
WANTED = {
    "int": ("an integer", "give a whole number, unquoted"),
    "int_from_float": ("an integer", "give a whole number, without a fraction"),
    "float": ("a number", "give a number, unquoted"),
    "bool": ("true or false", "give true or false, unquoted"),
    "string": ("text", "give text (quote it to keep it text: '...')"),
    "dict": ("a mapping", "give 'key: value' lines, indented under it"),
    "model": ("a mapping", "give 'key: value' lines, indented under it"),
    "model_attributes": ("a mapping", "give 'key: value' lines, indented under it"),
    "list": ("a list", "give '- item' lines, indented under it"),
    "tuple": ("a list", "give '- item' lines, indented under it"),
}


def _wanted(kind: str) -> tuple[str, str] | None:
    return WANTED.get(kind) or WANTED.get(kind.removesuffix("_type").removesuffix("_parsing"))


def _given(value: Any) -> str:
    """A value as the user wrote it, and its kind."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"{str(value).lower()} (true or false)"
    if isinstance(value, int | float):
        return f"{value} (a number)"
    if isinstance(value, str):
        return f"{value[:40]!r} (text)"
    return "a list" if isinstance(value, list) else "a mapping"


def _did_you_mean(key: str, allowed: list[str]) -> str:
    by_lower = {a.lower(): a for a in allowed}
    matches = difflib.get_close_matches(key.lower(), list(by_lower), n=1, cutoff=0.6)
    if matches:
        return f"; did you mean '{by_lower[matches[0]]}'?"
    return f"; allowed keys: {', '.join(allowed)}" if allowed else ""


def allowed_keys(loc: tuple[str, ...], root: type[BaseModel], operator: Any = None) -> list[str]:
    """The keys the model at `loc` accepts (walks the model tree along the error path)."""
    model: Any = root
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
