"""The fenced commands and snippets of the README and docs/, read as a reader pastes them.

A page's fences, in order: ```sh/bash (each line a command, run as written), ```console (`$ `
lines are commands, the lines after each what it prints: `…` stands for anything), ```python
(run in one Python process with the page's earlier Python fences before it, as a notebook
keeps its names), and a fence with `title="FILE"` (written to FILE, as the page asks the reader
to save it). Any other fence is text. A fence that cannot run as written is marked just
above it, with the reason, and the suite counts the marks:

    <!-- doc-test: not run: REASON -->
    <!-- doc-test: stops at `PREFIX`: REASON -->   (the commands or lines before PREFIX run)
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN = ("sh", "bash", "console", "python")
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<lang>\w*)(?P<info>[^\n]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
    re.S | re.M,
)
TITLE = re.compile(r'title="([^"]+)"')
MARK = re.compile(
    r"<!-- doc-test: (?:(?P<not_run>not run)|stops at `(?P<at>[^`]+)`): (?P<why>[^\n]+?) -->\s*$"
)


@dataclass(frozen=True)
class Fence:
    page: str  # relative to the checkout
    line: int  # of the opening fence
    lang: str
    title: str | None  # a file the page asks to save
    body: str
    not_run: bool = False
    stops_at: str | None = None  # the command (or line) before which it stops
    why: str | None = None  # the mark's reason

    @property
    def text(self) -> str:
        """The fence's body as a reader copies it (a list item's indentation taken off)."""
        return textwrap.dedent(self.body)

    @property
    def runs(self) -> bool:
        """A command or snippet (a titled fence is a file the page asks to save)."""
        return self.lang in ("sh", "bash", "console", "python") and not self.title

    @property
    def marked(self) -> bool:
        return self.why is not None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    def commands(self) -> list[tuple[str, list[str]]]:
        """The commands a shell or console fence runs (up to its mark's stop), each with the
        lines the page shows it printing (console only)."""
        found: list[tuple[str, list[str]]] = []
        if self.lang == "console":
            for line in self.text.splitlines():
                if line.startswith("$ "):
                    found.append((line[2:], []))
                elif found:
                    found[-1][1].append(line)
        else:
            joined = re.sub(r"\\\n\s*", " ", self.text)
            found = [(line, []) for line in joined.splitlines() if line.strip()]
        if self.stops_at is not None:
            stop = next((i for i, (c, _) in enumerate(found) if c.startswith(self.stops_at)), None)
            assert stop is not None, f"{self.where}: nothing starts with `{self.stops_at}`"
            found = found[:stop]
        return found

    def python(self) -> str:
        """The Python a python fence runs (up to its mark's stop)."""
        lines = self.text.splitlines()
        if self.stops_at is not None:
            stop = next((i for i, s in enumerate(lines) if s.startswith(self.stops_at)), None)
            assert stop is not None, f"{self.where}: no line starts with `{self.stops_at}`"
            lines = lines[:stop]
        return "\n".join(lines) + "\n"


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def fences(path: Path) -> list[Fence]:
    """The page's fences that run, or that it asks to save as files, in order."""
    text = path.read_text()
    found = []
    for fence in FENCE.finditer(text):
        title = TITLE.search(fence["info"])
        if fence["lang"] not in RUN and not title:
            continue
        before = text[: fence.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = MARK.search(before)
        found.append(
            Fence(
                page=str(path.relative_to(ROOT)),
                line=text.count("\n", 0, fence.start()) + 1,
                lang=fence["lang"],
                title=title[1] if title else None,
                body=fence["body"],
                not_run=bool(mark and mark["not_run"]),
                stops_at=mark["at"] if mark else None,
                why=mark["why"] if mark else None,
            )
        )
    return found


def matches(printed: str, shown: list[str]) -> str | None:
    """None when what a command printed shows the page's lines in order (`…` in a line stands
    for any text; a line of `…` alone for any lines; runs of spaces, as a table's column widths
    vary, read as one); else the first line the output lacks."""
    lines = [" ".join(line.split()) for line in printed.splitlines()]
    at = 0
    for want in (" ".join(w.split()) for w in shown):
        if want in ("…", ""):
            continue
        pattern = re.compile(".*".join(re.escape(part) for part in want.split("…")) + "$")
        while at < len(lines) and not pattern.match(lines[at]):
            at += 1
        if at == len(lines):
            return want
        at += 1
    return None
