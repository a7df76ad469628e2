"""Katib's Experiment (`kubeflow.org/v1beta1`) as its webhook decodes it: the fields read here,
each typed, with the checks Katib's webhook makes on them (`door` makes the rest)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import ConfigDict, Field, model_validator

from ...experiment.groups import Model as Lax
from ...reading import podtemplate as templates
from ...rules.limits import INT32
from ...sweeps.space import Parameter

TWO_GROUPS = re.compile(r".*\(.*\).*\(.*\).*")


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


class EarlyStopping(Model):
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
    early_stopping: EarlyStopping | None = None


class Resource(templates.CustomResource):
    api_version: Literal["kubeflow.org/v1beta1"]
    kind: Literal["Experiment"]
