"""The JobSet custom resource as this product reads it (`jobset.x-k8s.io/v1alpha2`, JobSet
v0.12.0's fields and webhook defaults): the models the JobSet door validates against, unknown
keys refused with their path. Job and pod templates stay plain JSON (the door checks the Job's
fields one by one, `reading.podtemplate` the pod's)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ...experiment.groups import Model
from ...reading import podtemplate as templates
from ...rules.limits import INT32
from ..identities import JOBSET

API_VERSION = JOBSET
# The JobSet controller's name: a JobSet managed by another one is not run by it.
CONTROLLER = "jobset.sigs.k8s.io/jobset-controller"


class Network(Model):
    enable_dns_hostnames: bool | None = Field(None, alias="enableDNSHostnames")
    subdomain: str | None = None
    publish_not_ready_addresses: bool | None = None


class SuccessPolicy(Model):
    operator: Literal["All", "Any"]
    target_replicated_jobs: list[str] = Field(default_factory=list)


class FailurePolicyRule(Model):
    name: str = ""
    action: Literal[
        "FailJobSet",
        "RestartJobSet",
        "RestartJobSetAndIgnoreMaxRestarts",
        "RestartJob",
        "RestartJobAndIgnoreMaxRestarts",
    ]
    on_job_failure_reasons: list[str] = Field(default_factory=list)
    on_job_failure_message_patterns: list[str] = Field(default_factory=list)
    target_replicated_jobs: list[str] = Field(default_factory=list)


class FailurePolicy(Model):
    max_restarts: int = Field(0, ge=0, le=INT32)
    restart_strategy: Literal["Recreate", "BlockingRecreate", "InPlaceRestart"] = "Recreate"
    rules: list[FailurePolicyRule] = Field(default_factory=list)


class StartupPolicy(Model):
    startup_policy_order: Literal["AnyOrder", "InOrder"]


class Coordinator(Model):
    replicated_job: str
    job_index: int = Field(0, ge=0)
    pod_index: int = Field(0, ge=0)


class DependsOn(Model):
    name: str
    status: Literal["Ready", "Complete"]


class JobMetadata(Model):
    """A Job template's metadata: its labels and annotations go on each Job (the controller
    sets the Job's name and namespace)."""

    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class JobTemplate(Model):
    metadata: JobMetadata = JobMetadata()
    spec: templates.Template  # (nulls read as absent, as the API server reads them)


class ReplicatedJob(Model):
    name: str
    group_name: str = "default"
    template: JobTemplate
    replicas: int = Field(1, ge=0, le=INT32)
    depends_on: list[DependsOn] = Field(default_factory=list, max_length=5)


class Retention(Model):
    when_deleted: Literal["Delete", "Retain"] = "Delete"


class VolumeClaimPolicy(Model):
    templates: list[dict[str, Any]] = Field(default_factory=list, max_length=50)
    retention_policy: Retention = Retention()


class JobSetSpec(Model):
    replicated_jobs: list[ReplicatedJob] = Field(min_length=1, max_length=50)
    network: Network | None = None
    success_policy: SuccessPolicy = SuccessPolicy(operator="All")
    failure_policy: FailurePolicy | None = None
    startup_policy: StartupPolicy | None = None
    suspend: bool = False
    coordinator: Coordinator | None = None
    managed_by: str | None = None
    ttl_seconds_after_finished: int | None = Field(None, ge=0, le=INT32)
    volume_claim_policies: list[VolumeClaimPolicy] = Field(default_factory=list)

    @property
    def in_order(self) -> bool:
        return bool(self.startup_policy and self.startup_policy.startup_policy_order == "InOrder")


class Resource(templates.CustomResource):
    api_version: Literal["jobset.x-k8s.io/v1alpha2"]
    kind: Literal["JobSet"]
