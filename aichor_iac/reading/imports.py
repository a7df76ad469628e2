"""Third-party imports made lighter for a command's start-up (`validate` is called by editors
and hooks on every save): jsonschema without the format modules it would import, and
cel-python's parser loaded from Lark's own cache rather than built."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

# The modules jsonschema imports, where they are installed, to check formats of its own
# (`format-nongpl`, which Jupyter brings) and that cost the most: isoduration imports arrow,
# uri-template compiles its patterns, rfc3987-syntax builds 38 Lark grammars (1.5 s in all).
# No CRD's or Kubernetes kind's schema here uses those formats, and our format checkers check
# Kubernetes' integer formats only. (Not idna: the HTTP clients import it, maybe meanwhile.)
FORMAT_MODULES = (
    "isoduration",
    "rfc3339_validator",
    "rfc3986_validator",
    "rfc3987",
    "rfc3987_syntax",
    "uri_template",
    "webcolors",
)


def jsonschema() -> ModuleType:
    """jsonschema, imported without FORMAT_MODULES (once: later calls find it imported)."""
    with _without(FORMAT_MODULES):
        import jsonschema
        import jsonschema.exceptions

    return jsonschema


@contextlib.contextmanager
def _without(modules: tuple[str, ...]) -> Iterator[None]:
    """Imports that do without optional modules (each not imported yet is absent for them)."""
    absent = [m for m in modules if m not in sys.modules]
    # (None: an import of it fails, as the import system documents; typeshed has no None)
    sys.modules.update(dict.fromkeys(absent))  # type: ignore[arg-type]
    try:
        yield
    finally:
        for module in absent:
            del sys.modules[module]


@functools.cache
def cel_environment() -> Any:
    """cel-python's environment. Its parser is Lark's LALR parser of CEL's grammar, 0.3 s to
    build: cel-python builds it with Lark's own cache added (once per machine, then loaded;
    the file is keyed by the grammar, its options and Lark's and Python's versions, so a
    stale one is built again)."""
    import celpy
    from celpy import celparser

    cache = _parser_cache()
    if cache is None or celparser.CELParser.CEL_PARSER is not None:
        return celpy.Environment()
    names = vars(celparser)  # (cel-python passes Lark no cache, and takes no option for one)
    lark = names["Lark"]
    names["Lark"] = functools.partial(lark, cache=str(cache))
    try:
        return celpy.Environment()
    finally:
        names["Lark"] = lark


def _parser_cache() -> Path | None:
    """The file of the CEL parser in the user's cache directory (XDG's), or None where there is
    no such directory to write."""
    try:
        folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "aichor-iac"
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except (OSError, RuntimeError):  # (RuntimeError: no home directory)
        return None
    return folder / "cel-parser.lark"
