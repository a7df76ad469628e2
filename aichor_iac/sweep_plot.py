"""A picture of sweeps (`status --plot FILE`, `run --local --plot FILE`): for each sweep a row,
for each of its parameters a panel of the objective against that parameter's values, one
point per trial that reported it (failed trials as crosses), the best one starred. Needs
matplotlib (the `plot` extra); the file's format follows its suffix (PNG, SVG, PDF)."""

from __future__ import annotations

from typing import Any

from .problems import ManifestError, Problem

STATES = {"Succeeded": ("o", "tab:blue"), "Failed": ("x", "tab:red")}
OTHER = ("o", "tab:gray")  # a trial still running: its objective so far


def plot(sweeps: dict[str, dict[str, Any]], path: str) -> None:
    """Write the sweeps' picture (`sweeps.report`s by sweep) to `path`."""
    try:
        from matplotlib.figure import Figure
    except ImportError:  # (an optional extra: most stacks never plot)
        reason = "needs matplotlib: pip install 'aichor-iac[plot]'"
        raise ManifestError("--plot", [Problem("", reason)]) from None
    if not sweeps:
        raise ManifestError("--plot", [Problem("", "the manifest holds no sweep to plot")])
    columns = max(len(_parameters(found)) for found in sweeps.values()) or 1
    figure = Figure(figsize=(4 * columns, 3.2 * len(sweeps)), layout="constrained")
    axes = figure.subplots(len(sweeps), columns, squeeze=False)
    for row, (name, found) in zip(axes, sorted(sweeps.items()), strict=True):
        parameters = _parameters(found)
        for column, ax in enumerate(row):
            if column >= len(parameters):
                ax.set_visible(False)
                continue
            _panel(ax, found, parameters[column])
        row[0].set_ylabel(f"{name}: {found['objective']} ({found['direction']})")
    # (no software version or date in the file: the same sweep gives the same bytes)
    metadata = {"Software": None} if path.lower().endswith(".png") else {}
    figure.savefig(path, metadata=metadata)


def _parameters(found: dict[str, Any]) -> list[str]:
    return list(found["trials"][0]["parameters"]) if found["trials"] else []


def _panel(ax: Any, found: dict[str, Any], parameter: str) -> None:
    """The objective against one parameter: numbers on a numeric axis (logarithmic across
    two decades or more), other values (a categorical parameter's) as categories in their
    first-seen order."""
    reported = [t for t in found["trials"] if t["objective"] is not None]
    values = [t["parameters"][parameter] for t in reported]
    numeric = all(_is_number(v) for v in values)
    categories = list(dict.fromkeys(values))
    for trial, value in zip(reported, values, strict=True):
        x = float(value) if numeric else categories.index(value)
        marker, colour = STATES.get(trial["state"], OTHER)
        ax.scatter([x], [trial["objective"]], marker=marker, color=colour)
        if trial["trial"] == found["best"]:
            ax.scatter([x], [trial["objective"]], marker="*", s=240, color="gold", zorder=3)
    if not numeric:
        ax.set_xticks(range(len(categories)), [str(c) for c in categories])
        ax.set_xlim(-0.5, len(categories) - 0.5)
    elif values and min(map(float, values)) > 0 and _spread(values) >= 100:
        ax.set_xscale("log")  # (a learning rate's decades, as a log-uniform draw spreads it)
    ax.set_xlabel(parameter)
    ax.grid(alpha=0.3)


def _spread(values: list[Any]) -> float:
    numbers = [float(v) for v in values]
    return max(numbers) / min(numbers)


def _is_number(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True
