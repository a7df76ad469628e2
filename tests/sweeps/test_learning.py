"""A search that learns (aichor_iac/sweeps/learning.py, issue 54): the next trial as a pure
function of the search, its seed, the trial's number and the history; TPE finds better trials
than the random ones it starts with; values inside the space, written as a trial gets them."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from aichor_iac.sweeps.learning import Dimension, Told, suggest

SPACE = (
    Dimension("lr", "float", 1e-4, 1e-1, log=True),
    Dimension("momentum", "float", 0.5, 0.99),
    Dimension("layers", "int", 1, 8),
    Dimension("dropout", "float", 0.0, 0.5, step=0.1),
    Dimension("optimizer", "choice", choices=("sgd", "adam", "ftrl")),
)


def loss(values: dict[str, str]) -> float:
    """A cheap objective of the five parameters, lowest at lr 10^-2.5, momentum 0.9, 5
    layers, dropout 0.2 and adam."""
    return (
        (math.log10(float(values["lr"])) + 2.5) ** 2
        + 4 * (float(values["momentum"]) - 0.9) ** 2
        + 0.1 * (int(values["layers"]) - 5) ** 2
        + (float(values["dropout"]) - 0.2) ** 2
        + (0 if values["optimizer"] == "adam" else 0.5)
    )


def run(algorithm: str, seed: int, trials: int = 30, parallel: int = 2, **settings) -> list:
    """A sweep as the loop runs it: trial k is asked for once trials 0..k-parallel have ended
    (the later ones still run), each told its objective."""
    asked, found = [], []
    for number in range(trials):
        ended = number - parallel + 1
        history = [
            Told(tuple(values.items()), found[i], True)
            if i < ended
            else Told(tuple(values.items()))
            for i, values in enumerate(asked)
        ]
        values = suggest(SPACE, algorithm, settings, seed, False, number, history)
        asked.append(values)
        found.append(loss(values))
    return list(zip(asked, found, strict=True))


def test_the_same_search_asks_the_same_trials_and_each_trial_its_own_values():
    first, again = run("tpe", 7), run("tpe", 7)
    assert first == again
    assert len({tuple(v.items()) for v, _ in first}) == len(first)
    assert run("tpe", 8) != first


@pytest.mark.parametrize("algorithm", ["tpe", "multivariate-tpe"])
def test_tpe_finds_better_trials_than_the_random_ones_it_starts_with_for_most_seeds(algorithm):
    """As Optuna's TPE does on its own: against the same sampler never past its random
    start (`n_startup_trials` above the trials), with the same seeds."""
    better = sum(
        min(f for _, f in run(algorithm, seed)) < min(f for _, f in run("tpe", seed, **RANDOM))
        for seed in range(10)
    )
    assert better >= 7


RANDOM = {"n_startup_trials": 1000}


def test_each_value_is_inside_its_space_written_as_a_trial_gets_it():
    for values, _ in run("tpe", 3, trials=15):
        assert 1e-4 <= float(values["lr"]) <= 1e-1
        assert 0.5 <= float(values["momentum"]) <= 0.99
        assert values["layers"].isdigit() and 1 <= int(values["layers"]) <= 8
        assert values["dropout"] in ("0.0", "0.1", "0.2", "0.30000000000000004", "0.4", "0.5")
        assert values["optimizer"] in ("sgd", "adam", "ftrl")
        assert float(values["lr"]) == float(repr(float(values["lr"])))


def test_a_trial_of_another_space_is_left_out_and_one_without_an_objective_told_as_failed():
    """A trial whose values the space no longer holds (the space changed) is left out: the
    next trial is the same as without it. One that ended without an objective is told as
    failed, not as a result: the next trial is not the one a best result there would give."""
    history = [Told(tuple(v.items()), f, True) for v, f in run("tpe", 5, trials=12)]
    alone = suggest(SPACE, "tpe", {}, 5, False, 12, history)
    outside = {**dict(history[0].values), "layers": "99"}
    with_others = [*history, Told(tuple(outside.items()), 0.0, True)]
    assert suggest(SPACE, "tpe", {}, 5, False, 12, with_others) == alone
    values = history[1].values
    failed = suggest(SPACE, "tpe", {}, 5, False, 12, [*history, Told(values, None, True)])
    best = suggest(SPACE, "tpe", {}, 5, False, 12, [*history, Told(values, 0.0, True)])
    assert failed != best and failed.keys() == alone.keys()


def test_a_gaussian_process_learns_too():
    """Optuna's GPSampler (where Katib's bayesianoptimization runs scikit-optimize)."""
    space = SPACE[:2]
    found = [f for _, f in run_space(space, "gp", 1, trials=14, n_startup_trials=4)]
    assert min(found[4:]) < min(found[:4])


def run_space(space, algorithm, seed, trials, **settings):
    asked, found = [], []
    for number in range(trials):
        history = [Told(tuple(v.items()), f, True) for v, f in zip(asked, found, strict=True)]
        values = suggest(space, algorithm, settings, seed, False, number, history)
        asked.append(values)
        found.append(
            (math.log10(float(values["lr"])) + 2.5) ** 2 + (float(values["momentum"]) - 0.9) ** 2
        )
    return list(zip(asked, found, strict=True))


def test_without_optuna_a_search_says_what_to_install():
    program = (
        "import sys; sys.modules['optuna'] = None\n"
        "from aichor_iac.sweeps.learning import Dimension, suggest\n"
        "try:\n"
        "    suggest([Dimension('x', 'int', 0, 3)], 'tpe', {}, 1, False, 0, [])\n"
        "except ImportError as error:\n"
        "    print(error)\n"
    )
    found = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert found.stdout.strip() == (
        "a search that learns needs Optuna: pip install 'aichor-iac[search]'"
    )
