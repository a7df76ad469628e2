"""`status --plot` / `run --local --plot` (aichor_iac/sweeps/plot.py): a sweep's objective
against each parameter, a point per trial that reported it, the best starred; the same sweep
gives the same bytes; without matplotlib, or without a sweep, a clear error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from aichor_iac.doors.katib.door import DEFAULT_FORMAT
from aichor_iac.experiment.trial import Objective, Trial
from aichor_iac.problems import ManifestError
from aichor_iac.sweeps import results as sweeps
from aichor_iac.sweeps.plot import plot

LOSS = Objective("loss", "minimize", formats=(DEFAULT_FORMAT,))


def found() -> dict:
    """A sweep over a number and a category: three trials reported, one failed, one waits."""
    rows = [
        ("lr", "0.01", "sgd", "Succeeded", ["loss=0.5"]),
        ("lr", "0.05", "adam", "Succeeded", ["loss=0.2"]),
        ("lr", "0.1", "adam", "Failed", ["loss=0.9"]),
        ("lr", "0.5", "sgd", "Waiting", []),
    ]
    trials = [
        sweeps.TrialRun(
            f"s-{i}",
            Trial("s", i, len(rows), 2, (("lr", lr), ("optimizer", opt)), objective=LOSS),
            state,
            lines,
            None,
        )
        for i, (_, lr, opt, state, lines) in enumerate(rows)
    ]
    return {"s": sweeps.report(trials)}


def test_a_sweep_is_drawn_a_panel_per_parameter_the_best_starred(tmp_path: Path) -> None:
    svg = tmp_path / "s.svg"
    plot(found(), str(svg))
    text = svg.read_text()
    # (matplotlib's SVG keeps each text as glyph references, its string in a comment)
    for label in ("lr", "optimizer", "s: loss (minimize)", "sgd", "adam"):
        assert f"<!-- {label} -->" in text, label
    assert text.count('id="PathCollection_') >= 2 * 4  # 3 points + the star, per panel


def formats() -> list[str]:
    from matplotlib.backend_bases import FigureCanvasBase

    return sorted(FigureCanvasBase.get_supported_filetypes())


@pytest.mark.parametrize("suffix", formats())
def test_every_format_the_check_lets_through_is_written(suffix: str, tmp_path: Path) -> None:
    """`--plot x.jpg` passed the check, then failed after the whole sweep: each suffix
    `plot_file` accepts is one `plot` writes."""
    from aichor_iac.sweeps.plot import plot_file

    try:
        path = plot_file(str(tmp_path / f"x.{suffix}"))
    except ValueError as refused:  # (refused before anything runs: what it lacks)
        assert suffix == "pgf" and "needs" in str(refused)
        return
    plot(found(), path)
    assert Path(path).stat().st_size > 0


def test_the_same_sweep_gives_the_same_png(tmp_path: Path) -> None:
    first, second = tmp_path / "1.png", tmp_path / "2.png"
    plot(found(), str(first))
    plot(found(), str(second))
    assert first.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert first.read_bytes() == second.read_bytes()


def test_without_a_sweep_the_error_says_so(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="holds no sweep"):
        plot({}, str(tmp_path / "none.png"))


# The CLI where matplotlib cannot be imported (as after `make demo` or `pip install .`)
WITHOUT_MATPLOTLIB = (
    "import sys; sys.modules['matplotlib'] = None; from aichor_iac.cli import main; "
    "sys.exit(main(sys.argv[1:]))"
)


@pytest.mark.parametrize(
    ("command", "plotted", "said"),
    [
        # without matplotlib: refused before anything runs, with this environment's install
        (
            ["run", "--local", "sweep.yaml"],
            "s.png",
            "needs matplotlib, which this environment lacks: ",
        ),
        (["status", "--local", "sweep.yaml"], "s.png", "needs matplotlib"),
        # a format it cannot write, a directory that is not there
        (["run", "--local", "sweep.yaml"], "s.txt", "end the name with .png, .svg or .pdf"),
        (["status", "sweep.yaml"], "nowhere/s.png", "its directory does not exist"),
    ],
)
def test_plot_is_checked_before_anything_runs(command, plotted, said, tmp_path: Path) -> None:
    code = (
        WITHOUT_MATPLOTLIB
        if said.startswith("needs")
        else "from aichor_iac.cli import main; import sys; sys.exit(main(sys.argv[1:]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, *command, "--plot", plotted],
        cwd=tmp_path,  # (no sweep.yaml there: the option is refused before the file is read)
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "argument --plot: " in result.stderr and said in result.stderr, result.stderr
    if said.startswith("needs matplotlib, which"):
        install = result.stderr.split("lacks: ", 1)[1].strip()
        assert install == f"{sys.executable} -m pip install 'matplotlib<4,>=3.8'"
