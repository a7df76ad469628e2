"""What is wrong with an input: a `Problem` (path, sentence, line) and `ManifestError`, every
problem of one input. Every layer reports through these; they import nothing of the package."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    path: str
    message: str
    line: int | None = None
    source: str | None = None  # its file, where not the error's own (one of a directory's)

    def format(self, source: str) -> str:
        """One line, whatever the message quotes (a user's value may hold line breaks)."""
        source = self.source or source
        where = f"{source}:{self.line}" if self.line else source
        text = f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"
        return one_line(text)


def one_line(text: str) -> str:
    """Control characters (line breaks, NUL, escapes) as Python writes them in a string."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class ManifestError(Exception):
    """Every problem found in one input; `str()` gives one line per problem."""

    def __init__(self, source: str, problems: list[Problem]):
        self.source = source
        self.problems = problems
        super().__init__("\n".join(p.format(source) for p in problems))


def line_for(loc: tuple[str, ...], lines: dict) -> int | None:
    """The line of the nearest key of `loc` (a path in a document) that `lines` knows."""
    for end in range(len(loc), 0, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return None


def located(problems: list[Problem], lines: dict) -> list[Problem]:
    """Problems found after reading, each with the line of the document it is about."""
    return [
        Problem(p.path, p.message, p.line or line_for(tuple(p.path.split(".")), lines))
        for p in problems
    ]
