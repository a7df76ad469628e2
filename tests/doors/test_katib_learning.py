"""Katib's algorithms that learn, as aichor_iac.sweeps runs them (issue 54): their settings
with Katib's names and defaults, refused in its services' words (aichor_iac/doors/katib/
settings.py); parameters as Katib's optuna service makes its search space
(`space.Parameter.dimension`)."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st
from learning_sweep import ended as as_ended
from learning_sweep import loss, sweep_file

from aichor_iac import doors
from aichor_iac.cli import main
from aichor_iac.experiment.trial import EARLY_STOPPED, FAILED, SUCCEEDED, Result, Stopping
from aichor_iac.problems import ManifestError
from aichor_iac.sweeps import algorithms
from aichor_iac.sweeps.learning import Dimension, suggest
from aichor_iac.sweeps.space import Parameter


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
    assert [algorithms.problem(algorithm, n, v) for n, v in given] == [None] * len(given)
    assert algorithms.sampler_settings(algorithm, given) == expected


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
    assert refused in (algorithms.problem(algorithm, name, value) or "")


def test_settings_become_the_samplers_arguments():
    given = [("n_startup_trials", "4"), ("random_state", "7"), ("n_ei_candidates", "5")]
    assert algorithms.sampler_settings("multivariate-tpe", given) == {
        "n_startup_trials": 4,
        "n_ei_candidates": 5,
    }
    given = [("n_initial_points", "3"), ("acq_func", "EI"), ("base_estimator", "GP")]
    assert algorithms.sampler_settings("bayesianoptimization", given) == {"n_startup_trials": 3}


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
    settings = algorithms.sampler_settings("tpe", [])
    for number in range(3):
        values = suggest(space, "tpe", settings, 1, False, number, [])
        assert 0.01 <= float(values["lr"]) <= 0.05
        assert 0.5 <= float(values["momentum"]) <= 0.9


# A sweep that learns, read by the door: the trials the results so far allow


def learning_sweep(name: str, ended: dict | None = None, **spec: object):
    """The example's trials known from `ended` (objectives, or Results), its spec changed."""
    data = yaml.safe_load((ROOT / "tests" / "katib" / name).read_text().split("---", 1)[1])
    data["spec"].update(spec)
    given = ended or {}
    if not all(isinstance(r, Result) for r in given.values()):
        given = as_ended(given)
    return doors.parse_all(yaml.safe_dump(data), name, given)


@pytest.mark.parametrize("name", ["tpe.yaml", "bayesian-optimization.yaml"])
def test_without_results_a_learning_sweep_knows_its_first_parallel_trials(name):
    trials = learning_sweep(name)
    assert [t.trial.index for t in trials] == [0, 1, 2]  # (parallelTrialCount: 3)
    first = trials[0].trial
    assert first.learns and len(first.names) == first.count == 12
    assert [t.trial.sweep for t in trials] == [first.sweep] * 3
    assert [t.name_in("dev") for t in trials] == list(first.names[:3])


def test_trial_k_is_known_once_the_trials_up_to_k_minus_parallel_have_ended():
    names = learning_sweep("tpe.yaml")[0].trial.names
    assert len(learning_sweep("tpe.yaml", {names[0]: 0.5})) == 4
    assert len(learning_sweep("tpe.yaml", {names[1]: 0.5})) == 3  # (trial 0 still runs)
    assert len(learning_sweep("tpe.yaml", {names[0]: 0.5, names[1]: None})) == 5
    assert len(learning_sweep("tpe.yaml", dict.fromkeys(names, 1.0))) == 12


@settings(max_examples=15, deadline=None)
@given(
    objectives=st.lists(
        st.one_of(st.none(), st.floats(-10, 10, allow_nan=False)), min_size=12, max_size=12
    ),
    extra=st.integers(0, 3),
)
def test_a_trials_values_depend_on_the_trials_before_it_alone(objectives, extra):
    """Trial k asked once trials 0..k-p ended is the same trial however many more have
    ended since: a loop that reads the cluster later, or again after a restart, asks it
    alike (parallelTrialCount 2, n_startup_trials 2: TPE learns from the third trial)."""
    spec = {"parallelTrialCount": 2, "maxTrialCount": 8, "maxFailedTrialCount": None}
    spec["algorithm"] = {
        "algorithmName": "tpe",
        "algorithmSettings": [{"name": "n_startup_trials", "value": "2"}],
    }
    names = learning_sweep("tpe.yaml", **spec)[0].trial.names
    results = dict(zip(names, objectives, strict=False))
    k = 6  # (known once trials 0 to 4 have ended)
    least = learning_sweep("tpe.yaml", {n: results[n] for n in names[: k - 1]}, **spec)
    more = learning_sweep("tpe.yaml", {n: results[n] for n in names[: k - 1 + extra]}, **spec)
    assert len(least) == k + 1
    assert [t.trial.values for t in more[: k + 1]] == [t.trial.values for t in least]


def test_a_trial_is_asked_from_the_results_of_the_trials_before_it():
    spec = {"parallelTrialCount": 1, "maxTrialCount": 6}
    spec["algorithm"] = {
        "algorithmName": "tpe",
        "algorithmSettings": [{"name": "n_startup_trials", "value": "2"}],
    }
    names = learning_sweep("tpe.yaml", **spec)[0].trial.names
    before = dict.fromkeys(names[:4], 0.1)
    low = learning_sweep("tpe.yaml", {**before, names[4]: -9.0}, **spec)  # (the best)
    high = learning_sweep("tpe.yaml", {**before, names[4]: 9.0}, **spec)  # (the worst)
    assert [t.trial.values for t in low[:5]] == [t.trial.values for t in high[:5]]
    assert low[5].trial.values != high[5].trial.values  # (trial 5 learned from trial 4's)


@pytest.mark.parametrize(
    ("algorithm", "reason"),
    [
        ("hyperband", "hyperband runs brackets of successive halving"),
        ("nelder-mead", "nelder-mead is unknown"),
    ],
)
def test_the_algorithms_not_run_here_are_refused_saying_which_are(algorithm, reason):
    with pytest.raises(ManifestError) as caught:
        learning_sweep("tpe.yaml", algorithm={"algorithmName": algorithm})
    (problem,) = caught.value.problems
    assert problem.path == "spec.algorithm.algorithmName"
    assert reason in problem.message
    assert "grid, random, sobol, tpe, multivariate-tpe, bayesianoptimization and cmaes" in (
        problem.message
    )


def test_without_the_search_extra_a_learning_sweep_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)  # (its import fails)
    with pytest.raises(ManifestError) as caught:
        learning_sweep("tpe.yaml")
    (problem,) = caught.value.problems
    assert problem.path == "spec.algorithm.algorithmName"
    assert "pip install 'aichor-iac[search]'" in problem.message


def test_a_preview_says_how_many_trials_wait_for_results(capsys):
    tpe, random = (str(ROOT / "tests" / "katib" / n) for n in ("tpe.yaml", "random.yaml"))

    def preview(*argv: str) -> str:
        assert main(["preview", *argv]) == 0
        return capsys.readouterr().out

    said = "sweep tpe depends on its trials' results: 3 of its 12 trials can start now"
    assert said in " ".join(preview(tpe).split())
    assert f"> [!NOTE]\n> {said}" in preview(tpe, "--output", "markdown")
    assert json.loads(preview(tpe, "--output", "json"))["laterTrials"][0].startswith(said)
    assert "laterTrials" not in json.loads(preview(random, "--output", "json"))


def best_of(algorithm: str, seed: int, trials: int = 24) -> float:
    """The best loss a sweep of the cheap objective of tests/local/test_learning_run.py finds
    when each trial ends as soon as it is asked (its trials: what a local run asks, as that
    test holds)."""
    losses: dict[str, float | None] = {}
    with tempfile.TemporaryDirectory() as folder:
        path = sweep_file(Path(folder), algorithm, seed, trials)
        while len(losses) < trials:
            for trial in doors.load_all(path, as_ended(losses)):
                losses.setdefault(trial.name, loss(dict(trial.trial.values)))
    return min(v for v in losses.values() if v is not None)


def test_tpe_finds_a_better_best_trial_than_random_for_most_seeds():
    """As Optuna's TPE does on its own (tests/sweeps/test_learning.py): 24 trials, two at a
    time, the first four random; 8 of these 10 seeds measured."""
    wins = sum(best_of("tpe", seed) < best_of("random", seed) for seed in range(10))
    assert wins >= 7, wins


# Early stopping: Katib's medianstop, each trial's rule from the trials it follows


def test_katibs_median_stop_example_knows_its_first_trials_with_no_rule_yet():
    trials = learning_sweep("median-stop.yaml")
    assert [t.trial.index for t in trials] == [0, 1]  # (parallelTrialCount 2)
    assert {t.trial.stopping for t in trials} == {Stopping(1, 2, None)}
    assert trials[0].trial.learns and trials[0].trial.count == 15


def test_a_trials_rule_is_the_mean_of_the_succeeded_trials_first_values_before_it():
    names = learning_sweep("median-stop.yaml")[0].trial.names
    results = {
        names[0]: Result(SUCCEEDED, 0.2, (0.4, 0.2, 0.1)),  # first two: 0.3 on average
        names[1]: Result(FAILED),  # (a failed trial has no say)
        names[2]: Result(SUCCEEDED, 0.5, (0.5,)),
        names[3]: Result(EARLY_STOPPED, 0.9, (0.9, 1.0)),  # (nor a stopped one)
    }
    trials = learning_sweep("median-stop.yaml", results)
    rules = [t.trial.stopping.rule for t in trials]
    assert len(rules) == 6  # (trials 0 to 3 ended: up to trial 5)
    assert rules[:2] == [None, None]
    assert rules[2] == pytest.approx(0.3)  # (trial 2 follows trial 0)
    assert rules[3] == rules[2]  # (trial 3 follows trials 0 and 1: 1 failed)
    assert rules[4] == pytest.approx((0.3 + 0.5) / 2)  # (trial 4 follows trials 0 to 2)
    assert rules[5] == rules[4]  # (trial 5 follows trials 0 to 3: 3 was stopped)


@pytest.mark.parametrize(
    ("early", "path", "refused"),
    [
        ({"algorithmName": "hyperband"}, "algorithmName", "unknown algorithm name hyperband"),
        (
            {"algorithmName": "medianstop", "algorithmSettings": [{"name": "k", "value": "1"}]},
            "algorithmSettings.0",
            "unknown setting k for algorithm medianstop",
        ),
        (
            {
                "algorithmName": "medianstop",
                "algorithmSettings": [{"name": "start_step", "value": "0"}],
            },
            "algorithmSettings.0",
            "start_step must be greater or equal than one (>=1)",
        ),
    ],
)
def test_early_stopping_katib_refuses_is_refused_at_its_line(early, path, refused):
    with pytest.raises(ManifestError) as caught:
        learning_sweep("median-stop.yaml", earlyStopping=early)
    (problem,) = caught.value.problems
    assert (problem.path, refused in problem.message) == (f"spec.earlyStopping.{path}", True)


# CMA-ES: its state from generation to generation, asked again from the start


def test_cmaes_finds_a_better_best_trial_than_random_for_most_seeds():
    """Optuna's CmaEsSampler as Katib's optuna service builds it, each trial asked again in
    one study after the results it was asked after (`learning.replayed`): 9 of 10 measured."""
    wins = sum(best_of("cmaes", seed) < best_of("random", seed) for seed in range(10))
    assert wins >= 7, wins


def test_a_cmaes_trial_is_the_same_however_many_more_trials_have_ended(tmp_path: Path):
    path = sweep_file(tmp_path, "cmaes", 3, 16)
    names = doors.load_all(path)[0].trial.names
    results = {n: loss({"x": "0.1", "y": str(i / 20)}) for i, n in enumerate(names)}
    fewer = doors.load_all(path, as_ended({n: results[n] for n in names[:9]}))
    more = doors.load_all(path, as_ended({n: results[n] for n in names[:13]}))
    assert len(fewer) == 11 and len(more) == 15
    assert [t.trial.values for t in more[:11]] == [t.trial.values for t in fewer]


@pytest.mark.parametrize(
    ("change", "path", "refused"),
    [
        (
            {"algorithmSettings": [{"name": "restart_strategy", "value": "bipop"}]},
            "spec.algorithm.algorithmSettings.0",
            "restart_strategy bipop is not supported in CMAES optimization",
        ),
        (
            {"algorithmSettings": [{"name": "sigma", "value": "-1"}]},
            "spec.algorithm.algorithmSettings.0",
            "sigma should be greate or equal than zero",
        ),
    ],
)
def test_cmaes_settings_katib_refuses_are_refused_in_its_words(change, path, refused):
    with pytest.raises(ManifestError) as caught:
        learning_sweep("cma-es.yaml", algorithm={"algorithmName": "cmaes", **change})
    (problem,) = caught.value.problems
    assert (problem.path, refused in problem.message) == (path, True)


def test_cmaes_needs_two_continuous_parameters_as_katibs_service_says():
    data = yaml.safe_load((ROOT / "tests/katib/cma-es.yaml").read_text().split("---", 1)[1])
    lr = data["spec"]["parameters"][0]
    with pytest.raises(ManifestError) as caught:  # (and momentum's reference, refused too)
        learning_sweep("cma-es.yaml", parameters=[lr])
    found = {p.path: p.message for p in caught.value.problems}
    assert "cmaes only supports two or more dimensional" in found["spec.parameters"]


def test_katibs_cmaes_example_knows_its_first_trials():
    trials = learning_sweep("cma-es.yaml")
    assert [t.trial.index for t in trials] == [0, 1, 2] and trials[0].trial.learns


def test_no_trial_is_asked_once_the_sweep_has_failed():
    """Katib creates no trial once as many have failed as maxFailedTrialCount (tpe.yaml: 3,
    three at a time): trial 6 follows trials 0 to 3, three of them failed."""
    names = learning_sweep("tpe.yaml")[0].trial.names
    two = {names[0]: None, names[1]: None, names[2]: 0.5, names[3]: 0.5}
    three = {**two, names[3]: None}
    assert len(learning_sweep("tpe.yaml", two)) == 7
    assert len(learning_sweep("tpe.yaml", three)) == 6  # (trial 6 would follow 3 failures)


def test_without_the_cmaes_package_a_cmaes_sweep_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "cmaes", None)  # (Optuna does not install it)
    with pytest.raises(ManifestError) as caught:
        learning_sweep("cma-es.yaml")
    (problem,) = caught.value.problems
    assert problem.path == "spec.algorithm.algorithmName"
    assert "cmaes needs the cmaes package: pip install 'aichor-iac[search]'" in problem.message
