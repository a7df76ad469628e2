"""Reading an input's text: bytes from a file or standard input, bounded, decoded, and its YAML
documents with the line of every key, refused before they grow (aliases, depth, size).
Below every front door: each door receives `Document`s and knows nothing of YAML.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..experiment.groups import CANONICAL_TYPE
from ..problems import ManifestError, Problem
from . import syntax

MAX_BYTES = 1024 * 1024  # a manifest's text (its objects are at most 1.5 MiB in etcd anyway)
MAX_NODES = 100_000  # keys and list items of a manifest, once YAML aliases are expanded
MAX_DEPTH = 64  # levels of nesting (a manifest needs fewer than 10)
# libyaml's parser (PyYAML's wheels have it) reads a manifest in a sixth of the time of PyYAML's
# own, which remains where PyYAML was built without it; both keep the nodes' lines.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class Document:
    """One YAML document of an input: its data, the line of each key by path, its first line."""

    data: Any
    lines: dict[tuple[str, ...], int]
    line: int


def read(path: str | Path) -> tuple[str, str]:
    """The text of a file, and its name for messages; `-` is standard input (as `kubectl
    apply -f -` reads it)."""
    stdin = str(path) == "-"
    path = Path("<stdin>") if stdin else Path(path)
    try:
        if stdin:
            data = sys.stdin.buffer.read(MAX_BYTES + 1)
        else:
            with path.open("rb") as file:
                data = file.read(MAX_BYTES + 1)  # never more: it may be endless (/dev/zero)
        _bounded(len(data), str(path))
        return data.decode("utf-8"), str(path)
    except OSError as error:
        raise ManifestError(str(path), [Problem("", f"cannot read: {error.strerror}")]) from None
    except UnicodeDecodeError as error:
        reason = f"not UTF-8 text (byte {error.object[error.start]:#04x} at offset {error.start})"
        raise ManifestError(str(path), [Problem("", reason)]) from None


def _bounded(size: int, source: str) -> None:
    if size > MAX_BYTES:
        reason = f"larger than {MAX_BYTES:,} bytes: a manifest is a few kilobytes"
        raise ManifestError(source, [Problem("", reason)])


def documents(text: str, source: str) -> list[Document]:
    """The YAML documents of a text (empty ones left out), or ManifestError: invalid YAML, a
    key given twice, a NUL, too deep or too large once aliases are expanded."""
    _bounded(len(text.encode("utf-8", "surrogatepass")), source)
    try:  # (parsed once: the nodes give the lines, then the data)
        nodes, lines, data = _parsed(text, source)
    except yaml.YAMLError as error:
        raise ManifestError(source, [_invalid(error, text)]) from None
    except UnicodeEncodeError as error:  # (a str from Python, not from a file's bytes)
        reason = f"not UTF-8 text (a lone surrogate at offset {error.start})"
        raise ManifestError(source, [Problem("", reason)]) from None
    except RecursionError:  # PyYAML's own composer recurses once per level
        raise ManifestError(source, [Problem("", f"nested more than {MAX_DEPTH} levels")]) from None
    return [  # an empty document (`---` then nothing) is no document
        Document(d, key_lines, n.start_mark.line + 1)
        for d, key_lines, n in zip(data, lines, nodes, strict=True)
        if d is not None
    ]


def _parsed(text: str, source: str) -> tuple[list[yaml.Node], list[dict], list[Any]]:
    """The text's YAML nodes, the line of each key, and the data, once the nodes' shape holds
    (the loader reads its first characters as it is made: it may refuse them at once)."""
    loader = _Loader(text)
    try:
        nodes: list[yaml.Node] = []
        while loader.check_node() and (node := loader.get_node()) is not None:
            nodes.append(node)
        problems = [p for n in nodes for p in _shape_problems(n)]  # before aliases expand
        if problems:
            raise ManifestError(source, problems)
        lines = [_key_lines(n) for n in nodes]  # (before a merge key `<<` is flattened)
        return nodes, lines, [loader.construct_document(n) for n in nodes]
    finally:
        loader.dispose()


def _invalid(error: yaml.YAMLError, text: str) -> Problem:
    """What YAML refused, on one line, at its line where it says."""
    mark = getattr(error, "problem_mark", None)
    line = mark.line + 1 if mark else None
    reason = getattr(error, "problem", None) or str(error)
    if "exceeded maximum nesting depth" in str(reason):  # libyaml's limit: 1,000 levels
        return Problem("", f"nested more than {MAX_DEPTH} levels")
    if isinstance(error, yaml.reader.ReaderError):  # a character YAML allows nowhere
        at = error.position  # libyaml counts the text's UTF-8 bytes, PyYAML's own characters
        before = (
            text[:at].encode("utf-8") if _Loader is yaml.SafeLoader else text.encode("utf-8")[:at]
        )
        line = before.count(b"\n") + 1
        reason = f"{error.reason} (character #x{error.character:04x})"
    elif mark is not None:  # (the parser's words, and often a line after the mistake)
        line, reason = syntax.explained(error, text)
    reason = " ".join(str(reason).split())
    if "{{" in text:  # a Helm chart's (or Go) template, not yet rendered
        reason += "; it looks like a template ({{ ... }}): render it first (helm template)"
    return Problem("", f"invalid YAML: {reason}", line)


def _shape_problems(root: yaml.Node | None) -> list[Problem]:
    """What YAML allows and a manifest must not have: a key given twice (YAML keeps the last
    silently; `Worker` and `worker` are the same type), NUL characters, deep nesting, and a
    document that grows past MAX_NODES once its aliases are expanded (an alias bomb).
    Iterative, and it stops counting at the limit, so no input makes it slow."""
    problems: list[Problem] = []
    todo: list[tuple[yaml.Node | None, tuple[str, ...]]] = [(root, ())]
    for _ in range(MAX_NODES + 1):
        if not todo:
            return problems
        node, path = todo.pop()
        if len(path) > MAX_DEPTH:
            return [Problem("", f"nested more than {MAX_DEPTH} levels")]
        if isinstance(node, yaml.MappingNode):
            first: dict[str, int] = {}
            for key, value in node.value:
                name = str(key.value)
                same = name.lower() if path[-1:] == ("types",) else name
                line = key.start_mark.line + 1
                if same in first:
                    where = ".".join((*path, name))
                    reason = f"given twice (also on line {first[same]}); keep one"
                    problems.append(Problem(where, reason, line))
                first.setdefault(same, line)
                todo.append((value, (*path, name)))
        elif isinstance(node, yaml.SequenceNode):
            todo += [(item, (*path, str(i))) for i, item in enumerate(node.value)]
        elif isinstance(node, yaml.ScalarNode) and "\0" in node.value:
            reason = "holds a NUL character, which no command, env value or name can hold"
            problems.append(Problem(".".join(path), reason, node.start_mark.line + 1))
    reason = f"too large: more than {MAX_NODES} keys and items once its YAML aliases are expanded"
    return [Problem("", reason)]


def _key_lines(node: yaml.Node | None, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], int]:
    """Line (1-based) of every key and list item in the YAML document, by path."""
    lines: dict[tuple[str, ...], int] = {}
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            sub = (*path, str(key.value))
            lines[sub] = key.start_mark.line + 1
            lines.update(_key_lines(value, sub))
            if path and path[-1] == "types":  # errors name fixed types canonically
                canonical = (*path, CANONICAL_TYPE.get(str(key.value).lower(), str(key.value)))
                if canonical != sub:
                    lines.setdefault(canonical, key.start_mark.line + 1)
                    lines.update(_key_lines(value, canonical))
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            sub = (*path, str(i))
            lines[sub] = item.start_mark.line + 1
            lines.update(_key_lines(item, sub))
    return lines
