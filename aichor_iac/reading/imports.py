"""Third-party imports made lighter for a command's start-up (`validate` is called by editors
and hooks on every save): jsonschema without the format modules it would import; cel-python
only where a CEL rule was not compiled at vendor time (cel_rules.py)."""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Iterator
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
    """cel-python's environment (its Lark parser of CEL's grammar takes 0.3 s to build): for
    compiling the CRDs' rules at vendor time, and a rule not compiled (cel_rules.py)."""
    import celpy

    return celpy.Environment()
