"""What a command says about problems and warnings: one line each on stderr (coloured on a
terminal), or a JSON document on stdout under `--output json`."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from ..problems import Problem

if TYPE_CHECKING:
    from rich.console import Console

# Where output is not a terminal (a CI log, `| tee`), rich would wrap at 80 columns, inside a
# word or a resource name; there a table is as wide as its cells, so a search finds each whole.
UNBOUNDED = 100_000


def problem_json(problem: Problem, source: str, severity: str) -> dict[str, Any]:
    return {
        "file": problem.source or source,
        "line": problem.line,
        "path": problem.path,
        "message": problem.message,
        "severity": severity,
    }


def report(args: argparse.Namespace, source: str, problems: list[Problem]) -> None:
    """Problems that end the command: a document on stdout under `--output json`, else one
    line each on stderr."""
    if getattr(args, "output", "text") == "json":
        errors = [problem_json(p, source, "error") for p in problems]
        print_json({"valid": False, "problems": errors, "warnings": []})  # (as docs/cli.md says)
        return
    for problem in problems:
        print_problem(problem, source)


def print_problem(problem: Problem, source: str, warning: bool = False) -> None:
    """`FILE:LINE: PATH: MESSAGE` on stderr (a warning: `FILE:LINE: warning: PATH: MESSAGE`),
    whatever the output format: stdout stays the command's. Coloured on a terminal."""
    from rich.markup import escape  # (a clean `validate` prints no problem)

    where, _, rest = problem.format(source).partition(": ")
    text = f"[yellow bold]warning:[/] {escape(rest)}" if warning else f"[red]{escape(rest)}[/]"
    console(stderr=True, soft_wrap=True).print(f"[bold]{escape(where)}:[/] {text}")


def console(stderr: bool = False, soft_wrap: bool = False) -> Console:
    """The console a command prints with: coloured on a terminal, and as wide as its lines
    elsewhere (UNBOUNDED)."""
    from rich.console import Console

    out = Console(stderr=stderr, highlight=False, soft_wrap=soft_wrap)
    if not out.is_terminal:
        out.width = UNBOUNDED
    return out


def print_json(document: Any) -> None:
    print(json.dumps(document, indent=2, ensure_ascii=False))
