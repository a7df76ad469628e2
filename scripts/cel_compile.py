"""Compile the CEL rules (`x-kubernetes-validations`) of the CRDs in aichor_iac/reading/crds/
into Python, aichor_iac/reading/cel_rules.py, on the operations of aichor_iac/reading/cel.py:
a check then needs neither cel-python nor its grammar at start-up. crd_schemas.py runs this
after it writes the schemas; tests/reading/test_cel.py holds the output to it and every compiled
rule to cel-python's evaluation.

    python scripts/cel_compile.py

Each rule is parsed by cel-python's own parser, so the compiled rule reads what cel-python
reads; a construct no rule used yet is refused here, by name, rather than guessed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

READING = Path(__file__).resolve().parent.parent / "aichor_iac" / "reading"
OUT = READING / "cel_rules.py"
HEADER = '''"""The CEL rules of the CRDs in crds/ that a create can break, compiled to Python
on cel.py's operations (made by scripts/cel_compile.py from the rules' text: do not edit)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import cel

'''
RELATIONS = {
    "relation_eq": "==",
    "relation_ne": "!=",
    "relation_lt": "<",
    "relation_le": "<=",
    "relation_gt": ">",
    "relation_ge": ">=",
}
MACROS = {"exists": "cel.exists", "all": "cel.all_", "filter": "cel.filter_"}
FUNCTIONS = {"size": "cel.size", "double": "cel.double"}


def rules() -> list[str]:
    """Every CEL rule of a shipped CRD that a create can break (not those on `oldSelf`)."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            found.update(r["rule"] for r in node.get("x-kubernetes-validations", []))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for path in sorted((READING / "crds").glob("*.json")):
        walk(json.loads(path.read_text()))
    return sorted(rule for rule in found if "oldSelf" not in rule)


def module() -> str:
    """cel_rules.py's text (ruff-formatted, as the repository's code is)."""
    functions, table, compiler = [], [], Compiler()
    for number, rule in enumerate(rules()):
        functions.append(
            f"def _rule_{number}(v_self: Any) -> Any:\n"
            f"    # {rule}\n"
            f"    return {compiler.expression(rule)}\n"
        )
        table.append(f"    {json.dumps(rule)}: _rule_{number},\n")
    text = (
        HEADER
        + "\n\n".join(functions)
        + "\n\n# rule's text -> its function of `self`\n"
        + "RULES: dict[str, Callable[[Any], Any]] = {\n"
        + "".join(table)
        + "}\n"
    )
    formatted = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--stdin-filename", str(OUT), "-"],
        input=text,
        capture_output=True,
        text=True,
        check=True,
    )
    return formatted.stdout


class Compiler:
    """One rule's cel-python parse tree as a Python expression on cel.py's operations."""

    def __init__(self) -> None:
        sys.path.insert(0, str(READING.parent.parent))
        from aichor_iac.reading import crd

        self.environment = crd.cel_environment()

    def expression(self, rule: str) -> str:
        return self.node(self.environment.compile(rule))

    def node(self, tree: Any) -> str:
        handler = getattr(self, f"_{tree.data!s}", None)
        children = tree.children
        if handler is not None:
            return str(handler(*children))
        if len(children) == 1 and hasattr(children[0], "data"):  # (a level of precedence)
            return self.node(children[0])
        raise SystemExit(f"cel_compile: {tree.data} is not compiled yet: add it to Compiler")

    def _conditionalor(self, *children: Any) -> str:
        if len(children) == 1:
            return self.node(children[0])
        return f"cel.or_({self.node(children[0])}, {self.node(children[1])})"

    def _conditionaland(self, *children: Any) -> str:
        if len(children) == 1:
            return self.node(children[0])
        return f"cel.and_({self.node(children[0])}, {self.node(children[1])})"

    def _relation(self, *children: Any) -> str:
        if len(children) == 1:
            return self.node(children[0])
        operator, right = children
        left, relation = self.node(operator.children[0]), str(operator.data)
        if relation == "relation_in":
            return f"cel.in_({left}, {self.node(right)})"
        if relation not in RELATIONS:
            raise SystemExit(f"cel_compile: {relation} is not compiled yet")
        return f"cel.compare({RELATIONS[relation]!r}, {relation!r}, {left}, {self.node(right)})"

    def _unary(self, *children: Any) -> str:
        if len(children) == 1:
            return self.node(children[0])
        operator, operand = children
        if str(operator.data) != "unary_not":
            raise SystemExit(f"cel_compile: {operator.data} is not compiled yet")
        return f"cel.not_({self.node(operand)})"

    def _member_dot(self, member: Any, name: Any) -> str:
        return f"cel.field({self.node(member)}, {str(name)!r})"

    def _member_dot_arg(self, member: Any, name: Any, arguments: Any = None) -> str:
        target, method = self.node(member), str(name)
        given = list(arguments.children) if arguments is not None else []
        if method in MACROS:
            variable, predicate = (self.node(argument) for argument in given)
            return f"{MACROS[method]}({target}, lambda {variable}: {predicate})"
        if method == "size" and not given:
            return f"cel.size({target})"
        if method == "matches" and len(given) == 1:
            return f"cel.matches({target}, {self.node(given[0])})"
        raise SystemExit(f"cel_compile: the method {method} is not compiled yet")

    def _ident(self, name: Any) -> str:
        return f"v_{name}"

    def _ident_arg(self, name: Any, arguments: Any = None) -> str:
        given = list(arguments.children) if arguments is not None else []
        if str(name) == "has":
            selected = _descend(given[0], "member_dot")
            member, field = selected.children
            return f"cel.has({self.node(member)}, {str(field)!r})"
        if str(name) in FUNCTIONS and len(given) == 1:
            return f"{FUNCTIONS[str(name)]}({self.node(given[0])})"
        raise SystemExit(f"cel_compile: the function {name} is not compiled yet")

    def _literal(self, token: Any) -> str:
        """A literal as cel-python reads it (its own evaluation of the literal alone)."""
        from celpy import celtypes

        value = self.environment.program(self.environment.compile(str(token))).evaluate({})
        kinds = {celtypes.BoolType: bool, celtypes.IntType: int, celtypes.DoubleType: float}
        for cel_kind, kind in (*kinds.items(), (celtypes.StringType, str)):
            if isinstance(value, cel_kind):
                return repr(kind(value))
        raise SystemExit(f"cel_compile: the literal {token} is not compiled yet")

    def _list_lit(self, items: Any = None) -> str:
        return "[" + ", ".join(self.node(item) for item in (items.children if items else [])) + "]"

    def _paren_expr(self, inner: Any) -> str:
        return self.node(inner)


def _descend(tree: Any, data: str) -> Any:
    """The node `data` under levels of precedence with one child each (`has`'s argument)."""
    while tree.data != data:
        if len(tree.children) != 1:
            raise SystemExit(f"cel_compile: has() of a {tree.data}: give it a field selection")
        tree = tree.children[0]
    return tree


def main() -> None:
    OUT.write_text(module())
    print(f"{OUT}: {len(rules())} rules")


if __name__ == "__main__":
    main()
