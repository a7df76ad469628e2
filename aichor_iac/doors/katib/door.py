"""Katib's Experiment (`kubeflow.org/v1beta1`, Katib v0.19) as a sweep (issue 41): the trials
Katib would run for a grid, random or sobol search, each the trial template with its values put in
as Katib's controller puts them (`manifest/generator.go`), named for the trial. The router
reads each trial's custom resource by its own door; the trials are created at most
`parallelTrialCount` at once (`components.experiments`).

Algorithms that learn from finished trials (tpe, multivariate-tpe, bayesianoptimization) ask
each trial from the objectives of the trials that ended before it (`aichor_iac.search`): trial k
is known once trials 0 to k - parallelTrialCount have ended, from their objectives (`ended`, read
back from the cluster), the trials between them counted as running. A render without results
knows the first parallelTrialCount trials.

Katib's CRD has no schema (it keeps unknown fields): its webhook's rules are checked here.
Early stopping, cmaes, and the algorithms that need more than a trial's objective (hyperband,
pbt, neural architecture search) are refused by name, each with what it needs.
"""

from __future__ import annotations

import functools
import hashlib
import re
from typing import Any, Literal

import yaml
from pydantic import ConfigDict, Field, model_validator

from ...experiment.groups import Model as Lax
from ...experiment.trial import NONE_ENDED, Ended, Trial
from ...experiment.trial import Objective as Aim
from ...problems import Problem, one_line
from ...reading import podtemplate as templates
from ...rules.limits import INT32
from ...search import learning
from . import collect, settings
from .sobol import sobol_search
from .space import Parameter, grid, grid_size, random_search, seed_of

API_VERSION = "kubeflow.org/v1beta1"
KIND = "Experiment"
FIXED = ("grid", "random", "sobol")  # the algorithms whose trials are fixed beforehand
# The algorithms that learn from the trials that have ended, by the sampler each runs
SAMPLERS = {"tpe": "tpe", "multivariate-tpe": "multivariate-tpe", "bayesianoptimization": "gp"}
# Katib's other algorithms, by what they need that is not here
LEARNING = {
    "cmaes": "keeps its state from one generation of trials to the next, which is not rebuilt "
    "from the trials' results here yet",
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
TWO_GROUPS = re.compile(r".*\(.*\).*\(.*\).*")
# The label Katib puts on a trial's pods (`util.TrialLabels`, its webhook's `mutatePodMetadata`)
EXPERIMENT_LABEL = "katib.kubeflow.org/experiment"
ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # Kubernetes' rand.String, which Katib's names use
MAX_NAME = 40  # an Experiment's name (Katib's `ValidateExperiment`)
MAX_TRIALS = 1000  # of one sweep in one stack (each trial is several objects Pulumi tracks)


class Model(Lax):
    """Katib's webhook decodes an Experiment into Go types: a string where a number goes
    (`parallelTrialCount: "2"`), or a number where a string goes, cannot be decoded."""

    model_config = ConfigDict(strict=True)


class MetricStrategy(Model):
    name: str
    value: Literal["min", "max", "latest"]


class Objective(Model):
    type: Literal["minimize", "maximize"]
    goal: float | None = None
    objective_metric_name: str = Field(min_length=1)
    additional_metric_names: list[str] = Field(default_factory=list)
    metric_strategies: list[MetricStrategy] = Field(default_factory=list)

    @model_validator(mode="after")
    def _not_twice(self) -> Objective:
        if self.objective_metric_name in self.additional_metric_names:
            raise ValueError("additionalMetricNames should not contain objectiveMetricName")
        return self


class Collector(Model):
    kind: Literal["StdOut", "File", "TensorFlowEvent", "PrometheusMetric", "Custom", "None"] = (
        "StdOut"
    )
    custom_collector: dict[str, Any] | None = None


class Filter(Model):
    metrics_format: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _two_groups(self) -> Filter:
        for form in self.metrics_format:  # (Katib's webhook: it compiles, two subexpressions)
            try:
                re.compile(form)
            except re.error as error:
                raise ValueError(f"metricsFormat {form!r}: invalid filter: {error}") from None
            if not TWO_GROUPS.match(form):
                raise ValueError(f"metricsFormat {form!r}: two top subexpressions are required")
        return self


class Source(Model):
    filter: Filter | None = None
    file_system_path: dict[str, Any] | None = None
    http_get: dict[str, Any] | None = None


class MetricsCollector(Model):
    collector: Collector = Field(default_factory=Collector)
    source: Source | None = None


class Setting(Model):
    name: str
    value: str


class Algorithm(Model):
    algorithm_name: str = Field(min_length=1)
    algorithm_settings: list[Setting] = Field(default_factory=list)


class TrialParameter(Model):
    name: str = Field(min_length=1)
    description: str | None = None
    reference: str = Field(min_length=1)


class TrialTemplate(Model):
    primary_container_name: str | None = None
    primary_pod_labels: dict[str, str] | None = None
    trial_parameters: list[TrialParameter] = Field(min_length=1)
    trial_spec: dict[str, Any] | None = None
    config_map: dict[str, Any] | None = None
    go_template: Any = None  # (Katib v1alpha3's: refused with the way to write it now)
    success_condition: str | None = None
    failure_condition: str | None = None
    retain: bool = False


class Spec(Model):
    parameters: list[Parameter] = Field(min_length=1)
    objective: Objective
    algorithm: Algorithm
    trial_template: TrialTemplate
    parallel_trial_count: int = Field(3, gt=0, le=INT32)  # (Katib's default)
    max_trial_count: int | None = Field(None, gt=0, le=INT32)
    max_failed_trial_count: int | None = Field(None, ge=0, le=INT32)
    metrics_collector_spec: MetricsCollector = Field(default_factory=MetricsCollector)
    resume_policy: Literal["Never", "LongRunning", "FromVolume"] = "Never"
    early_stopping: dict[str, Any] | None = None


class Resource(Model):
    api_version: Literal["kubeflow.org/v1beta1"]
    kind: Literal["Experiment"]
    metadata: templates.Metadata
    spec: dict[str, Any]
    status: dict[str, Any] | None = None  # a resource read back from a cluster: ignored


def trials(
    data: dict[str, Any],
    source: str,
    lines: dict,
    beside: tuple[dict[str, Any], ...] = (),
    ended: Ended = NONE_ENDED,
) -> list[tuple[dict[str, Any], Trial]]:
    """The trials' custom resources, in the order they are created, each with its place in
    the sweep (the template inline, or in a ConfigMap `beside` it); or ManifestError naming
    every problem with its path and line. A sweep that learns: the trials known from the
    objectives of the trials that have `ended` (by name; None: ended without one)."""
    fail = functools.partial(templates.error, source, lines=lines)
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
        problems += collect.file_source(spec.metrics_collector_spec)[2]
    if not name:
        problems.append(Problem("metadata.name", "give the sweep a name: its trials take it"))
    elif len(name) > MAX_NAME:  # (Katib's webhook: its trials, and their label, take it)
        reason = f"may not be longer than {MAX_NAME} characters, as Katib's webhook requires"
        problems.append(Problem("metadata.name", reason))
    if problems:
        raise fail(problems)
    count, values = _values(spec, name, fail, ended)
    template, objective = spec.trial_template, _objective(spec)
    learns = spec.algorithm.algorithm_name in SAMPLERS
    names = tuple(trial_name(name, i) for i in range(count)) if learns else ()
    found = []
    for index, assigned in enumerate(values):
        trial = trial_name(name, index)
        document = _substituted(template, assigned, trial, data, fail)
        if objective.file is not None:  # (its problems, the template's: found in the first)
            primary = template.primary_container_name
            if problems := collect.with_file(document, primary, objective.file):
                raise fail(problems)
        parallel, failed = spec.parallel_trial_count, spec.max_failed_trial_count
        given = tuple(assigned.items())
        place = Trial(
            name, index, count, parallel, given, failed, objective, EXPERIMENT_LABEL, names
        )
        found.append((document, place))
    return found


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
        path, json_lines, _ = collect.file_source(collector)
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
        f"{ARCHITECTURE_SEARCH_IS}: aichor-iac runs hyperparameter sweeps (spec.parameters) "
        "by grid, random or sobol"
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
                "multivariate-tpe and bayesianoptimization",
            )
        )
    if spec.early_stopping is not None:
        name = spec.early_stopping.get("algorithmName", "")
        reason = f"early stopping ({name}) needs Katib's controller to stop trials: remove it"
        problems.append(Problem("spec.earlyStopping", reason))
    if algorithm in (*FIXED, *SAMPLERS):  # (its service's `ValidateAlgorithmSettings`)
        for i, setting in enumerate(spec.algorithm.algorithm_settings):
            if reason := settings.problem(algorithm, setting.name, setting.value):
                problems.append(Problem(f"spec.algorithm.algorithmSettings.{i}", reason))
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
        if algorithm == "grid":
            return count, grid(spec.parameters, count, seed, spec.parallel_trial_count)
        if algorithm == "sobol":  # (no seed: the sequence is fixed)
            return count, sobol_search(spec.parameters, count)
        if algorithm in SAMPLERS:
            return count, _learned(spec, name, seed, count, ended)
        return count, random_search(spec.parameters, count, seed)
    except ValueError as error:
        raise fail([Problem("spec.parameters", str(error))]) from None
    except ImportError as error:  # (the search extra)
        raise fail([Problem("spec.algorithm.algorithmName", str(error))]) from None


def _learned(spec: Spec, name: str, seed: int, count: int, ended: Ended) -> list[dict[str, str]]:
    """The values of the trials known from the `ended` ones: trial k once trials 0 to k - p
    have ended (p: parallelTrialCount), asked from their objectives with trials k - p + 1
    to k - 1 as running, whenever they ended. Each trial is so the same whatever the order
    trials end in, and whoever asks: a loop stopped and started again asks the same."""
    algorithm = spec.algorithm.algorithm_name
    given = [(s.name, s.value) for s in spec.algorithm.algorithm_settings]
    arguments = settings.sampler_settings(algorithm, given)
    space = [p.dimension() for p in spec.parameters]
    maximize, parallel = spec.objective.type == "maximize", spec.parallel_trial_count
    names = [trial_name(name, i) for i in range(count)]
    found: list[dict[str, str]] = []
    for k in range(count):
        known = range(k - parallel + 1) if k >= parallel else range(0)
        if any(names[i] not in ended for i in known):
            break
        history = [
            learning.Told(tuple(v.items()), ended[names[i]], True)
            if i in known
            else learning.Told(tuple(v.items()))
            for i, v in enumerate(found)
        ]
        found.append(
            learning.suggest(space, SAMPLERS[algorithm], arguments, seed, maximize, k, history)
        )
    return found


def trial_name(experiment: str, index: int) -> str:
    """Katib names a trial `<experiment>-<8 random characters>`; here the characters come from
    the experiment's name and the trial's index, so every render names it alike."""
    digest = hashlib.sha256(f"{experiment}/{index}".encode()).digest()
    return f"{experiment}-" + "".join(ALPHABET[b % len(ALPHABET)] for b in digest[:8])


def _substituted(
    template: TrialTemplate, values: dict[str, str], trial: str, data: dict[str, Any], fail: Any
) -> dict[str, Any]:
    """The trial's custom resource: each `${trialParameters.<name>}` in a string of the
    template replaced by its parameter's value or the trial's metadata (as Katib replaces
    them in the template's text), named for the trial."""
    spec = template.trial_spec or {}
    metadata = spec.get("metadata") if isinstance(spec.get("metadata"), dict) else {}
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
