"""Katib's own trials (issue 53): the grid as Katib's optuna service orders it, each value's
text as it writes it, and random values quantized by hyperopt's laws. The few functions of
Katib's suggestion services (and of the libraries they pin) that decide them are vendored
here, with numpy, from their sources:

- kubeflow/katib 33c8ff4e5, `pkg/suggestion/v1beta1/internal/search_space.py`
  (`convert_to_combinations`) and `pkg/suggestion/v1beta1/optuna/base_service.py` (`_ask`:
  one `study.ask` per trial; `_tell`: succeeded trials only);
- optuna 3.3.0, `optuna/samplers/_grid.py` (`GridSampler.__init__`,
  `infer_relative_search_space`, `_get_unvisited_grid_ids`);
- hyperopt 0.2.5, `hyperopt/pyll/stochastic.py` (`quniform`, `qloguniform`).

Ours (aichor_iac/sweeps/space.py) is held to them on Katib's examples and on generated
spaces."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import yaml
from conftest import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

from aichor_iac.sweeps import numpy_legacy
from aichor_iac.sweeps.space import Parameter, grid


# --- vendored ---------------------------------------------------------------------------------
def convert_to_combinations(params: list[Parameter]) -> dict[str, list]:
    """Katib's `HyperParameterSearchSpace.convert_to_combinations` (its parameters' fields
    read as Katib's `convert_parameter` reads them: an int's step defaults to 1)."""
    combinations = {}
    for parameter in params:
        space = parameter.space
        if parameter.type == "int":
            step = space.step or 1
            combinations[parameter.name] = range(int(space.min), int(space.max) + 1, int(step))
        elif parameter.type == "double":
            double_list = np.arange(
                float(space.min), float(space.max) + float(space.step), float(space.step)
            )
            if double_list[-1] > float(space.max):
                double_list = double_list[:-1]
            combinations[parameter.name] = double_list
        else:
            combinations[parameter.name] = list(space.list)
    return combinations


class GridSampler:
    """optuna 3.3.0's, as Katib's service drives it: each trial asked while the earlier ones
    are running (asked, not told) or visited (told: succeeded)."""

    def __init__(self, search_space: dict[str, list], seed: int) -> None:
        self._search_space = {}
        for param_name, param_values in sorted(search_space.items()):
            self._search_space[param_name] = list(param_values)
        self._all_grids = list(itertools.product(*self._search_space.values()))
        self._param_names = sorted(search_space.keys())
        self._n_min_trials = len(self._all_grids)
        self._rng = np.random.RandomState(seed)

    def ask(self, visited_grids: list[int], running_grids: list[int]) -> int:
        unvisited_grids = set(range(self._n_min_trials)) - set(visited_grids) - set(running_grids)
        if len(unvisited_grids) == 0:
            unvisited_grids = set(range(self._n_min_trials)) - set(visited_grids)
        target_grids = list(unvisited_grids)
        return int(self._rng.choice(target_grids))


def katib_grid(params: list[Parameter], count: int, seed: int, parallel: int) -> list[dict]:
    """Katib's trials: `parallel` asked at first, then one more as each ends, in turn."""
    sampler = GridSampler(convert_to_combinations(params), seed)
    given_ids: list[int] = []
    for k in range(count):
        ended = max(0, k - parallel + 1)
        given_ids.append(sampler.ask(given_ids[:ended], given_ids[ended:]))
    return [
        {
            name: str(value)
            for name, value in zip(sampler._param_names, sampler._all_grids[g], strict=True)
        }
        for g in given_ids
    ]


def quniform(x: float, q: float) -> float:
    """hyperopt's `quniform` (and `qloguniform`, of its exponential) of a drawn `x`."""
    return float(np.round(x / q) * q)


# --- the checks -------------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), sizes=st.lists(st.integers(1, 5000), max_size=8))
def test_the_standard_librarys_random_state_draws_as_numpys(seed, sizes) -> None:
    theirs, ours = np.random.RandomState(seed), numpy_legacy.RandomState(seed)
    for size in sizes:
        items = list(range(size))
        assert ours.choice(items) == int(theirs.choice(items))


@settings(max_examples=300, deadline=None)
@given(start=st.floats(-50, 50), step=st.floats(0.0001, 5), steps=st.floats(0, 300))
def test_the_standard_librarys_arange_is_numpys(start, step, steps) -> None:
    stop = start + steps * step
    assert numpy_legacy.arange(start, stop, step) == np.arange(start, stop, step).tolist()


def katib_examples() -> list[tuple[str, dict]]:
    found = []
    for path in sorted((ROOT / "tests" / "katib").glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if (
                document
                and document.get("spec", {}).get("algorithm", {}).get("algorithmName") == "grid"
            ):
                found.append((path.name, document["spec"]))
    return found


@pytest.mark.parametrize("seed", [0, 10, 11, 2**32 - 1])
@pytest.mark.parametrize(("name", "spec"), katib_examples())
def test_katibs_grid_examples_give_katibs_trials(name: str, spec: dict, seed: int) -> None:
    params = [Parameter.model_validate(p) for p in spec["parameters"]]
    parallel = spec.get("parallelTrialCount", 3)
    count = min(spec.get("maxTrialCount", 10**9), math.prod(len(p.points()) for p in params))
    assert grid(params, count, seed, parallel) == katib_grid(params, count, seed, parallel)


names = st.sampled_from(["lr", "momentum", "layers", "optimizer", "a", "z"])
doubles = st.builds(
    lambda low, width, step: {
        "parameterType": "double",
        "feasibleSpace": {"min": str(low), "max": str(low + width), "step": str(step)},
    },
    st.decimals("-5", "5", places=3),
    st.decimals("0", "3", places=3),
    st.decimals("0.005", "1", places=3),
)
ints = st.builds(
    lambda low, width, step: {
        "parameterType": "int",
        "feasibleSpace": {"min": str(low), "max": str(low + width)}
        | ({"step": str(step)} if step else {}),
    },
    st.integers(-20, 20),
    st.integers(0, 30),
    st.one_of(st.none(), st.integers(1, 7)),
)
lists = st.builds(
    lambda kind, items: {"parameterType": kind, "feasibleSpace": {"list": items}},
    st.sampled_from(["categorical", "discrete"]),
    st.lists(st.text("abcxyz019.", min_size=1, max_size=4), min_size=1, max_size=5, unique=True),
)


@settings(max_examples=150, deadline=None)
@given(
    spaces=st.lists(
        st.tuples(names, st.one_of(doubles, ints, lists)),
        min_size=1,
        max_size=3,
        unique_by=lambda t: t[0],
    ),
    seed=st.integers(0, 2**32 - 1),
    parallel=st.integers(1, 6),
    share=st.floats(0.05, 1),
)
def test_any_grid_gives_katibs_trials_in_katibs_order(spaces, seed, parallel, share) -> None:
    params = [Parameter.model_validate({"name": n, **s}) for n, s in spaces]
    size = math.prod(len(p.points()) for p in params)
    if size > 3000:
        return
    count = max(1, int(size * share))
    assert grid(params, count, seed, parallel) == katib_grid(params, count, seed, parallel)


@settings(max_examples=300, deadline=None)
@given(
    kind=st.sampled_from(["int", "double", "log"]),
    low=st.decimals("0.01", "50", places=2),
    width=st.decimals("0", "50", places=2),
    step=st.decimals("0.01", "7", places=2),
    u=st.floats(0, 1),
)
def test_random_values_are_quantized_as_hyperopt_quantizes(kind, low, width, step, u) -> None:
    """Where hyperopt's multiple lies within min..max, it is ours; else ours is the nearest
    multiple inside (hyperopt's counts from 0, and can fall outside)."""
    if kind == "int":
        low, width, step = (v.to_integral_value() for v in (low, width, step))
        step = max(step, 1)
    space = {"min": str(low), "max": str(low + width), "step": str(step)}
    if kind == "log":
        space["distribution"] = "logUniform"
    parameter_type = "int" if kind == "int" else "double"
    parameter = Parameter.model_validate(
        {"name": "x", "parameterType": parameter_type, "feasibleSpace": space}
    )
    first, last = math.ceil(low / step), math.floor((low + width) / step)  # (exact: decimals)
    if first > last:  # (no multiple of the step within min..max: refused, by name)
        with pytest.raises(ValueError, match="no multiple of step"):
            parameter.quantized(0.0)
        return
    lo, hi, q = float(low), float(low + width), float(step)
    x = lo + u * (hi - lo)
    if kind == "log":
        x = math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))
    theirs, ours = quniform(x, q), parameter.quantized(x)
    assert lo <= ours <= hi
    if lo <= theirs <= hi:
        assert ours == theirs
    else:  # (the nearest multiple inside: the first or the last)
        assert ours in (min(max(first * q, lo), hi), min(max(last * q, lo), hi))
