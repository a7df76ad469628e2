"""A picture of sweeps (`status --plot FILE`, `run --local --plot FILE`): for each sweep a row,
for each of its parameters a panel of the objective against that parameter's values, one
point per trial that reported it (failed trials as crosses), the best one starred. Needs
matplotlib (the `plot` extra); the file's format follows its suffix (PNG, SVG, PDF)."""

from __future__ import annotations

import importlib.util
import shlex
import shutil
import sys
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..experiment.state import State
from ..problems import ManifestError, Problem

if TYPE_CHECKING:
    from .results import SweepReport

STATES = {State.SUCCEEDED.value: ("o", "tab:blue"), State.FAILED.value: ("x", "tab:red")}
OTHER = ("o", "tab:gray")  # a trial still running: its objective so far


def plot_file(path: str) -> str:
    """`--plot FILE` checked before anything runs (the command line's type): matplotlib is
    installed, it writes the suffix's format, the directory exists. Else ValueError, why."""
    if importlib.util.find_spec("matplotlib") is None:  # (an optional extra: most never plot)
        raise ValueError(f"needs matplotlib, which this environment lacks: {install_plot()}")
    import matplotlib
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    suffix = Path(path).suffix.lower().removeprefix(".")
    if suffix not in formats:
        raise ValueError(f"{path!r}: end the name with .png, .svg or .pdf ({', '.join(formats)})")
    if suffix == "pgf" and shutil.which(tex := matplotlib.rcParams["pgf.texsystem"]) is None:
        raise ValueError(f"{path!r}: PGF needs {tex} (a TeX installation), which is missing")
    if not Path(path).absolute().parent.is_dir():
        raise ValueError(f"{path!r}: its directory does not exist")
    return path


def install_plot() -> str:
    """The command that adds the plot extra's matplotlib to the environment running this:
    that environment's own pip, the extra's own version range."""
    wanted = [
        r.split(";")[0].strip()
        for r in metadata.requires("aichor-iac") or []
        if r.startswith("matplotlib") and "plot" in r
    ]
    requirement = shlex.quote(wanted[0] if wanted else "matplotlib")
    return f"{shlex.quote(sys.executable)} -m pip install {requirement}"


def plot(sweeps: dict[str, SweepReport], path: str) -> None:
    """Write the sweeps' picture (`sweeps.report`s by sweep) to `path` (`plot_file`)."""
    from matplotlib.figure import Figure

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
    # (no software version in a PNG: the same sweep gives the same bytes; JPEG, TIFF, WebP and
    # raw formats take no metadata at all)
    png = path.lower().endswith(".png")
    figure.savefig(path, metadata={"Software": None} if png else None)


def _parameters(found: SweepReport) -> list[str]:
    return list(found["trials"][0]["parameters"]) if found["trials"] else []


def _panel(ax: Any, found: SweepReport, parameter: str) -> None:
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
