"""`aichor-iac preview`: what `pulumi up` would do, laid out as `pulumi preview` lays it out: a
tree of the stack, the experiment's component and its resources in creation order, each with
its operation (create, or against an earlier version of the experiment update, replace,
delete), what it asks for and what it is created after, then the outputs and a summary line.

`steps()` decides (plain data, also `--output json`); `show()` prints with rich.
"""

from __future__ import annotations

import difflib
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape

from ..engine import PROJECT, Rendering, Resource
from ..experiment.trial import Trial
from . import changes, output
from .changes import Change, Op

STACK_TYPE = "pulumi:pulumi:Stack"
# Pulumi's marks and colours for each operation.
MARKS: dict[Op, tuple[str, str]] = {
    "create": ("+ ", "green"),
    "update": ("~ ", "yellow"),
    "replace": ("+-", "magenta"),
    "delete": ("- ", "red"),
    "same": ("  ", "dim"),
}
SUMMARY = {
    "create": "to create",
    "update": "to update",
    "replace": "to replace",
    "delete": "to delete",
}


@dataclass
class Step:
    """One resource's row: its operation and where it sits in the tree."""

    op: Op
    type: str
    name: str  # the object's name for a Kubernetes object, else Pulumi's resource name
    urn: str
    parent: str  # urn ("" for the stack)
    summary: str = ""
    after: list[str] = field(default_factory=list)  # Kind/name it is created after (direct)
    change: Change | None = None

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "op": self.op,
            "type": self.type,
            "name": self.name,
            "urn": self.urn,
            "parent": self.parent,
        }
        if self.summary:
            data["summary"] = self.summary
        if self.after:
            data["after"] = self.after
        if self.change and self.change.fields:
            data["diff"] = [
                {"path": f.path, "old": f.old, "new": f.new} for f in self.change.fields
            ]
        if self.change and self.change.replaced_by:
            data["replaceBecause"] = list(self.change.replaced_by)
        return data


def type_token(obj: dict[str, Any]) -> str:
    """pulumi-kubernetes' type for an object (`kubernetes:batch/v1:Job`, core as `core`): a
    `render -o` directory's objects as resources."""
    group, _, version = obj.get("apiVersion", "").rpartition("/")
    return f"kubernetes:{group or 'core'}/{version}:{obj.get('kind', '')}"


def name_of(r: Resource) -> str:
    """What a row names: a Kubernetes object's own name, else Pulumi's resource name."""
    return (r.inputs.get("metadata") or {}).get("name", r.name) if r.is_kubernetes else r.name


def steps(rendering: Rendering, stack: str, old: Rendering | None = None) -> list[Step]:
    """The tree's rows in creation order; without `old`, every resource is created. `old`
    from `render -o` holds Kubernetes objects alone: the other resources count as unchanged."""
    plan = changes.plan(old.objects if old else [], rendering.objects)
    by_key = {c.key: c for c in plan}
    old_urns = {r.urn for r in old.resources if not r.is_kubernetes} if old else set()
    known = bool(old_urns)  # whether `old` says which other resources there were

    root = f"urn:pulumi:{stack}::{PROJECT}::{STACK_TYPE}::{PROJECT}-{stack}"
    root_op: Op = "same" if old else "create"
    rows = [Step(root_op, STACK_TYPE, f"{PROJECT}-{stack}", root, "")]
    direct = _direct_dependencies(rendering)
    by_urn = {r.urn: r for r in rendering.resources}
    for r in rendering.resources:
        if r.is_kubernetes:
            change = by_key[changes.key(r.inputs)]
            op: Op = change.op
        else:
            change = None
            op = "create" if not old or (known and r.urn not in old_urns) else "same"
        rows.append(
            Step(
                op,
                r.type,
                name_of(r),
                r.urn,
                r.parent if r.parent in by_urn else root,
                output.summary(r.inputs) if r.is_kubernetes else "",
                [f"{by_urn[d].kind}/{name_of(by_urn[d])}" for d in direct[r.urn]],
                change,
            )
        )
    # What the new version no longer has: another framework's component first, then each
    # object under its old parent where that is shown (a `render -o` directory has none).
    gone_urns: set[str] = set()
    for r in old.resources if known and old else []:
        if not r.is_kubernetes and r.urn not in by_urn:
            parent = r.parent if r.parent in by_urn or r.parent in gone_urns else root
            rows.append(Step("delete", r.type, r.name, r.urn, parent))
            gone_urns.add(r.urn)
    shown = {row.urn for row in rows}
    component = next((r.urn for r in rendering.resources if not r.custom), root)
    old_by_key = {changes.key(r.inputs): r for r in old.resources} if old else {}
    for change in plan:
        if change.op == "delete":
            gone = old_by_key[change.key]
            parent = gone.parent if gone.parent and gone.parent in shown else component
            rows.append(Step("delete", gone.type, change.key[2], "", parent, change=change))
    return _depth_first(rows)


def _depth_first(rows: list[Step]) -> list[Step]:
    """The rows as a tree shows them: each one's children right below it (in creation
    order), so that a stack of several experiments shows each one's objects under it."""
    children: dict[str, list[Step]] = {}
    for row in rows[1:]:
        children.setdefault(row.parent, []).append(row)
    ordered: list[Step] = []

    def visit(row: Step) -> None:
        ordered.append(row)
        for child in children.pop(row.urn, []) if row.urn else []:
            visit(child)

    visit(rows[0])
    return ordered + [row for rest in children.values() for row in rest]


def _direct_dependencies(rendering: Rendering) -> dict[str, list[str]]:
    """Each resource's dependencies less those another dependency already implies, so the
    tree says "after the Service" rather than every object the Service itself follows."""
    deps = {r.urn: set(r.dependencies) for r in rendering.resources}
    closure: dict[str, set[str]] = {}

    def reach(urn: str) -> set[str]:
        if urn not in closure:
            closure[urn] = set()
            for d in deps.get(urn, ()):
                closure[urn] |= {d, *reach(d)}
        return closure[urn]

    order = [r.urn for r in rendering.resources]
    result = {}
    for urn, mine in deps.items():
        kept = {d for d in mine if d in deps and not any(d in reach(e) for e in mine if e != d)}
        result[urn] = sorted(kept, key=order.index)
    return result


def later_trials(trials: Sequence[Trial]) -> list[str]:
    """What a preview says of each sweep that depends on its results (`Trial.learns`) among
    the `trials` rendered: how many of its trials can start now, and that the others wait."""
    known = Counter(t.sweep for t in trials if t.learns)
    total = {t.sweep: t.count for t in trials if t.learns}
    return [
        f"sweep {sweep} depends on its trials' results: {n} of its {total[sweep]} trials can "
        f"start now; the other {total[sweep] - n} are made from the results of the trials "
        "before them, as those end"
        for sweep, n in known.items()
        if n < total[sweep]
    ]


def as_json(
    rows: list[Step],
    rendering: Rendering,
    stack: str,
    warnings: list[dict[str, Any]],
    later: Sequence[str] = (),
) -> dict[str, Any]:
    """`preview --output json`: Pulumi's `preview --json` names (steps, changeSummary)."""
    return {
        "stack": stack,
        "steps": [s.as_json() for s in rows],
        "changeSummary": changes.counts(s.op for s in rows),
        "outputs": rendering.outputs,
        "warnings": warnings,
        **({"laterTrials": list(later)} if later else {}),
    }


def show(
    console: Console,
    rows: list[Step],
    rendering: Rendering,
    stack: str,
    diff: bool,
    later: Sequence[str] = (),
) -> None:
    """The preview as `pulumi preview` prints it (with `--diff`: each changed field), and
    what waits for results (`later_trials`)."""
    console.print(f"Previewing update ([bold]{escape(stack)}[/]):\n")
    table = [(("", ""), ("Type", "bold"), ("Name", "bold"), ("Plan", "bold"), "[bold]Info[/]")]
    for row, prefix in zip(rows, _tree_prefixes(rows), strict=True):
        mark, colour = MARKS[row.op]
        info = [escape(row.summary)] if row.summary else []
        if row.change and row.change.fields:
            tops = ", ".join(f"~{t}" for t in sorted({_top(f.path) for f in row.change.fields}))
            info.insert(0, f"[{colour}]{escape(f'[diff: {tops}]')}[/]")
        if row.after:
            info.append(f"[dim](after {escape(', '.join(row.after))})[/]")
        changed = row.op != "same"
        table.append(
            (
                (mark, colour),
                (prefix + row.type, ""),
                (row.name, colour if changed else ""),
                (row.op if changed else "", colour),
                " ".join(info),
            )
        )
    for line in _aligned(table):
        console.print(line, soft_wrap=True)
    if diff:
        _show_diffs(console, rows)
    outputs = rendering.outputs
    if outputs:
        console.print("\n[bold]Outputs:[/]")
        width = max(len(k) for k in outputs)
        for key, value in outputs.items():
            text = value if isinstance(value, str) else json.dumps(value, sort_keys=False)
            console.print(f"    {escape(key.ljust(width))}: {escape(text)}")
    totals = _totals(outputs)
    gpus = ", ".join(f"{n} × {k}" for k, n in totals.get("gpus", {}).items()) or "none"
    console.print(
        f"\n[bold]Totals:[/] {totals.get('pods')} pods, GPUs: {escape(gpus)}, "
        f"{totals.get('cpus')} CPUs, {totals.get('memoryGiB')} GiB memory"
    )
    console.print("\n[bold]Resources:[/]")
    for op, n in changes.counts(s.op for s in rows).items():
        mark, colour = MARKS[op]
        if op == "same":
            console.print(f"    {n} unchanged")
        else:
            console.print(f"    [{colour}]{mark.strip().ljust(2)}{n} {SUMMARY[op]}[/]")
    for line in later:
        console.print(f"\n{escape(line)}")


def _totals(outputs: dict[str, Any]) -> dict[str, Any]:
    """The experiment's totals, or the sums of several (each experiment's outputs under its
    name)."""
    if "pods" in outputs or not outputs:
        return outputs
    each = [o for o in outputs.values() if isinstance(o, dict) and "pods" in o]
    gpus: dict[str, int] = {}
    for found in each:
        for product, n in found.get("gpus", {}).items():
            gpus[product] = gpus.get(product, 0) + n
    sums = {k: sum(o[k] for o in each) for k in ("pods", "cpus", "memoryGiB")}
    return {**sums, "gpus": gpus}


def _aligned(rows: list[tuple[Any, ...]]) -> list[str]:
    """Rows of `(text, style)` cells and a last cell of markup as lines of markup, each
    column as wide as its widest text, two spaces apart, no trailing spaces."""
    widths = [max(cell_len(row[i][0]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for *cells, last in rows:
        parts = []
        for (text, style), width in zip(cells, widths, strict=True):
            styled = f"[{style}]{escape(text)}[/]" if style and text else escape(text)
            parts.append(styled + " " * (width - cell_len(text)))
        lines.append(("  ".join(parts) + "  " + last).rstrip())
    return lines


def _top(path: str) -> str:
    """The first two levels of a field's path (`spec.template`), as Pulumi's `[diff: ]`."""
    parts = path.replace("[", ".[").split(".")
    return ".".join(parts[:2]).replace(".[", "[")


def _tree_prefixes(rows: list[Step]) -> list[str]:
    """Pulumi's tree glyphs: `└─ ` before a last child, `├─ ` before the others, and under
    each ancestor `│  ` while it has siblings below, else spaces."""
    children: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        children.setdefault(row.parent, []).append(i)
    index = {row.urn: i for i, row in enumerate(rows) if row.urn}

    def last(i: int) -> bool:
        return children[rows[i].parent][-1] == i

    prefixes = []
    for i, row in enumerate(rows):
        if not row.parent:
            prefixes.append("")
            continue
        parts = ["└─ " if last(i) else "├─ "]
        node = index.get(row.parent)
        while node is not None and rows[node].parent:
            parts.append("   " if last(node) else "│  ")
            node = index.get(rows[node].parent)
        prefixes.append("".join(reversed(parts)))
    return prefixes


def _show_diffs(console: Console, rows: list[Step]) -> None:
    """Each changed object's fields: `~ path: old => new`, `+ path: new`, `- path: old`, a
    multi-line string (a script) as a unified diff."""
    for row in rows:
        change = row.change
        if not change or change.op not in ("update", "replace"):
            continue
        mark, colour = MARKS[change.op]
        kind = row.type.rsplit(":", 1)[-1]
        why = ""
        if change.replaced_by:
            why = f" ({', '.join(change.replaced_by)} cannot change in place: delete, then create)"
        title = f"{mark}{kind} {row.name}: {change.op}"
        console.print(f"\n[{colour}]{escape(title)}[/]{escape(why)}")
        for f in change.fields:
            console.print(_field_line(f), soft_wrap=True)


def _field_line(f: changes.FieldChange) -> str:
    """A changed field's lines as markup, each in its colour."""
    return "\n".join(f"[{colour}]{escape(text)}[/]" for text, colour in field_lines(f))


def field_lines(f: changes.FieldChange) -> list[tuple[str, str]]:
    """A changed field as lines of (text, colour): `+ path: new`, `- path: old`,
    `~ path: old => new`, a multi-line string (a script) as a unified diff below its path."""
    if f.old is None:
        return [(f"    + {f.path}: {_value(f.new)}", "green")]
    if f.new is None:
        return [(f"    - {f.path}: {_value(f.old)}", "red")]
    if isinstance(f.old, str) and isinstance(f.new, str) and "\n" in f.old + f.new:
        lines = difflib.unified_diff(f.old.splitlines(), f.new.splitlines(), lineterm="", n=1)
        body = [
            (f"        {line}", {"+": "green", "-": "red", "@": "cyan"}.get(line[:1], "dim"))
            for line in list(lines)[2:]  # past the ---/+++ header
        ]
        return [(f"    ~ {f.path}:", "yellow"), *body]
    return [(f"    ~ {f.path}: {_value(f.old)} => {_value(f.new)}", "yellow")]


def _value(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)
