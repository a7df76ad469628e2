"""Katib's sobol (doors/katib_sobol.py: goptuna v0.8.0's Sobol sampler as Katib's goptuna
service runs it): the engine's points, each parameter kind mapped as goptuna maps it and
written as Katib writes it."""

from __future__ import annotations

import pytest

from aichor_iac.sweeps.sobol import MAX_DIMENSIONS, points, sobol_search
from aichor_iac.sweeps.space import Parameter


def parameter(name: str, kind: str, **space: object) -> Parameter:
    return Parameter.model_validate({"name": name, "parameterType": kind, "feasibleSpace": space})


def test_the_engine_is_an_unscrambled_sobol_sequence_with_goptunas_dimensions() -> None:
    # scipy's unscrambled Sobol (Joe & Kuo's numbers) from its second point; goptuna's
    # dimension j >= 1 takes Joe & Kuo's line j + 2, which is scipy's dimension j + 1.
    qmc = pytest.importorskip("scipy.stats.qmc")
    reference = qmc.Sobol(MAX_DIMENSIONS + 1, scramble=False).random(64)
    drawn = points(MAX_DIMENSIONS, 63)
    for n, point in enumerate(drawn, start=1):
        assert point[0] == reference[n][0]
        assert point[1:] == list(reference[n][2 : MAX_DIMENSIONS + 1])


def test_the_first_points_are_the_sequences() -> None:
    assert points(2, 4) == [[0.5, 0.5], [0.75, 0.25], [0.25, 0.75], [0.375, 0.625]]


def test_each_kind_is_mapped_and_written_as_katib_does() -> None:
    found = sobol_search(
        [
            parameter("lr", "double", min="0.01", max="0.05"),  # uniform
            parameter("momentum", "double", min="0.5", max="0.9", step="0.1"),  # discrete
            parameter("layers", "int", min="1", max="5"),  # floor: never 5
            parameter("batch", "int", min="16", max="64", step="16"),
            parameter("optimizer", "categorical", list=["sgd", "adam", "rmsprop"]),
            parameter("fixed", "double", min="0.3", max="0.3"),  # one value: not a dimension
        ],
        4,
    )
    # Dimensions in name order: batch, layers, lr, momentum, optimizer
    assert found[0] == {
        "lr": "0.03",
        "momentum": "0.7",
        "layers": "3",
        "batch": "32",  # 16 + floor(0.5 * 3) * 16
        "optimizer": "adam",
        "fixed": "0.3",
    }
    # goptuna's floor never reaches an int's max, nor the last step of a stepped one
    many = sobol_search(
        [
            parameter("layers", "int", min="1", max="5"),
            parameter("batch", "int", min="16", max="64", step="16"),
        ],
        64,
    )
    assert {f["layers"] for f in many} == {"1", "2", "3", "4"}
    assert {f["batch"] for f in many} == {"16", "32", "48"}
    # lr is dimension 2 (Joe & Kuo's line 4: m = 1, 3, 1): 0.5, 0.25, 0.75, 0.875; written
    # as Go's FormatFloat writes 0.875 * 0.04 + 0.01, binary noise and all
    assert [f["lr"] for f in found] == ["0.03", "0.02", "0.04", "0.045000000000000005"]


def test_too_many_dimensions_are_refused() -> None:
    many = [parameter(f"p{i:02}", "double", min="0", max="1") for i in range(MAX_DIMENSIONS + 1)]
    with pytest.raises(ValueError, match=f"at most {MAX_DIMENSIONS} parameters"):
        sobol_search(many, 1)


@pytest.mark.parametrize(
    "space", [{"min": "-1e308", "max": "1e308"}, {"min": "0", "max": "1", "step": "1e-320"}]
)
def test_a_span_a_double_cannot_hold_is_refused(space: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="spans more steps than a double holds"):
        sobol_search([parameter("x", "double", **space)], 2)
