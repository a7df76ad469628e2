"""`aichor-iac check`: before the first `pulumi up`, the experiment against the stack's cluster
(issue 42), read only. What the experiment asks of the cluster comes from its rendered objects
(`needs`); what the cluster allows from its API (`cluster`); each check gives a line: ok,
blocked (with the fix) or unknown (the user's permissions cannot answer it, never a false ok).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from rich.table import Table

State = Literal["ok", "blocked", "unknown"]


@dataclass(frozen=True)
class Line:
    """One check's answer."""

    check: str  # what was checked, e.g. "permissions: jobs.batch"
    state: State
    detail: str  # what was found
    fix: str = ""  # what to do (blocked, unknown)

    def as_json(self) -> dict[str, str]:
        return {"check": self.check, "state": self.state, "detail": self.detail, "fix": self.fix}


STYLES = {"ok": "green", "blocked": "bold red", "unknown": "yellow"}


def table(lines: list[Line]) -> Table:
    """The checks as a terminal table: a line each, its state coloured, the fix beside it."""
    from rich.table import Table
    from rich.text import Text

    out = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("check", "state", "detail", "fix"):
        out.add_column(column, overflow="fold")
    for line in lines:
        out.add_row(line.check, Text(line.state, STYLES[line.state]), line.detail, line.fix)
    blocked = sum(line.state == "blocked" for line in lines)
    unknown = sum(line.state == "unknown" for line in lines)
    out.caption = f"{blocked} blocked, {unknown} unknown, {len(lines) - blocked - unknown} ok"
    return out
