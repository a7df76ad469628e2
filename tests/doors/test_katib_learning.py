"""Katib's algorithms that learn, as aichor_iac.search runs them (issue 54): their settings
with Katib's names and defaults, refused in its services' words (aichor_iac/doors/katib/
settings.py); parameters as Katib's optuna service makes its search space
(`space.Parameter.dimension`)."""

from __future__ import annotations

import pytest
import yaml
from conftest import ROOT

from aichor_iac.doors.katib import settings as katib_settings
from aichor_iac.doors.katib.space import Parameter
from aichor_iac.search.learning import Dimension, suggest


def example(name: str) -> dict:
    (data,) = [d for d in yaml.safe_load_all((ROOT / "tests" / "katib" / name).read_text()) if d]
    return data["spec"]


@pytest.mark.parametrize(
    ("name", "algorithm", "expected"),
    [
        ("tpe.yaml", "tpe", {"n_startup_trials": 10, "n_ei_candidates": 24}),
        ("bayesian-optimization.yaml", "bayesianoptimization", {"n_startup_trials": 10}),
    ],
)
def test_katibs_examples_settings_are_taken_with_katibs_defaults(name, algorithm, expected):
    spec = example(name)
    assert spec["algorithm"]["algorithmName"] == algorithm
    given = [(s["name"], s["value"]) for s in spec["algorithm"].get("algorithmSettings", [])]
    assert [katib_settings.problem(algorithm, n, v) for n, v in given] == [None] * len(given)
    assert katib_settings.sampler_settings(algorithm, given) == expected


@pytest.mark.parametrize(
    ("algorithm", "name", "value", "refused"),
    [
        ("tpe", "seed", "1", "unknown setting seed for algorithm tpe"),
        ("tpe", "n_startup_trials", "-1", "n_startup_trials should be greate or equal than zero"),
        ("multivariate-tpe", "n_ei_candidates", "x", "failed to validate n_ei_candidates(x)"),
        ("tpe", "random_state", str(2**32), "random_state: Seed must be between 0 and 2**32 - 1"),
        ("bayesianoptimization", "n_initial_points", "-2", "should be great or equal than zero"),
        ("bayesianoptimization", "base_estimator", "RF", "base_estimator RF is not supported"),
        ("bayesianoptimization", "acq_func", "LCB", "here expected improvement"),
        ("bayesianoptimization", "acq_optimizer", "adam", "acq_optimizer adam is not supported"),
        ("bayesianoptimization", "gamma", "1", "unknown setting gamma for algorithm"),
    ],
)
def test_a_setting_katibs_service_refuses_is_refused_in_its_words(algorithm, name, value, refused):
    assert refused in (katib_settings.problem(algorithm, name, value) or "")


def test_settings_become_the_samplers_arguments():
    given = [("n_startup_trials", "4"), ("random_state", "7"), ("n_ei_candidates", "5")]
    assert katib_settings.sampler_settings("multivariate-tpe", given) == {
        "n_startup_trials": 4,
        "n_ei_candidates": 5,
    }
    given = [("n_initial_points", "3"), ("acq_func", "EI"), ("base_estimator", "GP")]
    assert katib_settings.sampler_settings("bayesianoptimization", given) == {"n_startup_trials": 3}


def parameter(kind: str, **space: object) -> Parameter:
    return Parameter.model_validate({"name": "p", "parameterType": kind, "feasibleSpace": space})


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (parameter("int", min="2", max="8"), Dimension("p", "int", 2, 8)),
        (parameter("int", min="2", max="8", step="2"), Dimension("p", "int", 2, 8, 2)),
        (
            parameter("int", min="1", max="64", distribution="logUniform", step="4"),
            Dimension("p", "int", 1, 64, 1, log=True),  # (Katib's: step 1 on a log scale)
        ),
        (parameter("double", min="0.1", max="0.9"), Dimension("p", "float", 0.1, 0.9)),
        (
            parameter("double", min="0.1", max="0.9", step="0.2"),
            Dimension("p", "float", 0.1, 0.9, 0.2),
        ),
        (
            parameter("double", min="0.001", max="1", step="0.1", distribution="logUniform"),
            Dimension("p", "float", 0.001, 1.0, log=True),  # (no step on a log scale)
        ),
        (parameter("categorical", list=["a", "b"]), Dimension("p", "choice", choices=("a", "b"))),
        (parameter("discrete", list=["1", "10"]), Dimension("p", "choice", choices=("1", "10"))),
    ],
)
def test_parameters_become_dimensions_as_katibs_optuna_service_makes_them(given, expected):
    assert given.dimension() == expected


def test_a_katib_tpe_examples_first_trials_are_in_its_space():
    spec = example("tpe.yaml")
    parameters = [Parameter.model_validate(p) for p in spec["parameters"]]
    space = [p.dimension() for p in parameters]
    settings = katib_settings.sampler_settings("tpe", [])
    for number in range(3):
        values = suggest(space, "tpe", settings, 1, False, number, [])
        assert 0.01 <= float(values["lr"]) <= 0.05
        assert 0.5 <= float(values["momentum"]) <= 0.9
