"""Kubeflow Trainer's OptimizationJob as a sweep of TrainJobs (issue 54, item 4): checked against
its CRD of trainer main and its CEL rules, `numTrials` TrainJobs at most `parallelTrials` at
once, each with its values as `KUBEFLOW_TRAINER_OPT_<NAME>` and as an annotation; random, grid,
and the algorithms that learn under aichor-iac's annotation."""

from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from learning_sweep import ended as as_ended
from learning_sweep import reported_median_stop

from aichor_iac import doors, engine, pods
from aichor_iac.doors.trainer import optimization
from aichor_iac.doors.trainer.runtimes import RUNTIMES
from aichor_iac.experiment.trial import Stopping
from aichor_iac.pods.stopping import REPORTED_FORMAT
from aichor_iac.problems import ManifestError
from aichor_iac.reading import crd
from aichor_iac.settings import Settings
from aichor_iac.sweeps.collect import STOP

HERE = ROOT / "tests" / "trainer_optimization"


def sample(name: str = "random.yaml") -> dict:
    return yaml.safe_load((HERE / name).read_text())


def written(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "opt.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def trials(data: dict, tmp_path: Path, ended: dict | None = None) -> list:
    return list(doors.load_all(written(tmp_path, data), as_ended(ended or {})))


def env_of(resources: list, trial: str) -> dict[str, str]:
    """The trainer container's variables of a trial's first Job."""
    (job,) = [r for r in resources if r.type.endswith("batch/v1:Job") and r.name.startswith(trial)][
        :1
    ]
    container = job.inputs["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def test_the_proposals_sample_is_numtrials_trainjobs_parallel_trials_at_once(tmp_path):
    found = trials(sample(), tmp_path)
    assert len(found) == 20
    assert [t.trial.index for t in found] == list(range(20))
    assert {t.trial.parallel for t in found} == {4} and {t.trial.count for t in found} == {20}
    assert [t.trial.waits_for for t in found[:6]] == [None] * 4 + [0, 1]
    names = [t.name for t in found]
    assert len(set(names)) == 20
    assert all(n.startswith("random-tuning-mvp-trial-") and len(n) == 29 for n in names)
    for t in found:
        values = dict(t.trial.values)
        assert 0.0001 <= float(values["learning_rate"]) <= 0.1
        assert values["batch_size"] in ("16", "32", "64")
        assert t.trial.objective.metric == "val_loss"
        assert t.trial.objective.direction == "minimize"


def test_each_trial_gets_its_values_as_env_in_trainer_and_as_an_annotation(tmp_path):
    first = trials(sample(), tmp_path)[0]
    rendering = engine.expand(first, Settings())
    values = dict(first.trial.values)
    env = env_of(rendering.resources, first.name)
    assert env["KUBEFLOW_TRAINER_OPT_LEARNING_RATE"] == values["learning_rate"]
    assert env["KUBEFLOW_TRAINER_OPT_BATCH_SIZE"] == values["batch_size"]
    jobs = [r for r in rendering.resources if r.type.endswith("batch/v1:Job")]
    assert jobs
    expected = [{"name": "learning_rate", "value": values["learning_rate"]}]
    expected.append({"name": "batch_size", "value": values["batch_size"]})
    for job in jobs:  # (on each Job and its pods)
        for metadata in (job.inputs["metadata"], job.inputs["spec"]["template"]["metadata"]):
            assert json.loads(metadata["annotations"][optimization.ASSIGNMENT]) == expected
            assert metadata["labels"][optimization.LABEL] == "random-tuning-mvp"


@pytest.mark.parametrize(
    ("name", "variable"),
    [
        ("lr", "KUBEFLOW_TRAINER_OPT_LR"),
        ("learning_rate", "KUBEFLOW_TRAINER_OPT_LEARNING_RATE"),
        ("model.hidden-size", "KUBEFLOW_TRAINER_OPT_MODEL_HIDDEN_SIZE"),
        ("Dropout2", "KUBEFLOW_TRAINER_OPT_DROPOUT2"),
    ],
)
def test_a_parameters_variable_is_its_name_upper_cased(name, variable):
    assert optimization.env_name(name) == variable


def test_the_template_keeps_its_own_env_and_nodes(tmp_path):
    found = trials(sample("grid.yaml"), tmp_path)
    rendering = engine.expand(found[0], Settings())
    env = env_of(rendering.resources, found[0].name)
    assert env["EPOCHS"] == "3"
    assert {"KUBEFLOW_TRAINER_OPT_OPTIMIZER", "KUBEFLOW_TRAINER_OPT_LR"} <= set(env)
    (job,) = [r for r in rendering.resources if r.type.endswith("batch/v1:Job")]
    assert job.inputs["spec"]["completions"] == 2  # (trainer.numNodes)


def test_grid_gives_every_combination_once_and_at_most_numtrials(tmp_path):
    data = sample("grid.yaml")
    found = trials(data, tmp_path)
    combinations = {tuple(sorted(dict(t.trial.values).items())) for t in found}
    expected = {
        tuple(sorted({"optimizer": o, "lr": lr}.items()))
        for o, lr in itertools.product(("adam", "sgd"), ("0.1", "0.01", "0.001"))
    }
    assert len(found) == 6 and combinations == expected  # (numTrials 10: the whole grid)
    data["spec"]["numTrials"] = 4
    assert len(trials(data, tmp_path)) == 4


def test_random_with_a_seed_gives_the_same_trials_and_another_seed_others(tmp_path):
    data = sample()
    data["spec"]["searchAlgorithm"] = {"random": {"seed": 42}}
    once = [t.trial.values for t in trials(data, tmp_path)]
    assert once == [t.trial.values for t in trials(copy.deepcopy(data), tmp_path)]
    data["spec"]["searchAlgorithm"]["random"]["seed"] = 43
    assert once != [t.trial.values for t in trials(data, tmp_path)]


def test_an_algorithm_that_learns_asks_as_the_katib_sweep_of_the_same_space(tmp_path):
    # The annotation's tpe is Katib's: the same space, settings and seed ask the same trials
    # from the same results, whichever door reads the sweep
    data = sample("tpe.yaml")
    data["metadata"]["annotations"][optimization.ALGORITHM] = (
        '{"tpe": {"n_startup_trials": "2", "random_state": "5"}}'
    )
    data["spec"]["numTrials"] = 6
    first = trials(data, tmp_path)
    assert len(first) == 2 and first[0].trial.learns  # (parallelTrials known without results)
    objectives = {first[0].name: 0.5, first[1].name: 0.25}
    grown = trials(data, tmp_path, objectives)
    assert len(grown) == 4 and [t.trial.values for t in grown[:2]] == [
        t.trial.values for t in first
    ]
    katib = {
        "apiVersion": "kubeflow.org/v1beta1",
        "kind": "Experiment",
        "metadata": {"name": "tpe-tuning"},
        "spec": {
            "objective": {"type": "minimize", "objectiveMetricName": "loss"},
            "algorithm": {
                "algorithmName": "tpe",
                "algorithmSettings": [
                    {"name": "n_startup_trials", "value": "2"},
                    {"name": "random_state", "value": "5"},
                ],
            },
            "parallelTrialCount": 2,
            "maxTrialCount": 6,
            "parameters": [
                {
                    "name": "x",
                    "parameterType": "double",
                    "feasibleSpace": {"min": "-1", "max": "1"},
                },
                {
                    "name": "y",
                    "parameterType": "double",
                    "feasibleSpace": {"min": "-1", "max": "1"},
                },
                {
                    "name": "layers",
                    "parameterType": "int",
                    "feasibleSpace": {"min": "1", "max": "8"},
                },
            ],
            "trialTemplate": {
                "trialParameters": [{"name": "x", "reference": "x"}],
                "trialSpec": {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "spec": {
                        "template": {
                            "spec": {
                                "restartPolicy": "Never",
                                "containers": [{"name": "m", "image": "python:3.12"}],
                            }
                        }
                    },
                },
            },
        },
    }
    path = tmp_path / "katib.yaml"
    path.write_text(yaml.safe_dump(katib))
    katib_first = list(doors.load_all(path))
    by_index = {katib_first[i].name: v for i, v in enumerate((0.5, 0.25))}
    katib_grown = list(doors.load_all(path, as_ended(by_index)))
    assert [t.trial.values for t in katib_grown] == [t.trial.values for t in grown]


def test_the_spec_seed_seeds_an_algorithm_that_learns_without_random_state(tmp_path):
    data = sample("tpe.yaml")
    once = [t.trial.values for t in trials(data, tmp_path)]
    data["spec"]["searchAlgorithm"]["random"]["seed"] = 8
    assert once != [t.trial.values for t in trials(data, tmp_path)]


def refusal(data: dict, tmp_path: Path) -> str:
    with pytest.raises(ManifestError) as error:
        trials(data, tmp_path)
    return str(error.value)


def _set(data: dict, path: str, value: object) -> dict:
    node = data
    *parents, last = path.split(".")
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return data


ANNOTATION = f"metadata.annotations.{optimization.ALGORITHM}"


@pytest.mark.parametrize(
    ("file", "edit", "words"),
    [
        # the CRD's schema and its CEL rules, in the API server's words
        (
            "random.yaml",
            ("spec.objectives.0.direction", "minimize"),
            'spec.objectives.0.direction: Unsupported value: "minimize": supported values: '
            '"Maximize", "Minimize"',
        ),
        (
            "random.yaml",
            ("spec.parallelTrials", 30),
            'spec: Invalid value: "object": parallelTrials cannot exceed numTrials',
        ),
        (
            "random.yaml",
            ("spec.searchAlgorithm", {"grid": {}}),
            "Grid search requires all parameters to be Categorical",
        ),
        (
            "random.yaml",
            ("spec.parameters.0.searchSpace", {"logUniform": {"min": "0", "max": "1"}}),
            "min must be strictly greater than 0",
        ),
        (
            "random.yaml",
            ("spec.parameters.0.searchSpace", {"uniform": {"min": "1", "max": "1"}}),
            "min must be strictly less than max",
        ),
        (
            "random.yaml",
            ("spec.trainJobTemplate.metadata", {"name": "x"}),
            "name and namespace cannot be set in a template.",
        ),
        ("random.yaml", ("spec.numTrials", 101), "spec.numTrials: Invalid value: 101"),
        # its trials' TrainJob, by the TrainJob door, at the template's path
        (
            "random.yaml",
            ("spec.trainJobTemplate.spec.runtimeRef.name", "pytorch-distributed"),
            "spec.trainJobTemplate.spec.runtimeRef.name",
        ),
        # what the CRD does not say
        (
            "random.yaml",
            ("metadata.name", "a" * 52),
            "metadata.name: may not be longer than 51 characters",
        ),
        (
            "random.yaml",
            ("spec.parameters.1.name", "LEARNING-RATE"),
            "spec.parameters.1.name: its variable KUBEFLOW_TRAINER_OPT_LEARNING_RATE is "
            "learning_rate's too: rename one",
        ),
        (
            "random.yaml",
            (
                "spec.trainJobTemplate.spec.trainer.env",
                [{"name": "KUBEFLOW_TRAINER_OPT_BATCH_SIZE", "value": "8"}],
            ),
            "spec.trainJobTemplate.spec.trainer.env.0.name: KUBEFLOW_TRAINER_OPT_BATCH_SIZE is "
            "set for each trial from its parameter batch_size: remove it",
        ),
        (
            "random.yaml",
            (
                "spec.parameters.0.searchSpace",
                {"uniform": {"min": "0.5", "max": "3", "type": "Int"}},
            ),
            "spec.parameters.0.searchSpace.uniform: '0.5' is not a whole number",
        ),
        # the algorithms that learn, under the annotation
        ("tpe.yaml", (ANNOTATION, "{tpe: [}"), f"{ANNOTATION}: invalid YAML"),
        ("tpe.yaml", (ANNOTATION, "tpe"), f"{ANNOTATION}: give one algorithm and its settings"),
        (
            "tpe.yaml",
            (ANNOTATION, '{"hyperband": {}}'),
            f"{ANNOTATION}: 'hyperband' is not read here: give one algorithm and its settings",
        ),
        (
            "tpe.yaml",
            (ANNOTATION, '{"tpe": {"seed": "1"}}'),
            f"{ANNOTATION}: unknown setting seed for algorithm tpe",
        ),
        (
            "random.yaml",
            (ANNOTATION, '{"cmaes": {}}'),
            "spec.parameters: cmaes only supports two or more dimensional continuous",
        ),
        (
            "grid.yaml",
            ("metadata.annotations", {optimization.ALGORITHM: '{"tpe": {}}'}),
            "spec.searchAlgorithm.grid: tpe (the annotation aichor.ai/search-algorithm) "
            "replaces random search, not grid: remove grid",
        ),
    ],
)
def test_what_is_refused_is_named_at_its_field(file, edit, words, tmp_path):
    data = sample(file)
    if edit[0] == ANNOTATION:
        data["metadata"].setdefault("annotations", {})[optimization.ALGORITHM] = edit[1]
    else:
        _set(data, *edit)
    assert words in refusal(data, tmp_path)


def test_cmaes_takes_two_continuous_parameters(tmp_path):
    data = sample("tpe.yaml")
    data["metadata"]["annotations"][optimization.ALGORITHM] = '{"cmaes": {"sigma": "0.5"}}'
    assert len(trials(data, tmp_path)) == 2


def test_objects_beside_are_refused_and_a_runtime_beside_is_read(tmp_path):
    data = sample("grid.yaml")
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {}}
    path = tmp_path / "opt.yaml"
    path.write_text(yaml.safe_dump_all([data, config]))
    with pytest.raises(ManifestError, match="objects beside an OptimizationJob are not created"):
        doors.load_all(path)
    runtime = copy.deepcopy(RUNTIMES["torch-distributed"])
    runtime["kind"], runtime["metadata"]["name"] = "TrainingRuntime", "my-torch"
    data["spec"]["trainJobTemplate"]["spec"]["runtimeRef"] = {
        "name": "my-torch",
        "kind": "TrainingRuntime",
        "apiGroup": "trainer.kubeflow.org",
    }
    path.write_text(yaml.safe_dump_all([data, runtime]))
    found = doors.load_all(path)
    assert len(found) == 6 and {t.spec.origin.jobset.runtime for t in found} == {"my-torch"}


def test_one_optimizationjob_alone_is_a_sweep_read_with_load_all(tmp_path):
    with pytest.raises(ManifestError, match="an OptimizationJob is a sweep of several trials"):
        doors.validate(sample())


def test_the_crd_is_trainer_mains_named_by_its_commit():
    found = crd.schema("trainer.kubeflow.org/v1alpha1", "OptimizationJob")
    assert found is not None
    assert found.source == "github.com/kubeflow/trainer@8c0f5059bd51ec3ba6d6a6a7b2e1471de7bc13b3"


EARLY = f"metadata.annotations.{optimization.EARLY_STOPPING}"


def test_early_stopping_runs_each_trainers_command_under_its_rules_check(tmp_path):
    data = reported_median_stop()
    first = trials(data, tmp_path)
    assert len(first) == 1 and first[0].trial.learns  # (one at a time: the first is known)
    assert first[0].trial.stopping == Stopping(1, 2, None)  # (no trial has succeeded yet)
    rendering = engine.expand(first[0], Settings())
    (job,) = [r for r in rendering.resources if r.type.endswith("batch/v1:Job")]
    command = job.inputs["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:5] == ["/bin/sh", "-c", STOP, "aichor-stop", pods.source("stopping")]
    rule = json.loads(command[5])
    assert rule == {
        "metric": "loss",
        "formats": [REPORTED_FORMAT],
        "start_step": 2,
        "rule": None,  # (its values printed, for the rules of the trials after it)
        "maximize": False,
        "reported": True,
    }
    assert command[6:8] == ["python3", "-c"]
    second = trials(data, tmp_path, {first[0].name: 0.5})[1]  # (its rule: from the first's)
    assert second.trial.stopping is not None and second.trial.stopping.rule == 0.5


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (
            (EARLY, '{"medianstop": {"min_trials_required": "0"}}'),
            f"{EARLY}: min_trials_required must be greater than zero (>0)",
        ),
        ((EARLY, '{"medianstop": {"steps": "2"}}'), f"{EARLY}: unknown setting steps"),
        ((EARLY, '{"hyperband": {}}'), f"{EARLY}: 'hyperband' is not read here"),
        (
            ("spec.trainJobTemplate.spec.trainer.command", None),
            "spec.trainJobTemplate.spec.trainer.command: early stopping (the annotation "
            "aichor.ai/early-stopping) runs the trainer's command under its check",
        ),
    ],
)
def test_early_stoppings_refusals_are_named_at_their_field(edit, words, tmp_path):
    data = reported_median_stop()
    if edit[0] == EARLY:
        data["metadata"]["annotations"][optimization.EARLY_STOPPING] = edit[1]
    else:
        del data["spec"]["trainJobTemplate"]["spec"]["trainer"]["command"]
    assert words in refusal(data, tmp_path)
