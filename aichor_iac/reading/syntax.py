"""YAML's syntax errors in the project's words: the line of the mistake, what it is (a tab, an
indentation, a quote or bracket never closed, a value that reads as a key) and the fix, then
YAML's own words in parentheses. The parser stops where it can no longer read, which is often
a line after the mistake: the lines around it tell which."""

from __future__ import annotations

import itertools
import re
from typing import Any

KEY = re.compile(r"^(\s*)(?:-\s+)?([^\s#:'\"][^:#]*?):(?:\s|$)")


def explained(error: Any, text: str) -> tuple[int | None, str]:
    """(line, sentence) for a `yaml.MarkedYAMLError` of `text`; the line is 1-based."""
    mark, context = getattr(error, "problem_mark", None), getattr(error, "context_mark", None)
    problem = " ".join(str(getattr(error, "problem", "") or error).split())
    lines = text.splitlines()
    said = f"({problem})"
    if mark is None:
        return None, problem
    at = mark.line
    tab = _tab(lines, at, mark.column)
    if tab is not None:
        return tab + 1, f"a tab character: YAML indents with spaces only: use spaces {said}"
    if "quoted scalar" in str(getattr(error, "context", "")) and context is not None:
        return context.line + 1, f"a quote opened on this line is never closed: close it {said}"
    if "expected ',' or" in problem or "flow" in str(getattr(error, "context", "")):
        opened = _opener(lines, at, mark.column)
        return (at if opened is None else opened) + 1, (
            "this [ or { is never closed, or two of its items have no comma between them: "
            f"close it, or put a comma between items {said}"
        )
    if "expected '-' indicator" in problem:
        return at + 1, (
            "a key beside the items of a list ('- ...'): a list holds items only: make it an "
            f"item ('- {_key(lines[at]) or 'key'}: ...') or indent it under one {said}"
        )
    if "mapping values are not allowed" in problem:
        return _mapping_value(lines, at, said)
    if "expected key" in problem or "expected <block end>" in problem:
        return _indentation(lines, at, said)
    if "end of stream" in problem and context is not None:
        return context.line + 1, f"this is never closed before the file ends: close it {said}"
    return at + 1, problem


def _tab(lines: list[str], line: int, column: int) -> int | None:
    """The line of a tab that breaks the YAML at `line` (there, or where it began)."""
    for number in (line, line - 1):
        if 0 <= number < len(lines):
            indent = lines[number][: len(lines[number]) - len(lines[number].lstrip())]
            if "\t" in indent or (number == line and lines[number][column : column + 1] == "\t"):
                return number
    return None


def _opener(lines: list[str], line: int, column: int) -> int | None:
    """The line of the last [ or { still open at (line, column), outside quotes and comments."""
    opened: list[int] = []
    for number, text in enumerate(lines[: line + 1]):
        quote = None
        for char in text[:column] if number == line else text:
            if quote:
                quote = None if char == quote else quote
            elif char in "'\"":
                quote = char
            elif char == "#":
                break
            elif char in "[{":
                opened.append(number)
            elif char in "]}" and opened:
                opened.pop()
    return opened[-1] if opened else None


def _key(line: str) -> str | None:
    found = KEY.match(line)
    return found[2].strip() if found else None


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _above(lines: list[str], line: int) -> int | None:
    """The nearest line above `line` with YAML on it (not blank, not a comment)."""
    for number in range(min(line, len(lines)) - 1, -1, -1):
        if lines[number].strip() and not lines[number].lstrip().startswith("#"):
            return number
    return None


def _mapping_value(lines: list[str], at: int, said: str) -> tuple[int, str]:
    """A `key:` YAML found where it cannot be: in a value, after a key with no space after its
    colon, or indented under a key whose value is given already."""
    line = lines[at] if at < len(lines) else ""
    key = _key(line)
    rest = line.split(":", 1)[1] if key is not None else line
    if ": " in rest or rest.rstrip().endswith(":"):
        return at + 1, (
            f"the value of '{key}' holds ': ', which YAML reads as another key: quote the "
            f"value ('...') {said}"
        )
    above = _above(lines, at)
    if above is not None and re.search(r"^\s*[^\s:#'\"]+:[^\s/]", lines[above]):
        return above + 1, f"a key needs a space after its colon ('key: value') {said}"
    if above is not None and _indent(line) > _indent(lines[above]):
        return at + 1, (
            f"indented more than '{_key(lines[above]) or lines[above].strip()}' (line "
            f"{above + 1}), which has its value already: indent it as the keys beside it {said}"
        )
    return at + 1, f"a key where YAML cannot take one here: check its indentation {said}"


def _indentation(lines: list[str], at: int, said: str) -> tuple[int, str]:
    """A line whose indentation lines up with no key above it: it, or the line above it
    (indented deeper than its siblings), is the mistake."""
    above = _above(lines, at)
    line = lines[at] if at < len(lines) else ""
    if above is None:
        return at + 1, f"this line's indentation lines up with no key: check it {said}"
    here, there = _indent(line), _indent(lines[above])
    parent = _above(lines, above)
    while parent is not None and _indent(lines[parent]) >= there:
        parent = _above(lines, parent)
    if parent is not None and there > here and here - _indent(lines[parent]) == _step(lines):
        return above + 1, (  # (`here` sits one step under the parent: the line above does not)
            f"indented {there} spaces, more than the key after it (line {at + 1}, indented "
            f"{here}): indent the keys of one map alike {said}"
        )
    return at + 1, (
        f"indented {here} spaces, which lines up with no key above it (line {above + 1} is "
        f"indented {there}): indent the keys of one map alike {said}"
    )


def _step(lines: list[str]) -> int:
    """The file's usual indentation step (the smallest deeper indentation after a key)."""
    steps = [
        _indent(b) - _indent(a)
        for a, b in itertools.pairwise(lines)
        if a.strip() and b.strip() and _indent(b) > _indent(a)
    ]
    return min(steps, default=2)
