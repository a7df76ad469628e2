"""A Python function shipped as a small program: its source, the module-level functions and
classes it uses (their source too), the modules it uses (imported) and the constants it reads
(written out), found by reading its code; then the call with the arguments file's keyword
arguments. What cannot travel (a closure, an object that is not a constant, a function whose
source is not available) is a ManifestError naming it."""

from __future__ import annotations

import ast
import builtins
import dis
import importlib
import inspect
import textwrap
import types
from collections.abc import Callable, Iterator
from typing import Any

from ...problems import ManifestError, Problem

MOUNT = "/aichor/function"  # where the program and its arguments are mounted
ARGUMENTS = f"{MOUNT}/args.json"  # the call's keyword arguments


def program(func: Callable[..., Any], source: str) -> str:
    """A Python module that defines `func` and what it needs, then calls it with the
    arguments file's keyword arguments."""
    if not isinstance(func, types.FunctionType) or func.__name__ == "<lambda>":
        reason = "give a function defined with `def` (its source travels, not the object)"
        raise ManifestError(source, [Problem("func", reason)])
    shipped = _Shipment(func.__module__, source)
    shipped.add(func)
    call = f"{func.__name__}(**json.load(open({ARGUMENTS!r})))"
    return "\n".join(
        [
            f"# {func.__module__}.{func.__qualname__}, shipped by aichor-iac",
            "from __future__ import annotations",
            "",
            "import json",
            *sorted(shipped.imports),
            *shipped.constants,
            "",
            *shipped.definitions,
            "",
            'if __name__ == "__main__":',
            f"    {call}",
            "",
        ]
    )


class _Shipment:
    """What a function needs from its module, gathered by reading its code (the global
    names it and its nested code objects load)."""

    def __init__(self, module: str, source: str) -> None:
        self.module, self.source = module, source
        self.imports: set[str] = set()
        self.constants: list[str] = []
        self.definitions: list[str] = []
        self.seen: set[int] = set()

    def fail(self, path: str, reason: str) -> ManifestError:
        return ManifestError(self.source, [Problem(path, reason)])

    def add(self, obj: Any) -> None:
        """`obj` (a function or class of the module) after what it uses."""
        if id(obj) in self.seen:
            return
        self.seen.add(id(obj))
        if isinstance(obj, types.FunctionType) and obj.__closure__:
            names = ", ".join(obj.__code__.co_freevars)
            raise self.fail(
                obj.__qualname__,
                f"uses {names} from the function around it, which cannot travel: define "
                "it at module level, or pass the value in `args`",
            )
        try:
            text = textwrap.dedent(inspect.getsource(obj))
        except (OSError, TypeError):
            raise self.fail(
                obj.__qualname__,
                "its source is not available (typed at an interactive prompt?): define it in "
                "a file or a notebook cell",
            ) from None
        for name in sorted(self._globals(obj) | _evaluated_names(ast.parse(text).body[0])):
            self._need(obj, name)
        self.definitions.append(text.rstrip() + "\n")

    def _globals(self, obj: Any) -> set[str]:
        """The global names `obj`'s code loads (its methods' too, for a class)."""
        if isinstance(obj, type):
            codes = [v.__code__ for v in vars(obj).values() if isinstance(v, types.FunctionType)]
            names = set()
            for base in obj.__bases__:
                if base.__module__ != "builtins":
                    names.add(base.__name__)
        else:
            codes, names = [obj.__code__], set()
        for code in codes:
            names |= set(_loaded_globals(code))
        return names

    def _need(self, user: Any, name: str) -> None:
        """What the global `name` that `user` reads becomes in the program: an import, a
        definition (its source), a constant, nothing (a builtin), or an error."""
        namespace = getattr(user, "__globals__", None) or vars(inspect.getmodule(user) or builtins)
        if name not in namespace:
            return  # a builtin, or a name Python itself would not find either
        value = namespace[name]
        module = getattr(value, "__module__", None)
        if isinstance(value, types.ModuleType):
            real = value.__name__
            self.imports.add(f"import {real}" if real == name else f"import {real} as {name}")
        elif isinstance(value, (types.FunctionType, type)) and module in (self.module, "__main__"):
            self.add(value)  # the user's own: its source travels
        elif module == "builtins":
            return
        elif _importable(value):  # another module's function, class or builtin function
            qualname = value.__qualname__
            alias = "" if qualname == name else f" as {name}"
            self.imports.add(f"from {module} import {qualname}{alias}")
        elif _literal(value):
            self.constants.append(f"{name} = {value!r}")
        else:
            reason = (
                "is not importable by name: define it at module level"
                if callable(value)
                else f"is a {type(value).__name__} object, which cannot travel to the replicas: "
                "create it inside the function, or pass it in `args`"
            )
            raise self.fail(f"{user.__qualname__}: {name}", reason)


def _importable(value: Any) -> bool:
    """Whether `from <its module> import <its name>` gives `value` back."""
    module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "." in qualname:
        return False
    if module == "__main__" or "<" in qualname:
        return False
    try:
        return getattr(importlib.import_module(module), qualname, None) is value
    except Exception:  # a module that cannot be imported here: not by name either
        return False


def _loaded_globals(code: types.CodeType) -> Iterator[str]:
    """The names `code` (and the code it nests) loads as globals."""
    for op in dis.get_instructions(code):
        if op.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
            yield str(op.argval)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _loaded_globals(const)


def _evaluated_names(node: ast.AST) -> set[str]:
    """The names a `def` or `class` statement evaluates when it runs: decorators, default
    values, base classes, a class body's statements. Functions' bodies are their code's
    (read by `_loaded_globals`); annotations are never evaluated (the program has
    `from __future__ import annotations`)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        arguments = node.args
        parts = [*getattr(node, "decorator_list", []), *arguments.defaults]
        parts += [d for d in arguments.kw_defaults if d is not None]
        return {n.id for part in parts for n in ast.walk(part) if isinstance(n, ast.Name)}
    if isinstance(node, ast.ClassDef):  # its decorators, bases, keywords and body
        children = [*node.decorator_list, *node.bases, *node.keywords, *node.body]
        return set().union(*(_evaluated_names(c) for c in children))
    if isinstance(node, ast.Name):
        return {node.id} if isinstance(node.ctx, ast.Load) else set()
    names: set[str] = set()
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, (ast.arg, ast.arguments)):
            names |= _evaluated_names(child)
    return names


def _literal(value: Any) -> bool:
    """Whether `value` is written out exactly by its repr (numbers, text, None, booleans, and
    tuples, lists, sets and dicts of those)."""
    try:
        return ast.literal_eval(repr(value)) == value
    except (ValueError, SyntaxError, RecursionError, TypeError):
        return False
