"""`status --plot` / `run --local --plot` (aichor_iac/sweep_plot.py): a sweep's objective
against each parameter, a point per trial that reported it, the best starred; the same sweep
gives the same bytes; without matplotlib, or without a sweep, a clear error."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from aichor_iac import sweeps
from aichor_iac.doors.katib import DEFAULT_FORMAT
from aichor_iac.experiment.trial import Objective, Trial
from aichor_iac.problems import ManifestError
from aichor_iac.sweep_plot import plot

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
        (
            f"s-{i}",
            Trial("s", i, len(rows), 2, (("lr", lr), ("optimizer", opt)), objective=LOSS),
            state,
            lines,
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


def test_the_same_sweep_gives_the_same_png(tmp_path: Path) -> None:
    first, second = tmp_path / "1.png", tmp_path / "2.png"
    plot(found(), str(first))
    plot(found(), str(second))
    assert first.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert first.read_bytes() == second.read_bytes()


def test_without_matplotlib_or_a_sweep_the_error_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ManifestError, match="holds no sweep"):
        plot({}, str(tmp_path / "none.png"))
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # (an import of it fails)
    with pytest.raises(ManifestError, match=r"pip install 'aichor-iac\[plot\]'"):
        plot(found(), str(tmp_path / "s.png"))
