"""Katib's Experiment (`kubeflow.org/v1beta1`, Katib v0.19) as a sweep (issue 41): the trials
Katib would run, each the trial template with its values put in
as Katib's controller puts them (`manifest/generator.go`), named for the trial. The router
reads each trial's custom resource by its own door; the trials are created at most
`parallelTrialCount` at once (`components.experiments`).

Algorithms that learn from finished trials (tpe, multivariate-tpe, bayesianoptimization), and
early stopping (medianstop), make each trial from the results of the trials that ended before
it (`asking`): trial k is known once trials 0 to k - parallelTrialCount have ended (`ended`,
read back from the cluster). A render without results knows the first parallelTrialCount.

Katib's CRD has no schema (it keeps unknown fields): its webhook's rules are checked here.
cmaes, and the algorithms that need more than a trial's objective (hyperband, pbt, neural
architecture search), are refused by name, each with what it needs.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import yaml

from ...experiment.trial import NONE_ENDED, Ended, Stopping, Trial
from ...experiment.trial import Objective as Aim
from ...problems import Problem, one_line
from ...reading import podtemplate as templates
from ...sweeps import algorithms, asking, collect
from ...sweeps.algorithms import FIXED, SAMPLERS
from ...sweeps.naming import trial_name
from ...sweeps.sobol import sobol_search
from ...sweeps.space import grid, grid_size, random_search, seed_of
from .spec import MetricsCollector, Resource, Spec, TrialTemplate

API_VERSION = "kubeflow.org/v1beta1"
KIND = "Experiment"
# Katib's other algorithms, by what they need that is not here
LEARNING = {
    "hyperband": "runs brackets of successive halving, each round's trials and budgets chosen "
    "from the last round's results: it needs Katib's hyperband service",
    "pbt": "is population-based training: each generation's trials start from the best "
    "checkpoints of the last, on a volume Katib's pbt service manages",
}
# Neural architecture search: described by `nasConfig` instead of `parameters`
ARCHITECTURE_SEARCH_IS = (
    "neural architecture search (ENAS, DARTS), which trains a controller network or a "
    "supernet across its trials in Katib's suggestion service"
)
LEARNING |= dict.fromkeys(("enas", "darts"), f"is {ARCHITECTURE_SEARCH_IS}")
PARAMETER = re.compile(r"\$\{trialParameters\.(.+?)\}")
META = re.compile(r"\$\{trialSpec\.(.+?)\}")
INDEXED = re.compile(r"(.+)\[(.+)]")
# Katib's StdOut collector's filter (metricscollector/v1beta1/common/const.go DefaultFilter)
DEFAULT_FORMAT = r"([\w|-]+)\s*=\s*([+-]?\d*(\.\d+)?([Ee][+-]?\d+)?)"
# The label Katib puts on a trial's pods (`util.TrialLabels`, its webhook's `mutatePodMetadata`)
EXPERIMENT_LABEL = "katib.kubeflow.org/experiment"
MAX_NAME = 40  # an Experiment's name (Katib's `ValidateExperiment`)
MAX_TRIALS = 1000  # of one sweep in one stack (each trial is several objects Pulumi tracks)


def trials(
    data: dict[str, Any],
    source: str,
    lines: dict,
    beside: tuple[dict[str, Any], ...] = (),
    ended: Ended = NONE_ENDED,
) -> list[tuple[dict[str, Any], Trial]]:
    """The trials' custom resources, in the order they are created, each with its place in
    the sweep (the template inline, or in a ConfigMap `beside` it); or ManifestError naming
    every problem with its path and line. A sweep that depends on its results: the trials
    known from those of the trials that have `ended` (by name)."""
    fail = functools.partial(templates.error, source, lines=lines)
    name, spec = _checked(data, beside, fail)
    count, values = _values(spec, name, fail, ended)
    template, objective = spec.trial_template, _objective(spec)
    names = tuple(trial_name(name, i) for i in range(count)) if _learns(spec) else ()
    stops: list[Stopping | None] = [None] * len(values)
    if spec.early_stopping is not None:
        rule = [(s.name, s.value) for s in spec.early_stopping.algorithm_settings]
        least_start = algorithms.stopping_settings(rule)
        parallel = spec.parallel_trial_count
        stops = list(asking.rules(least_start, parallel, names, ended, len(values)))
    found = []
    for index, assigned in enumerate(values):
        trial = trial_name(name, index)
        document = _substituted(template, assigned, trial, data, fail)
        # (a collector's problems, the template's: found in the first trial)
        primary, problems = template.primary_container_name, []
        if objective.file is not None:
            problems = collect.with_file(document, primary, objective.file)
        elif (stop := _stop_rule(stops[index], objective)) is not None:  # (in the pod)
            problems = collect.with_stopping(document, primary, stop)
        if problems:
            raise fail(problems)
        parallel, failed = spec.parallel_trial_count, spec.max_failed_trial_count
        given = tuple(assigned.items())
        place = Trial(
            name,
            index,
            count,
            parallel,
            given,
            failed,
            objective,
            EXPERIMENT_LABEL,
            names,
            stops[index],
        )
        found.append((document, place))
    return found


def _stop_rule(stopping: Stopping | None, objective: Aim) -> collect.StopRule | None:
    """A trial's early stopping rule as its pod checks it (`pods.stopping.main`), where its
    pod's output has the objective's values (the StdOut collector; the File collector's file
    is printed once the command has ended, and its rule is read back then)."""
    if stopping is None or stopping.rule is None or not objective.formats:
        return None
    return collect.rule_of(stopping, objective)


def _checked(
    data: dict[str, Any], beside: tuple[dict[str, Any], ...], fail: Any
) -> tuple[str, Spec]:
    """The sweep's name and spec (its template from the ConfigMap beside it, if there), held
    to Katib's rules; or every problem, raised."""
    if searching := _architecture_search(data):
        raise fail([searching])
    resource, spec = templates.resource_and_spec(data, fail, KIND, API_VERSION, (Resource, Spec))
    source_map = spec.trial_template.config_map or {}
    others = [  # (the template's ConfigMap is read, not created)
        f"{c['kind']} {c['metadata']['name']}"
        for c in beside
        if (c["kind"], c["metadata"]["name"]) != ("ConfigMap", source_map.get("configMapName"))
    ]
    if others:
        reason = f"uses {', '.join(others)}: objects beside a Katib Experiment are not created yet"
        raise fail([Problem("spec.trialTemplate", reason)])
    if spec.trial_template.config_map is not None:
        given = _from_config_map(spec.trial_template, beside, fail)
        spec = spec.model_copy(
            update={"trial_template": spec.trial_template.model_copy(update={"trial_spec": given})}
        )
    name = resource.metadata.name or ""
    problems = [*resource.metadata.problems("Katib"), *_refused(spec), *_template_problems(spec)]
    if spec.metrics_collector_spec.collector.kind == "File":
        problems += _file_source(spec.metrics_collector_spec)[2]
    if not name:
        problems.append(Problem("metadata.name", "give the sweep a name: its trials take it"))
    elif len(name) > MAX_NAME:  # (Katib's webhook: its trials, and their label, take it)
        reason = f"may not be longer than {MAX_NAME} characters, as Katib's webhook requires"
        problems.append(Problem("metadata.name", reason))
    if problems:
        raise fail(problems)
    return name, spec


def _file_source(collector: MetricsCollector) -> tuple[str, bool, list[Problem]]:
    """The File collector's path, whether its lines are JSON, and its problems."""
    source = collector.source
    given = (source.file_system_path if source else None) or {}
    return collect.file_source(given, source is not None and source.filter is not None)


def _objective(spec: Spec) -> Aim:
    """The objective with Katib's defaults (`setDefaultObjective`: a metric without a
    strategy takes min when minimizing, max when maximizing) and where its values are read:
    the StdOut collector's filters (its default one unless given) on the entry point's
    output, the File collector's on its file's lines there, else nowhere here."""
    objective, collector = spec.objective, spec.metrics_collector_spec
    default = "min" if objective.type == "minimize" else "max"
    given = {s.name: s.value for s in objective.metric_strategies}
    metrics = [objective.objective_metric_name, *objective.additional_metric_names]
    source, kind = collector.source, collector.collector.kind
    forms = source.filter.metrics_format if source and source.filter else []
    path, json_lines = None, False
    if kind == "File":  # (its lines, after the primary container's: `collect`)
        path, json_lines, _ = _file_source(collector)
    return Aim(
        objective.objective_metric_name,
        objective.type,
        objective.goal,
        tuple(objective.additional_metric_names),
        tuple((m, given.get(m, default)) for m in metrics),
        tuple(forms or [DEFAULT_FORMAT]) if kind in ("StdOut", "File") else None,
        path,
        json_lines,
    )


def _architecture_search(data: dict[str, Any]) -> Problem | None:
    """A neural architecture search (`nasConfig`), refused as one before its spec is held to a
    hyperparameter sweep's (whose `parameters` it has none of)."""
    spec = data.get("spec")
    if not isinstance(spec, dict) or "nasConfig" not in spec:
        return None
    reason = (
        f"{ARCHITECTURE_SEARCH_IS}: aichor-iac runs hyperparameter sweeps (spec.parameters), "
        "by grid, random, sobol, tpe, multivariate-tpe, bayesianoptimization or cmaes"
    )
    return Problem("spec.nasConfig", reason)


def _refused(spec: Spec) -> list[Problem]:
    """What needs Katib's own services, and counts a sweep cannot keep."""
    problems = []
    algorithm = spec.algorithm.algorithm_name
    if algorithm not in (*FIXED, *SAMPLERS):
        how = LEARNING.get(algorithm, "is unknown: it needs Katib's suggestion service")
        problems.append(
            Problem(
                "spec.algorithm.algorithmName",
                f"{algorithm} {how}; aichor-iac runs grid, random, sobol, tpe, "
                "multivariate-tpe, bayesianoptimization and cmaes",
            )
        )
    if (early := spec.early_stopping) is not None and early.algorithm_name != "medianstop":
        reason = f"unknown algorithm name {early.algorithm_name}: aichor-iac runs medianstop"
        problems.append(Problem("spec.earlyStopping.algorithmName", reason))
    elif early is not None:  # (its service's `ValidateEarlyStoppingSettings`, in its words)
        for i, setting in enumerate(early.algorithm_settings):
            if wrong := algorithms.stopping_problem(setting.name, setting.value):
                problems.append(Problem(f"spec.earlyStopping.algorithmSettings.{i}", wrong))
    if algorithm in (*FIXED, *SAMPLERS):  # (its service's `ValidateAlgorithmSettings`)
        for i, setting in enumerate(spec.algorithm.algorithm_settings):
            if wrong := algorithms.problem(algorithm, setting.name, setting.value):
                problems.append(Problem(f"spec.algorithm.algorithmSettings.{i}", wrong))
    if algorithm == "cmaes" and sum(p.type in ("int", "double") for p in spec.parameters) < 2:
        reason = "cmaes only supports two or more dimensional continuous search space."
        problems.append(Problem("spec.parameters", reason))
    limit, total = spec.max_failed_trial_count, spec.max_trial_count
    if limit is not None and total is not None and limit > total:  # (Katib's webhook)
        reason = f"{limit} is above maxTrialCount {total}: at most maxTrialCount trials fail"
        problems.append(Problem("spec.maxFailedTrialCount", reason))
    return problems


def _template_problems(spec: Spec) -> list[Problem]:
    """Katib's rules for the trial template, and the sources read here."""
    template, where = spec.trial_template, "spec.trialTemplate"
    if template.go_template is not None:
        reason = (
            "Katib v1alpha3's Go template is not read (v1beta1 has none): give the template "
            "as trialSpec, or its text in a ConfigMap beside the Experiment (configMap), with "
            "${trialParameters.<name>} placeholders"
        )
        return [Problem(f"{where}.goTemplate", reason)]
    if template.trial_spec is None:
        return [Problem(f"{where}.trialSpec", "give the trial's custom resource")]
    problems = []
    metadata = template.trial_spec.get("metadata")
    if isinstance(metadata, dict) and ({"name", "namespace"} & set(metadata)):
        reason = "metadata.name and metadata.namespace must be omitted (Katib names each trial)"
        problems.append(Problem(f"{where}.trialSpec.metadata", reason))
    names = {p.name for p in spec.parameters}
    declared = set()
    for i, parameter in enumerate(template.trial_parameters):
        reference = parameter.reference
        if parameter.name in declared:
            problems.append(Problem(f"{where}.trialParameters.{i}.name", "is given twice"))
        declared.add(parameter.name)
        if not META.search(reference) and reference not in names:
            reason = (
                f"{reference!r} is no parameter of spec.parameters ({', '.join(sorted(names))})"
            )
            problems.append(Problem(f"{where}.trialParameters.{i}.reference", reason))
    used = set(PARAMETER.findall(str(template.trial_spec)))
    for missing in sorted(used - declared):
        reason = f"${{trialParameters.{missing}}} is used and not declared in trialParameters"
        problems.append(Problem(f"{where}.trialSpec", reason))
    return problems


def _from_config_map(
    template: TrialTemplate, beside: tuple[dict[str, Any], ...], fail: Any
) -> dict[str, Any] | None:
    """The trial template a ConfigMap given beside the Experiment holds at `templatePath`
    (Katib reads it from the cluster; here the file gives it). Katib substitutes the
    template's text; its strings take the values here, so a placeholder must stand where a
    string does (quote it)."""
    where = "spec.trialTemplate.configMap"
    source = template.config_map or {}
    keys = ("configMapName", "configMapNamespace", "templatePath")
    if template.trial_spec is not None:
        reason = "only one of spec.trialTemplate.trialSpec or spec.trialTemplate.configMap"
        raise fail([Problem(where, reason)])
    if not all(isinstance(source.get(k), str) and source.get(k) for k in keys):
        raise fail(
            [Problem(where, "configMapName, configMapNamespace and templatePath must be specified")]
        )
    name, path = source["configMapName"], source["templatePath"]
    found = next(
        (c for c in beside if c["kind"] == "ConfigMap" and c["metadata"]["name"] == name), None
    )
    text = ((found or {}).get("data") or {}).get(path)
    if not isinstance(text, str):
        reason = f"give the ConfigMap {name} beside the Experiment, with the template at {path}"
        raise fail([Problem(where, reason)])
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise fail(
            [Problem(where, f"{name} {path}: invalid YAML: {one_line(str(error))}")]
        ) from None
    if not isinstance(loaded, dict):
        raise fail([Problem(where, f"{name} {path}: not a custom resource (a YAML mapping)")])
    return loaded


def _values(spec: Spec, name: str, fail: Any, ended: Ended) -> tuple[int, list[dict[str, str]]]:
    """How many trials, and each known one's values (all but a learning sweep's later ones)."""
    algorithm = spec.algorithm.algorithm_name
    seed = seed_of({s.name: s.value for s in spec.algorithm.algorithm_settings}, name)
    try:
        if algorithm == "grid":
            size = grid_size(spec.parameters)
            # (more than the grid: the whole grid, where Katib's optuna service refuses it)
            count = min(spec.max_trial_count or size, size)
        elif spec.max_trial_count is None:
            reason = f"{algorithm} search has no end of its own: give the number of trials"
            raise fail([Problem("spec.maxTrialCount", reason)])
        else:
            count = spec.max_trial_count
        if count > MAX_TRIALS:
            reason = f"{count:,} trials: a stack runs at most {MAX_TRIALS:,} of one sweep"
            raise fail([Problem("spec.maxTrialCount", reason)])
        parallel, names = spec.parallel_trial_count, [trial_name(name, i) for i in range(count)]
        if algorithm in SAMPLERS:
            given = [(s.name, s.value) for s in spec.algorithm.algorithm_settings]
            sampler = SAMPLERS[algorithm], algorithms.sampler_settings(algorithm, given)
            space = [p.dimension() for p in spec.parameters]
            maximize = spec.objective.type == "maximize"
            limit = spec.max_failed_trial_count
            return count, asking.asked(
                space, sampler, seed, maximize, parallel, names, ended, limit
            )
        if algorithm == "grid":
            found = grid(spec.parameters, count, seed, parallel)
        elif algorithm == "sobol":  # (no seed: the sequence is fixed)
            found = sobol_search(spec.parameters, count)
        else:
            found = random_search(spec.parameters, count, seed)
        if spec.early_stopping is not None:  # (each trial's rule: from the results)
            limit = spec.max_failed_trial_count
            found = found[: asking.known(count, parallel, names, ended, limit)]
        return count, found
    except ValueError as error:
        raise fail([Problem("spec.parameters", str(error))]) from None
    except ImportError as error:  # (the search extra)
        raise fail([Problem("spec.algorithm.algorithmName", str(error))]) from None


def _learns(spec: Spec) -> bool:
    """Whether the sweep's later trials depend on the results of the earlier ones: their
    values (an algorithm that learns), or their early stopping rule."""
    return spec.algorithm.algorithm_name in SAMPLERS or spec.early_stopping is not None


def _substituted(
    template: TrialTemplate, values: dict[str, str], trial: str, data: dict[str, Any], fail: Any
) -> dict[str, Any]:
    """The trial's custom resource: each `${trialParameters.<name>}` in a string of the
    template replaced by its parameter's value or the trial's metadata (as Katib replaces
    them in the template's text), named for the trial."""
    spec = template.trial_spec or {}
    metadata = templates.mapping(spec.get("metadata"))
    namespace = (data.get("metadata") or {}).get("namespace") or "default"
    meta = {
        "Name": trial,
        "Namespace": namespace,
        "Kind": str(spec.get("kind", "")),
        "APIVersion": str(spec.get("apiVersion", "")),
    }
    filled: dict[str, str] = {}
    for i, parameter in enumerate(template.trial_parameters):
        found = META.search(parameter.reference)
        if not found:
            filled[parameter.name] = values[parameter.reference]
            continue
        key, index = found[1], None
        if indexed := INDEXED.fullmatch(key):
            key, index = indexed[1], indexed[2]
        if index is not None and key in ("Labels", "Annotations"):
            value = templates.mapping(metadata.get(key.lower())).get(index)
        else:
            value = meta.get(key) if index is None else None
        if value is None:
            where = f"spec.trialTemplate.trialParameters.{i}.reference"
            raise fail([Problem(where, f"illegal reference of trial metadata: {found[0]}")])
        filled[parameter.name] = str(value)

    def put(value: Any) -> Any:
        if isinstance(value, str):
            return PARAMETER.sub(lambda m: filled.get(m[1], m[0]), value)
        if isinstance(value, dict):
            return {k: put(v) for k, v in value.items()}
        if isinstance(value, list):
            return [put(v) for v in value]
        return value

    document = put(spec)
    document["metadata"] = {**(document.get("metadata") or {}), "name": trial}
    return document
