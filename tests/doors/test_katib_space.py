"""Katib's search space and its grid and random searches (aichor_iac/sweeps/space.py):
every value in its feasible space (on the grid for a grid), the same trials for the same
seed, earlier trials kept when more are asked for, Katib's webhook rules enforced."""

from __future__ import annotations

import itertools
import math
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from aichor_iac.sweeps import algorithms
from aichor_iac.sweeps.space import Parameter, grid, grid_size, random_search, seed_of

LR = {"name": "lr", "parameterType": "double", "feasibleSpace": {"min": "0.01", "max": "0.05"}}
LR_STEP = {**LR, "feasibleSpace": {"min": "0.01", "max": "0.05", "step": "0.005"}}
LAYERS = {"name": "layers", "parameterType": "int", "feasibleSpace": {"min": "2", "max": "5"}}
OPT = {
    "name": "optimizer",
    "parameterType": "categorical",
    "feasibleSpace": {"list": ["sgd", "adam", "ftrl"]},
}


def params(*specs: dict[str, Any]) -> list[Parameter]:
    return [Parameter.model_validate(s) for s in specs]


def test_a_grid_is_katibs_combinations_in_a_seeded_order() -> None:
    space = params(LR_STEP, LAYERS, OPT)
    assert [p.points() for p in space] == [
        # (numpy's arange, as Katib's `convert_to_combinations` lists a double's values)
        [
            *("0.01", "0.015", "0.019999999999999997", "0.024999999999999998", "0.03"),
            *("0.034999999999999996", "0.039999999999999994", "0.045", "0.049999999999999996"),
        ],
        ["2", "3", "4", "5"],
        ["sgd", "adam", "ftrl"],
    ]
    assert grid_size(space) == 9 * 4 * 3
    every = grid(space, 108, seed=7, parallel=3)
    combinations = {tuple(v) for v in itertools.product(*(p.points() for p in space))}
    assert len(every) == 108
    assert {(t["lr"], t["layers"], t["optimizer"]) for t in every} == combinations
    assert grid(space, 12, seed=7, parallel=3) == every[:12]  # more trials keep the earlier
    assert grid(space, 12, seed=8, parallel=3) != every[:12]


def test_random_values_lie_in_their_space_and_depend_on_the_seed_and_the_trial_alone() -> None:
    space = params(
        LR,
        LAYERS,
        OPT,
        {
            **LR,
            "name": "wd",
            "feasibleSpace": {"min": "0.0001", "max": "0.1", "distribution": "logUniform"},
        },
    )
    trials = random_search(space, 200, seed=1)
    assert random_search(space, 20, seed=1) == trials[:20]
    assert random_search(space, 20, seed=2) != trials[:20]
    for t in trials:
        assert 0.01 <= float(t["lr"]) <= 0.05 and 0.0001 <= float(t["wd"]) <= 0.1
        assert t["layers"] in {"2", "3", "4", "5"} and t["optimizer"] in {"sgd", "adam", "ftrl"}
    assert {t["layers"] for t in trials} == {"2", "3", "4", "5"}  # (each end drawn)
    below = sum(float(t["wd"]) < 0.0032 for t in trials)  # log-uniform: half below √(lo·hi)
    assert 70 < below < 130


@settings(max_examples=200, deadline=None)
@given(
    low=st.decimals(min_value=-100, max_value=100, places=3),
    width=st.decimals(min_value=0, max_value=50, places=3),
    step=st.one_of(st.none(), st.decimals(min_value="0.001", max_value=10, places=3)),
    kind=st.sampled_from(["int", "double"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_every_drawn_value_is_feasible_and_on_the_step(low, width, step, kind, seed) -> None:
    if kind == "int":
        low, width = low.to_integral_value(), width.to_integral_value()
        step = None if step is None else max(Decimal(1), step.to_integral_value())
    space = {"min": str(low), "max": str(low + width)}
    if step is not None:
        space["step"] = str(step)
    (parameter,) = params({"name": "x", "parameterType": kind, "feasibleSpace": space})
    if step is not None and math.floor((low + width) / step) * step < low:
        with pytest.raises(ValueError, match="no multiple of step"):
            random_search([parameter], 5, seed)
        return
    for trial in random_search([parameter], 5, seed):
        value = Decimal(trial["x"])
        assert low <= value <= low + width
        if step is not None:  # (hyperopt's multiples of the step, from 0)
            assert abs(float(value) / float(step) - round(float(value) / float(step))) < 1e-6
        if kind == "int":
            assert value == value.to_integral_value()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"parameterType": "float", "feasibleSpace": {"min": "1", "max": "2"}}, "parameterType"),
        ({"parameterType": "double"}, "feasibleSpace"),
        ({"parameterType": "double", "feasibleSpace": {}}, "feasibleSpace must be specified"),
        ({"parameterType": "int", "feasibleSpace": {"min": "1"}}, "needs min and max"),
        ({"parameterType": "int", "feasibleSpace": {"min": 1, "max": 2}}, 'write "1"'),
        ({"parameterType": "int", "feasibleSpace": {"min": "1.5", "max": "2"}}, "whole number"),
        ({"parameterType": "double", "feasibleSpace": {"min": "a", "max": "2"}}, "not a number"),
        ({"parameterType": "double", "feasibleSpace": {"min": "3", "max": "2"}}, "above max"),
        (
            {"parameterType": "double", "feasibleSpace": {"min": "1", "max": "2", "step": "0"}},
            "not positive",
        ),
        (
            {"parameterType": "double", "feasibleSpace": {"min": "1", "max": "2", "list": ["1"]}},
            "list is not for a double",
        ),
        (
            {"parameterType": "categorical", "feasibleSpace": {"list": ["a"], "max": "2"}},
            "min, max and step are not for a categorical",
        ),
        ({"parameterType": "discrete", "feasibleSpace": {"list": []}}, "give the discrete values"),
        (
            {
                "parameterType": "double",
                "feasibleSpace": {"min": "0", "max": "1", "distribution": "logUniform"},
            },
            "needs a positive min",
        ),
        (
            {
                "parameterType": "double",
                "feasibleSpace": {"min": "1", "max": "2", "distribution": "normal"},
            },
            "draws outside min..max",
        ),
    ],
)
def test_katibs_rules_for_a_parameter(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Parameter.model_validate({"name": "p", **spec})


def test_a_grid_needs_a_step_for_a_double_and_a_bounded_size() -> None:
    with pytest.raises(ValueError, match=r"a grid needs feasibleSpace\.step for a double"):
        grid(params(LR), 3, 0)
    wide = [
        {**LAYERS, "name": f"p{i}", "feasibleSpace": {"min": "1", "max": "100"}} for i in range(3)
    ]
    with pytest.raises(ValueError, match="the grid has 1,000,000 points"):
        grid(params(*wide), 3, 0)


def test_the_seed_is_random_state_else_the_experiments() -> None:
    assert seed_of({"random_state": "10"}, "exp") == 10
    assert seed_of({}, "exp") == seed_of({}, "exp") != seed_of({}, "x")
    assert 0 <= seed_of({}, "exp") <= 2**32 - 1  # (numpy's RandomState takes it)


@pytest.mark.parametrize(
    ("algorithm", "name", "value", "problem"),
    [
        ("grid", "random_state", "10", None),
        ("random", "random_state", "0", None),
        ("sobol", "random_state", "3", None),
        ("grid", "seed", "3", "unknown setting seed for algorithm grid"),
        ("random", "seed", "3", "unknown setting seed for algorithm random"),
        ("random", "random_state", "-1", "random_state should be great or equal than zero"),
        (
            "grid",
            "random_state",
            "ten",
            "failed to validate random_state(ten): invalid literal for int() with base 10: 'ten'",
        ),
        ("grid", "random_state", str(2**32), "random_state: Seed must be between 0 and 2**32 - 1"),
    ],
)
def test_settings_as_katibs_services_read_them(algorithm, name, value, problem) -> None:
    assert algorithms.problem(algorithm, name, value) == problem
