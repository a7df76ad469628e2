"""Kubeflow's v2 SDK sweep (`OptimizerClient().optimize`, issue 41) as its trials: the SDK's
objects (stand-ins with their fields: the SDK is not installed here) or plain data, each trial
the function's TrainJob with its values, the same sweep on every call."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import pytest

from aichor_iac import engine, experiment_from_optimizer
from aichor_iac.problems import ManifestError


def train(lr, optimizer, epochs):  # (the function each trial runs)
    print(f"loss={float(lr) / epochs}")


class Direction(Enum):  # the SDK's stand-ins, with its field names
    MINIMIZE = "minimize"
    MAXIMIZE = "maximize"


@dataclass
class FeasibleSpace:
    min: str | None = None
    max: str | None = None
    list: list[str] | None = None
    distribution: str | None = None


@dataclass
class ParameterSpec:
    parameter_type: str
    feasible_space: FeasibleSpace
    literal_values: bool = False


@dataclass
class CustomTrainer:
    func: Any
    func_args: dict[str, Any] = field(default_factory=dict)
    num_nodes: int = 1


@dataclass
class TrainJobTemplate:
    trainer: CustomTrainer
    runtime: str = "torch-distributed"


@dataclass
class TrialConfig:
    num_trials: int = 10
    parallel_trials: int = 1
    max_failed_trials: int | None = None


@dataclass
class Objective:
    metric: str = "loss"
    direction: Direction = Direction.MINIMIZE


class GridSearch:
    algorithm_name = "grid"


@dataclass
class RandomSearch:
    random_state: int | None = None
    algorithm_name: str = "random"


SPACE = {
    "lr": ParameterSpec("double", FeasibleSpace("0.001", "0.1", distribution="logUniform")),
    "optimizer": ParameterSpec("categorical", FeasibleSpace(list=["sgd", "adam"])),
}


def args_of(objects: list[dict[str, Any]], trial: str) -> dict[str, Any]:
    (config_map,) = [o for o in objects if o["metadata"]["name"] == f"{trial}-function"]
    return json.loads(config_map["data"]["args.json"])


def test_the_sdks_random_search_is_its_trials_each_the_function_with_its_values() -> None:
    template = TrainJobTemplate(CustomTrainer(train, {"epochs": 2}))
    trials = experiment_from_optimizer(
        template,
        search_space=SPACE,
        trial_config=TrialConfig(num_trials=6, parallel_trials=2),
        objectives=[Objective(), Objective("accuracy", Direction.MAXIMIZE)],
        algorithm=RandomSearch(random_state=7),
    )
    assert len(trials) == 6 and [t.trial.waits_for for t in trials] == [None, None, 0, 1, 2, 3]
    assert all(t.name.startswith("train-") for t in trials)
    objective = trials[0].trial.objective
    assert (objective.metric, objective.direction, objective.additional) == (
        "loss",
        "minimize",
        ("accuracy",),
    )
    objects = engine.render(list(trials))
    for trial in trials:
        values = dict(trial.trial.values)
        assert 0.001 <= float(values["lr"]) <= 0.1 and values["optimizer"] in ("sgd", "adam")
        assert args_of(objects, trial.name) == {"epochs": 2, **values}  # (as Katib puts text)
    again = experiment_from_optimizer(
        template, search_space=SPACE, trial_config=TrialConfig(6, 2), algorithm=RandomSearch(7)
    )
    assert [t.trial.values for t in again] == [t.trial.values for t in trials]


def test_grid_search_of_plain_data_and_literal_choices() -> None:
    space = {
        "lr": {
            "parameterType": "double",
            "feasibleSpace": {"min": "0.1", "max": "0.3", "step": "0.1"},
        },
        "epochs": ParameterSpec("categorical", FeasibleSpace(list=["1", "2"]), literal_values=True),
    }
    trials = experiment_from_optimizer(
        {"trainer": {"func": train, "func_args": {"optimizer": "sgd"}}},
        search_space=space,
        trial_config={"num_trials": 10, "parallel_trials": 3},
        algorithm=GridSearch(),
        name="grid-study",
    )
    combos = {tuple(sorted(dict(t.trial.values).items())) for t in trials}
    assert len(trials) == 6 and len(combos) == 6  # the whole grid (3 by 2), each point once
    # (as Katib's grid gives them: numpy's arange, binary noise and all)
    assert {dict(t.trial.values)["lr"] for t in trials} == {"0.1", "0.2", "0.30000000000000004"}
    objects = engine.render(list(trials))
    assert all(isinstance(args_of(objects, t.name)["epochs"], int) for t in trials)
    assert all(t.name.startswith("grid-study-") for t in trials)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"search_space": {}}, "Search space must be set"),
        (
            {"search_space": SPACE, "trial_config": TrialConfig(max_failed_trials=11)},
            "spec.maxFailedTrialCount: 11 is above maxTrialCount 10",
        ),
        ({"search_space": SPACE, "algorithm": {"algorithmName": "pbt"}}, "pbt is population"),
        (
            {"search_space": {"lr": ParameterSpec("double", FeasibleSpace("1", "0"))}},
            "above max",
        ),
    ],
)
def test_what_the_sweep_cannot_be_is_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        experiment_from_optimizer(TrainJobTemplate(CustomTrainer(train)), **options)
