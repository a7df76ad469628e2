"""Kubeflow's v2 SDK sweep (issue 41): `OptimizerClient().optimize(trial_template,
search_space=..., trial_config=..., objectives=..., algorithm=...)` creates a Katib Experiment
whose trials are TrainJobs of a function, each called with the trial's values in place of the
searched arguments. Here that Experiment is made as the SDK makes it
(`kubeflow/optimizer/backends/kubernetes/backend.py`), checked and expanded into its trials by
the Katib door, and each trial is the experiment of `experiment_from_trainer` with its values.
The SDK's objects are read by their fields, so plain mappings with the same fields do too.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from enum import Enum
from typing import Any

from ...experiment.model import Experiment
from ...problems import ManifestError, Problem
from ...sweeps.naming import trial_name
from ..katib import door as katib
from . import function


def experiment_from_optimizer(
    trial_template: Any,
    *,
    search_space: Mapping[str, Any],
    trial_config: Any = None,
    objectives: list[Any] | None = None,
    algorithm: Any = None,
    name: str | None = None,
) -> tuple[Experiment, ...]:
    """The trials of the SDK's `optimize(...)` (a `TrainJobTemplate`'s `trainer` and
    `runtime`; `search_space` of `Search.uniform`, `loguniform`, `choice` or Katib
    ParameterSpecs; a `TrialConfig`; `Objective`s, the first the one optimized; `GridSearch`
    or `RandomSearch`), each an experiment in the order they are created, at most
    `parallel_trials` at once: what `render` and `up` take. `name` names the sweep (the SDK
    draws a random one; default here: the function's name)."""
    trainer = _get(trial_template, "trainer")
    runtime = _get(trial_template, "runtime") or "torch-distributed"
    runtime = runtime if isinstance(runtime, str) else _get(runtime, "name")
    func = _get(trainer, "func")
    if not search_space:
        raise ManifestError("<optimizer>", [Problem("search_space", "Search space must be set.")])
    sweep = name or function.experiment_name(getattr(func, "__name__", "function"))
    document = _katib(sweep, runtime, search_space, trial_config, objectives, algorithm)
    # `Search.choice` of numbers or booleans: the function gets them as such, not as text
    literal = {k for k, v in search_space.items() if getattr(v, "literal_values", False)}
    found = []
    for _, place in katib.trials(document, "<optimizer>", {}):
        values = {k: ast.literal_eval(v) if k in literal else v for k, v in place.values}
        arguments = {**(_get(trainer, "func_args") or {}), **values}
        trial = _Trainer(trainer, arguments)
        name_of = trial_name(sweep, place.index)
        experiment = function.experiment_from_trainer(trial, runtime=runtime, name=name_of)
        found.append(experiment.as_trial(place))
    return tuple(found)


def _katib(
    name: str,
    runtime: str,
    search_space: Mapping[str, Any],
    trial_config: Any,
    objectives: list[Any] | None,
    algorithm: Any,
) -> dict[str, Any]:
    """The Katib Experiment the SDK creates, as data (its trial: a TrainJob of the runtime
    whose arguments are the placeholders)."""
    objectives = list(objectives or [{"metric": "loss", "direction": "minimize"}])
    metrics = [
        (_get(o, "metric") or "loss", _value(_get(o, "direction")) or "minimize")
        for o in objectives
    ]
    settings = {}
    if algorithm is not None and _get(algorithm, "random_state") is not None:
        settings["random_state"] = str(_get(algorithm, "random_state"))
    spec: dict[str, Any] = {
        "parameters": [_parameter(key, value) for key, value in search_space.items()],
        "objective": {
            "type": metrics[0][1],
            "objectiveMetricName": metrics[0][0],
            "additionalMetricNames": [m for m, _ in metrics[1:]],
        },
        "algorithm": {
            "algorithmName": _algorithm(algorithm),
            "algorithmSettings": [{"name": k, "value": v} for k, v in settings.items()],
        },
        "maxTrialCount": _get(trial_config, "num_trials") or 10,  # (the SDK's defaults)
        "parallelTrialCount": _get(trial_config, "parallel_trials") or 1,
        "trialTemplate": {
            "primaryContainerName": "node",
            "retain": True,
            "trialParameters": [{"name": key, "reference": key} for key in search_space],
            "trialSpec": {
                "apiVersion": "trainer.kubeflow.org/v1alpha1",
                "kind": "TrainJob",
                "spec": {
                    "runtimeRef": {"name": runtime},
                    "trainer": {"args": [f"${{trialParameters.{key}}}" for key in search_space]},
                },
            },
        },
    }
    if (failed := _get(trial_config, "max_failed_trials")) is not None:
        spec["maxFailedTrialCount"] = failed
    return {
        "apiVersion": katib.API_VERSION,
        "kind": katib.KIND,
        "metadata": {"name": name},
        "spec": spec,
    }


def _parameter(key: str, value: Any) -> dict[str, Any]:
    """A searched argument as Katib's ParameterSpec (the SDK's `Search.*` give one)."""
    space = _get(value, "feasible_space", "feasibleSpace") or {}
    fields = {f: _get(space, f) for f in ("min", "max", "step", "list", "distribution")}
    return {
        "name": key,
        "parameterType": _get(value, "parameter_type", "parameterType"),
        "feasibleSpace": {k: v for k, v in fields.items() if v is not None},
    }


def _algorithm(algorithm: Any) -> str:
    if algorithm is None:
        return "random"  # (the SDK's default: RandomSearch())
    return _get(algorithm, "algorithm_name", "algorithmName") or ""


class _Trainer(dict):
    """A trial's trainer: the SDK's, with its function's arguments the trial's."""

    def __init__(self, trainer: Any, arguments: dict[str, Any]) -> None:
        keys: tuple[str, ...] = ("func", "num_nodes", "resources_per_node")
        keys += ("packages_to_install", "pip_index_urls", "env", "image")
        super().__init__({k: _get(trainer, k) for k in keys}, func_args=arguments)


def _get(obj: Any, *names: str) -> Any:
    """A field of an SDK object or of a mapping, by any of its names."""
    for name in names:
        found = obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)
        if found is not None:
            return found
    return None


def _value(found: Any) -> Any:
    return found.value if isinstance(found, Enum) else found
