"""What the CRDs' CEL rules compile to (`cel_rules.py`, made by scripts/cel_compile.py at vendor
time): the operations of the CEL they use, on JSON values, as cel-python evaluates them, so that
a check needs neither cel-python nor its parser at start-up (a third of `validate`'s time).

As cel-python does: an evaluation error is a value (`Failed`) that an operation passes on, and
`||`, `&&`, `exists` and `all` absorb when the other side decides; `has()` of a field of
something absent is false. tests/reading/test_cel.py holds every compiled rule to cel-python.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

# cel-python's names of the JSON types, in the messages of a mismatch it reports
_TYPES = {
    bool: "BoolType",
    int: "IntType",
    float: "DoubleType",
    str: "StringType",
    list: "ListType",
    dict: "MapType",
    type(None): "NoneType",
}


class Failed:
    """An evaluation error, as a value: why (cel-python's words)."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message

    def __repr__(self) -> str:
        return f"Failed({self.message!r})"


def _cel_type(value: Any) -> str:
    if isinstance(value, Failed):
        return "<class 'celpy.evaluation.CELEvalError'>"
    return f"<class 'celpy.celtypes.{_TYPES.get(type(value), type(value).__name__)}'>"


def field(value: Any, name: str) -> Any:
    """`value.name`."""
    if isinstance(value, Failed):
        return value
    if isinstance(value, dict):
        return value[name] if name in value else Failed(f"no such member in mapping: {name!r}")
    return Failed(f"{_cel_type(value)} does not support field selection")


def has(value: Any, name: str) -> bool:
    """`has(value.name)`: false where `value` is not a map, or failed (cel-python's)."""
    return isinstance(value, dict) and name in value


def or_(left: Any, right: Any) -> Any:
    """`left || right`, commutative over errors."""
    return _logical("||", left, right, decides=True)


def and_(left: Any, right: Any) -> Any:
    """`left && right`, commutative over errors."""
    return _logical("&&", left, right, decides=False)


def _logical(operator: str, left: Any, right: Any, decides: bool) -> Any:
    lefts, rights = isinstance(left, bool), isinstance(right, bool)
    if lefts and rights:
        return left or right if decides else left and right
    if lefts:
        return left if left is decides else right
    if rights:
        return right if right is decides else left
    return Failed(
        f"found no matching overload for _{operator}_ applied to "
        f"'({_cel_type(left)}, {_cel_type(right)})'"
    )


def not_(value: Any) -> Any:
    """`!value`."""
    if isinstance(value, Failed):
        return value
    if isinstance(value, bool):
        return not value
    return Failed(f"found no matching overload for '!_' applied to '({_cel_type(value)})'")


def compare(operator: str, relation: str, left: Any, right: Any) -> Any:
    """`left <operator> right` (relation: its name in cel-python's grammar, for a mismatch)."""
    if isinstance(left, Failed):
        return left
    if isinstance(right, Failed):
        return right
    if not _comparable(operator, left, right):
        return Failed(
            f"found no matching overload for Token('RULE', {relation!r}) applied to "
            f"'({_cel_type(left)}, {_cel_type(right)})'"
        )
    return _COMPARISONS[operator](left, right)


def _comparable(operator: str, left: Any, right: Any) -> bool:
    """Whether cel-python compares the two: the left one's type decides (an int takes an int
    only, a bool a bool or int, a double a double, or an int to be ordered)."""
    if isinstance(left, bool):
        return isinstance(right, int)
    if isinstance(left, int):
        return isinstance(right, int) and not isinstance(right, bool)
    if isinstance(left, float):
        ordered = operator not in ("==", "!=")
        return isinstance(right, float) or (ordered and _is_int(right))
    return type(left) is type(right)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def in_(item: Any, container: Any) -> Any:
    """`item in container`: a mismatched member is skipped, unless nothing matches."""
    if isinstance(item, Failed):
        return item
    if isinstance(container, Failed):
        return container
    found: Any = False
    for member in container:
        if not _comparable("==", member, item):
            found = Failed("no such overload")
        elif member == item:
            return True
    return found


def size(value: Any) -> Any:
    """`size(value)` or `value.size()`."""
    if isinstance(value, Failed):
        return value
    if value is None:
        return 0
    if isinstance(value, (str, list, dict)):
        return len(value)
    return Failed(f"found no matching overload for 'size' applied to '({_cel_type(value)})'")


def double(value: Any) -> Any:
    """`double(value)`: as cel-python converts (a string as Python's `float` reads it)."""
    if isinstance(value, Failed):
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        return Failed("return error for overflow")


def matches(text: Any, pattern: Any) -> Any:
    """`text.matches(pattern)`: RE2's search, as the API server (and cel-python) match."""
    if isinstance(text, Failed):
        return text
    if isinstance(pattern, Failed):
        return pattern
    try:
        return _regex(pattern).search(text) is not None
    except Exception:  # (re2's error: a pattern RE2 refuses)
        return Failed("match error")


@functools.cache
def _regex(pattern: str) -> Any:
    import re2

    return re2.compile(pattern)


def exists(values: Any, predicate: Callable[[Any], Any]) -> Any:
    """`values.exists(x, predicate)`: true if any is, over errors."""
    return _reduce(values, predicate, or_, False)


def all_(values: Any, predicate: Callable[[Any], Any]) -> Any:
    """`values.all(x, predicate)`: false if any is not, over errors."""
    return _reduce(values, predicate, and_, True)


def _reduce(values: Any, predicate: Callable[[Any], Any], join: Any, start: bool) -> Any:
    if isinstance(values, Failed):
        return values
    result: Any = start
    for value in _members(values):
        item = predicate(value)
        # (cel-python joins two errors into this one)
        both = isinstance(result, Failed) and isinstance(item, Failed)
        result = Failed("no such overload") if both else join(result, item)
    return result


def filter_(values: Any, predicate: Callable[[Any], Any]) -> Any:
    """`values.filter(x, predicate)`: those it holds for (an error counts as true, as in
    cel-python)."""
    if isinstance(values, Failed):
        return values
    return [value for value in _members(values) if _truthy(predicate(value))]


def _truthy(value: Any) -> bool:
    return isinstance(value, Failed) or bool(value)


def _members(values: Any) -> Iterable[Any]:
    """What a macro iterates: a list's items, a map's keys."""
    return list(values) if isinstance(values, (list, dict)) else []


def holds(result: Any) -> str | None:
    """None if a rule's result is true, else "" (false) or why it could not be evaluated."""
    if isinstance(result, Failed):
        return result.message
    return None if result is True else ""
