"""`aichor-iac preview --output markdown`: the preview as a pull request's comment (GitHub and
GitLab Markdown): the summary and each experiment's component, images and totals first, then
the objects in creation order, the fields that change and the outputs, each in `<details>`."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from ..check import needs
from ..engine import Rendering
from . import changes
from .preview import MARKS, SUMMARY, Step, field_lines

COMMENT_MARK = "<!-- aichor-iac preview -->"  # finds the comment again, to edit it in place


def markdown(
    rows: list[Step],
    rendering: Rendering,
    stack: str,
    warnings: list[dict[str, Any]],
    later: Sequence[str] = (),
) -> str:
    """The comment's body (`later`: what waits for results, `preview.later_trials`)."""
    components = [r for r in rendering.resources if not r.custom]
    names = ", ".join(f"`{r.name}`" for r in components)
    parts = [COMMENT_MARK, f"### aichor-iac preview: {names} (stack `{stack}`)", _summary(rows)]
    parts.append(_experiments(components, rendering.outputs))
    pods = needs.pods(rendering.objects)
    images = sorted({c["image"] for w in pods for c in needs.containers(w.spec)})
    if images:
        parts.append("**Images**: " + ", ".join(f"`{i}`" for i in images))
    parts += [f"> [!WARNING]\n> {_line(w['message'])}" for w in warnings]
    parts += [f"> [!NOTE]\n> {_line(line)}" for line in later]
    objects = [row for row in rows if row.type.startswith("kubernetes:")]
    parts.append(_details(f"Objects in creation order ({len(objects)})", _objects(objects)))
    changed = [row for row in rows if row.change and row.change.op in ("update", "replace")]
    if changed:
        parts.append(_details(f"What changes, field by field ({len(changed)})", _fields(changed)))
    if rendering.outputs:
        text = json.dumps(rendering.outputs, indent=2)
        parts.append(_details("Outputs", _fenced(text, "json")))
    return "\n\n".join(parts) + "\n"


def _summary(rows: list[Step]) -> str:
    counts = changes.counts(s.op for s in rows)
    found = [
        f"{MARKS[op][0].strip()} {n} {SUMMARY[op]}" if op != "same" else f"{n} unchanged"
        for op, n in counts.items()
    ]
    return "**" + " · ".join(found) + "**"


def _experiments(components: list[Any], outputs: dict[str, Any]) -> str:
    """A row per experiment: its component, pods, GPUs, CPUs and memory."""
    lines = [
        "| experiment | component | pods | GPUs | CPUs | memory |",
        "|---|---|---|---|---|---|",
    ]
    for r in components:
        found = outputs if len(components) == 1 else outputs.get(r.name, {})
        gpus = ", ".join(f"{n} × {k}" for k, n in (found.get("gpus") or {}).items()) or "none"
        memory = f"{found.get('memoryGiB', '')} GiB"
        cells = [f"`{r.name}`", f"`{r.type}`", found.get("pods", ""), gpus, found.get("cpus", "")]
        lines.append("| " + " | ".join(_cell(c) for c in [*cells, memory]) + " |")
    return "\n".join(lines)


def _objects(rows: list[Step]) -> str:
    lines = ["| | kind | name | plan | what | after |", "|---" * 6 + "|"]
    for row in rows:
        mark = MARKS[row.op][0].strip()
        kind = row.type.rsplit(":", 1)[-1]
        plan = "" if row.op == "same" else row.op
        after = ", ".join(row.after)
        cells = [f"`{mark}`" if mark else "", kind, f"`{row.name}`", plan, row.summary, after]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def _fields(rows: list[Step]) -> str:
    """Each changed object's fields as a diff block (`+`, `-` and `~` lines)."""
    parts = []
    for row in rows:
        change = row.change
        assert change is not None
        kind = row.type.rsplit(":", 1)[-1]
        why = ""
        if change.replaced_by:
            why = f" ({', '.join(change.replaced_by)} cannot change in place: delete, then create)"
        lines = [text.strip() for f in change.fields for text, _ in field_lines(f)]
        parts.append(f"**{kind} `{row.name}`: {change.op}**{why}\n\n" + _fenced("\n".join(lines)))
    return "\n\n".join(parts)


def _details(summary: str, body: str) -> str:
    return f"<details><summary>{summary}</summary>\n\n{body}\n\n</details>"


def _fenced(text: str, language: str = "diff") -> str:
    """A code block whose fence is longer than any run of backticks in `text`."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text}\n{fence}"


def _cell(value: Any) -> str:
    """A table cell: on one line, its pipes escaped."""
    return _line(str(value)).replace("|", "\\|")


def _line(text: str) -> str:
    return " ".join(text.split())
