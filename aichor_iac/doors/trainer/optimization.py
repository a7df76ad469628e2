"""Kubeflow Trainer's OptimizationJob (`trainer.kubeflow.org/v1alpha1`, on trainer main since
0cd558cc1, after v2.3.0; its controller is not released, trainer issue 3828) as a sweep of
TrainJobs (issue 54), as its proposal (`proposals/2605-optimization-job-crd`) has the controller
run it, without one:

- `numTrials` TrainJobs, at most `parallelTrials` at once, each the template's with the
  trial's values in `trainer.env` as `KUBEFLOW_TRAINER_OPT_<NAME>` (the name upper-cased, any
  character that is not a letter, digit or `_` as `_`) and as the annotation ASSIGNMENT on the
  trial's objects (JSON: the CRD's ParameterAssignment list); named `<job>-trial-<5
  characters>`, as the proposal's sample.
- The objective is the metric the trials report (Trainer's progress protocol, issue 52): a
  trial's last report, by `direction`.
- `searchAlgorithm`: random (with its `seed`) and grid. The proposal's phase 1 controller is an
  adapter to Katib's suggestion services, and so is this door: the parameters are read as
  Katib's (`sweeps.space`), random drawn as the Katib door draws it, grid as Katib's optuna grid.
- The algorithms that learn (tpe, multivariate-tpe, bayesianoptimization, cmaes), which the CRD
  has no field for yet, under the annotation ALGORITHM, `{<algorithm>: {<setting>: <value>}}`
  with Katib's names and settings; without it, refused. Each trial is asked from the results
  of the trials before it, as a Katib sweep's (`sweeps.asking`).
- Early stopping (Katib's medianstop), which the CRD has no field for either, under the
  annotation EARLY_STOPPING: each trial's trainer command runs under its rule's check in its
  pod (`pods.stopping`), its values the trial's progress reports, read from its receiver.

The OptimizationJob is checked against its CRD of trainer main (`reading/crds`), its rules
then here; each trial's TrainJob by the TrainJob door.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from dataclasses import dataclass
from typing import Any, Literal

import yaml
from pydantic import ConfigDict, Field, ValidationError

from ...experiment.groups import Model as Lax
from ...experiment.trial import NONE_ENDED, Ended, Stopping, Trial
from ...experiment.trial import Objective as Aim
from ...pods.stopping import REPORTED_FORMAT
from ...problems import Problem, line_for, one_line
from ...reading import podtemplate as templates
from ...sweeps import algorithms, asking
from ...sweeps.algorithms import SAMPLERS
from ...sweeps.collect import StopRule, rule_of, under_rule
from ...sweeps.naming import trial_name
from ...sweeps.numpy_legacy import SEED_MAX
from ...sweeps.space import Parameter as KatibParameter
from ...sweeps.space import grid, grid_size, random_search, seed_of
from ..identities import OPTIMIZATION

API_VERSION, KIND = OPTIMIZATION
ENV_PREFIX = "KUBEFLOW_TRAINER_OPT_"  # (the proposal's, 8.2)
# The trial's values on its objects (the proposal: "the raw JSON parameter assignment as an
# Annotation on the TrainJob metadata"; it names none)
ASSIGNMENT = "aichor.ai/optimization-parameters"
# The algorithms the CRD has no field for yet (the proposal defers them to its phase 2)
ALGORITHM = "aichor.ai/search-algorithm"
EARLY_STOPPING = "aichor.ai/early-stopping"
LABEL = "aichor.ai/optimization-job"  # on every object of its trials
TRIAL = "-trial-"
MAX_NAME = 63 - len(TRIAL) - 5  # (a trial's name: the CRD's result.trainJobName, 63 at most)
NOT_ENV = re.compile(r"[^A-Z0-9_]")


class Model(Lax):
    """The OptimizationJob as its CRD has checked it: every field of its type."""

    model_config = ConfigDict(extra="ignore")


class Objective(Model):
    metric: str
    direction: Literal["Maximize", "Minimize"] = "Minimize"


class Bounds(Model):
    min: str
    max: str
    type: Literal["Int", "Float"] = "Float"


class Choices(Model):
    choices: list[str]


class SearchSpace(Model):
    uniform: Bounds | None = None
    log_uniform: Bounds | None = None
    categorical: Choices | None = None


class Parameter(Model):
    name: str
    search_space: SearchSpace


class Random(Model):
    seed: int | None = None


class SearchAlgorithm(Model):
    random: Random | None = None
    grid: dict[str, Any] | None = None


class Template(Model):
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: dict[str, Any]


class Spec(Model):
    objectives: list[Objective]
    search_algorithm: SearchAlgorithm = SearchAlgorithm(random=Random())  # (the CRD's default)
    parameters: list[Parameter]
    num_trials: int = 1
    parallel_trials: int = 1
    train_job_template: Template


class Resource(templates.CustomResource):
    model_config = ConfigDict(extra="ignore")  # (as its Model: the CRD has checked it)


def trials(
    data: dict[str, Any],
    source: str,
    lines: dict,
    beside: tuple[dict[str, Any], ...] = (),
    ended: Ended = NONE_ENDED,
) -> list[tuple[dict[str, Any], Trial]]:
    """The trials' TrainJobs, in the order they are created, each with its place in the
    sweep; or ManifestError naming every problem with its path and line. With an algorithm
    that learns, or early stopping: the trials known from those that have `ended` (by name)."""
    fail = functools.partial(templates.error, source, lines=lines)
    resource, spec = templates.resource_and_spec(data, fail, KIND, API_VERSION, (Resource, Spec))
    name, given = resource.metadata.name or "", resource.metadata.annotations
    learning = _chosen(given, ALGORITHM, lines, tuple(SAMPLERS), '"tpe": {"n_startup_trials": "5"}')
    early = _chosen(
        given, EARLY_STOPPING, lines, ("medianstop",), '"medianstop": {"start_step": "3"}'
    )
    problems = [*resource.metadata.problems("Trainer"), *_problems(name, spec, beside, learning)]
    problems += _stopping_problems(spec, early)
    parameters = _parameters(spec, problems)
    if problems:
        raise fail(problems)
    assert not isinstance(learning, Problem) and not isinstance(early, Problem)
    names = tuple(trial_name(name, i, TRIAL, 5) for i in range(spec.num_trials))
    count, values = _values(spec, parameters, name, learning, ended, names, early is not None)
    stops = _stops(spec, early, names, ended, len(values))
    aim = _objective(spec)
    found = []
    for index, assigned in enumerate(values):
        trial, stop = names[index], stops[index]
        # (with early stopping, its rule's check reads its values from its progress reports)
        rule = None if stop is None else rule_of(stop, aim, reported=True)
        document = _train_job(spec.train_job_template, assigned, trial, rule)
        learns = names[:count] if learning is not None or early is not None else ()
        annotations = ((ASSIGNMENT, document["metadata"]["annotations"][ASSIGNMENT]),)
        values_given = tuple(assigned.items())
        place = Trial(
            name,
            index,
            count,
            spec.parallel_trials,
            values_given,
            objective=aim,
            label=LABEL,
            names=learns,
            stopping=stop,
            annotations=annotations,
            kind=KIND,
        )
        found.append((document, place))
    return found


def env_name(parameter: str) -> str:
    """The variable a trial's value of `parameter` is in (`KUBEFLOW_TRAINER_OPT_<NAME>`)."""
    return ENV_PREFIX + NOT_ENV.sub("_", parameter.upper())


def _objective(spec: Spec) -> Aim:
    """The objective: the metric the trials report, its last report's value, by `direction`
    (its values also as the lines early stopping's check prints: `stopping.REPORTED`)."""
    objective = spec.objectives[0]
    return Aim(
        objective.metric,
        objective.direction.lower(),
        strategies=((objective.metric, "latest"),),  # (a report holds the last value)
        formats=(REPORTED_FORMAT,),
    )


@dataclass(frozen=True)
class Chosen:
    """An algorithm an annotation names, and its settings (Katib's names, as text)."""

    name: str
    settings: tuple[tuple[str, str], ...] = ()


def _chosen(
    annotations: dict[str, str] | None,
    key: str,
    lines: dict,
    allowed: tuple[str, ...],
    example: str,
) -> Chosen | Problem | None:
    """The algorithm the annotation `key` names among `allowed`, with its settings; a Problem
    if it names none well; None without it."""
    text = (annotations or {}).get(key)
    if text is None:
        return None
    where, line = f"metadata.annotations.{key}", line_for(("metadata", "annotations", key), lines)
    try:
        given = yaml.safe_load(text)
    except yaml.YAMLError as error:
        return Problem(where, f"invalid YAML: {one_line(str(error))}", line)
    shape = f"give one algorithm and its settings, as {{{example}}} ({', '.join(allowed)})"
    if not isinstance(given, dict) or len(given) != 1:
        return Problem(where, shape, line)
    ((name, chosen),) = given.items()
    if name not in allowed:
        return Problem(where, f"{name!r} is not read here: {shape}", line)
    chosen = {} if chosen is None else chosen
    if not isinstance(chosen, dict) or not all(
        isinstance(v, str | int | float) and not isinstance(v, bool) for v in chosen.values()
    ):
        return Problem(where, f"{name}'s settings: a mapping of names to values; {shape}", line)
    return Chosen(name, tuple((str(k), str(v)) for k, v in chosen.items()))


def _problems(
    name: str,
    spec: Spec,
    beside: tuple[dict[str, Any], ...],
    learning: Chosen | Problem | None,
) -> list[Problem]:
    """What the CRD does not say and a sweep here needs: a short enough name, the trials'
    variables their own, an algorithm that learns well named, nothing beside to create."""
    problems = []
    if not name:
        problems.append(
            Problem("metadata.name", "give the OptimizationJob a name: its trials take it")
        )
    elif len(name) > MAX_NAME:
        reason = (
            f"may not be longer than {MAX_NAME} characters: its trials are named "
            f"<name>{TRIAL}<5 characters>, at most 63 (the CRD's result.trainJobName)"
        )
        problems.append(Problem("metadata.name", reason))
    if beside:
        others = ", ".join(f"{c['kind']} {c['metadata']['name']}" for c in beside)
        reason = f"uses {others}: objects beside an OptimizationJob are not created yet"
        problems.append(Problem("spec.trainJobTemplate", reason))
    problems += _env_problems(spec)
    if isinstance(learning, Problem):
        return [*problems, learning]
    if learning is not None:
        problems += _learning_problems(spec, learning)
    return problems


def _stopping_problems(spec: Spec, early: Chosen | Problem | None) -> list[Problem]:
    """Early stopping's settings as Katib's medianstop service checks them, and the command
    its check runs (in the trial's pod: `pods.stopping`)."""
    if early is None or isinstance(early, Problem):
        return [] if early is None else [early]
    where = f"metadata.annotations.{EARLY_STOPPING}"
    problems = [
        Problem(where, reason)
        for name, value in early.settings
        if (reason := algorithms.stopping_problem(name, value))
    ]
    trainer = templates.mapping(spec.train_job_template.spec.get("trainer"))
    if not trainer.get("command"):
        reason = (
            f"early stopping (the annotation {EARLY_STOPPING}) runs the trainer's command "
            "under its check: give the command (no image is read here)"
        )
        problems.append(Problem("spec.trainJobTemplate.spec.trainer.command", reason))
    return problems


def _env_problems(spec: Spec) -> list[Problem]:
    """Two parameters whose variables would be one, and a template that sets one itself."""
    problems: list[Problem] = []
    seen: dict[str, str] = {}
    for i, parameter in enumerate(spec.parameters):
        variable = env_name(parameter.name)
        if variable in seen:
            reason = f"its variable {variable} is {seen[variable]}'s too: rename one"
            problems.append(Problem(f"spec.parameters.{i}.name", reason))
        seen.setdefault(variable, parameter.name)
    trainer = templates.mapping(spec.train_job_template.spec.get("trainer"))
    for j, item in enumerate(trainer.get("env") or []):
        if isinstance(item, dict) and item.get("name") in seen:
            reason = (
                f"{item['name']} is set for each trial from its parameter "
                f"{seen[item['name']]}: remove it"
            )
            problems.append(Problem(f"spec.trainJobTemplate.spec.trainer.env.{j}.name", reason))
    return problems


def _learning_problems(spec: Spec, learning: Chosen) -> list[Problem]:
    """An algorithm that learns as Katib's service checks it (its settings, in its words),
    and beside a search algorithm it does not replace."""
    where, algorithm = f"metadata.annotations.{ALGORITHM}", learning.name
    problems = [
        Problem(where, reason)
        for name, value in learning.settings
        if (reason := algorithms.problem(algorithm, name, value))
    ]
    if spec.search_algorithm.grid is not None:
        reason = (
            f"{algorithm} (the annotation {ALGORITHM}) replaces random search, not grid: "
            "remove grid"
        )
        problems.append(Problem("spec.searchAlgorithm.grid", reason))
    continuous = sum(p.search_space.categorical is None for p in spec.parameters)
    if algorithm == "cmaes" and continuous < 2:
        reason = "cmaes only supports two or more dimensional continuous search space."
        problems.append(Problem("spec.parameters", reason))
    return problems


def _parameters(spec: Spec, problems: list[Problem]) -> list[KatibParameter]:
    """The parameters as Katib's (uniform: an int or a double; logUniform: the same on a log
    scale; categorical: its choices), each one Katib refuses a problem at its search space."""
    found = []
    for i, parameter in enumerate(spec.parameters):
        space = parameter.search_space
        bounds = space.uniform or space.log_uniform
        if bounds is None:
            choices = space.categorical.choices if space.categorical else []
            given: dict[str, Any] = {
                "parameterType": "categorical",
                "feasibleSpace": {"list": choices},
            }
        else:
            feasible = {"min": bounds.min, "max": bounds.max}
            if space.log_uniform is not None:
                feasible["distribution"] = "logUniform"
            kind = "int" if bounds.type == "Int" else "double"
            given = {"parameterType": kind, "feasibleSpace": feasible}
        try:
            found.append(KatibParameter.model_validate({"name": parameter.name, **given}))
        except ValidationError as error:
            shape = (
                "uniform" if space.uniform else "logUniform" if space.log_uniform else "categorical"
            )
            reason = "; ".join(
                one_line(e["msg"]).removeprefix("Value error, ") for e in error.errors()
            )
            problems.append(Problem(f"spec.parameters.{i}.searchSpace.{shape}", reason))
    return found


def _values(
    spec: Spec,
    parameters: list[KatibParameter],
    name: str,
    learning: Chosen | None,
    ended: Ended,
    names: tuple[str, ...],
    stopping: bool,
) -> tuple[int, list[dict[str, str]]]:
    """How many trials, and each known one's values (an algorithm that learns, or early
    stopping: those the results allow)."""
    seed = spec.search_algorithm.random.seed if spec.search_algorithm.random else None
    if learning is not None:
        algorithm, given = learning.name, learning.settings
        chosen = dict(given)
        if "random_state" not in chosen and seed is not None:  # (the spec's seed, in range)
            chosen["random_state"] = str(seed & SEED_MAX)
        sampler = SAMPLERS[algorithm], algorithms.sampler_settings(algorithm, given)
        space = [p.dimension() for p in parameters]
        maximize = spec.objectives[0].direction == "Maximize"
        found = asking.asked(
            space, sampler, seed_of(chosen, name), maximize, spec.parallel_trials, names, ended
        )
        return spec.num_trials, found
    if spec.search_algorithm.grid is not None:
        count = min(spec.num_trials, grid_size(parameters))
        found = grid(parameters, count, seed_of({}, name), spec.parallel_trials)
    else:
        drawn = seed if seed is not None else seed_of({}, name)
        count, found = spec.num_trials, random_search(parameters, spec.num_trials, drawn)
    if stopping:  # (each trial's rule: from the results)
        found = found[: asking.known(count, spec.parallel_trials, names, ended)]
    return count, found


def _stops(
    spec: Spec, early: Chosen | None, names: tuple[str, ...], ended: Ended, number: int
) -> list[Stopping | None]:
    """Each known trial's early stopping rule (Katib's median rule), from the trials before
    it that succeeded."""
    if early is None:
        return [None] * number
    least_start = algorithms.stopping_settings(early.settings)
    return list(asking.rules(least_start, spec.parallel_trials, names, ended, number))


def _train_job(
    template: Template, assigned: dict[str, str], trial: str, rule: StopRule | None
) -> dict[str, Any]:
    """The trial's TrainJob: the template's, named for the trial, with its values in
    `trainer.env` (after the template's own) and as the annotation ASSIGNMENT; with early
    stopping, its trainer's command under the rule's check (`collect.under_rule`)."""
    spec = copy.deepcopy(template.spec)
    trainer = spec.setdefault("trainer", {})
    added = [{"name": env_name(n), "value": v} for n, v in assigned.items()]
    trainer["env"] = [*(trainer.get("env") or []), *added]
    if rule is not None:
        trainer["command"] = under_rule(rule, [*trainer["command"], *(trainer.pop("args", []))])
    pairs = [{"name": n, "value": v} for n, v in assigned.items()]
    assignment = json.dumps(pairs, separators=(",", ":"))
    metadata = copy.deepcopy(template.metadata)
    metadata["annotations"] = {**(metadata.get("annotations") or {}), ASSIGNMENT: assignment}
    metadata["name"] = trial
    return {"apiVersion": API_VERSION, "kind": "TrainJob", "metadata": metadata, "spec": spec}
