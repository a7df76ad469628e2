"""The KubeRay custom resources as this product reads them (`ray.io/v1` RayJob and RayCluster,
KubeRay v1.7.0's fields): the models the KubeRay door validates against, unknown keys refused
with their path. Pod templates stay plain JSON (`reading.podtemplate` checks them)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Literal

import yaml
from pydantic import Field

from ...experiment.groups import TPU_RESOURCE, TPU_SELECTORS, Model, Tpu
from ...experiment.options import RayOptions, RaySubmission
from ...reading import podtemplate as templates
from ...reading.podtemplate import Template
from ...rules.limits import INT32, MAX_INDEXED


class AuthOptions(Model):
    mode: Literal["disabled", "token"] = "disabled"
    secret_name: str | None = None
    enable_k8s_token_auth: bool | None = Field(None, alias="enableK8sTokenAuth")


class HeadGroupSpec(Model):
    ray_start_params: dict[str, str] = Field(default_factory=dict)
    template: Template
    service_type: str | None = None
    head_service: dict[str, Any] | None = None
    enable_ingress: bool | None = None
    ingress_options: dict[str, Any] | None = None
    resources: dict[str, str] | None = None
    labels: dict[str, str] | None = None


class WorkerGroupSpec(Model):
    group_name: str
    replicas: int | None = Field(None, ge=0, le=INT32)
    min_replicas: int | None = Field(None, ge=0, le=INT32)
    max_replicas: int | None = Field(None, ge=0, le=INT32)
    idle_timeout_seconds: int | None = None
    priority: int | None = None
    ray_start_params: dict[str, str] = Field(default_factory=dict)
    template: Template
    scale_strategy: dict[str, Any] | None = None
    num_of_hosts: int = Field(1, ge=1, le=MAX_INDEXED)
    suspend: bool | None = None
    resources: dict[str, str] | None = None
    labels: dict[str, str] | None = None

    @property
    def count(self) -> int:
        """KubeRay's desired replicas (`GetWorkerGroupDesiredReplicas`), before numOfHosts."""
        low, high = (
            self.min_replicas or 0,
            INT32 if self.max_replicas is None else self.max_replicas,
        )
        if self.suspend:
            return 0
        if self.replicas is None or self.replicas < low:
            return low
        return min(self.replicas, high)

    def tpu_slice(self) -> Tpu | str | None:
        """A multi-host group's TPU slice, as GKE's nodes and TPU webhook see it (the Ray
        container's `google.com/tpu` limit, the pod's TPU node selectors), whose hosts are
        `numOfHosts`; else the reason it is not one. None for a single-host group."""
        if self.num_of_hosts == 1:
            return None
        spec = templates.mapping(self.template.get("spec"))
        containers = spec.get("containers")
        first = templates.mapping(
            containers[0] if isinstance(containers, list) and containers else None
        )
        selector = templates.mapping(spec.get("nodeSelector"))
        limits = templates.mapping(templates.mapping(first.get("resources")).get("limits"))
        try:
            tpu = Tpu.model_validate(
                {
                    "type": selector.get(TPU_SELECTORS[0]),
                    "topology": selector.get(TPU_SELECTORS[1]),
                    "tpuChipsCount": int(str(limits.get(TPU_RESOURCE))),
                }
            )
        except ValueError:
            return (
                f"multi-host groups run here as TPU slices: give the Ray container a "
                f"'{TPU_RESOURCE}' limit and the template the node selectors "
                f"{' and '.join(TPU_SELECTORS)}"
            )
        if tpu.hosts != self.num_of_hosts:
            return (
                f"a {tpu.topology} slice of {tpu.tpu_chips_count} chips per host has "
                f"{tpu.hosts} hosts: give numOfHosts {tpu.hosts}"
            )
        return tpu


class RayClusterSpec(Model):
    ray_version: str | None = None
    head_group_spec: HeadGroupSpec
    worker_group_specs: list[WorkerGroupSpec] = Field(default_factory=list)
    auth_options: AuthOptions | None = None
    suspend: bool | None = None
    managed_by: str | None = None
    enable_in_tree_autoscaling: bool | None = None
    autoscaler_options: dict[str, Any] | None = None
    head_service_annotations: dict[str, str] | None = None
    gcs_fault_tolerance_options: dict[str, Any] | None = None
    history_server_options: dict[str, Any] | None = None
    network_policy: dict[str, Any] | None = None
    tls_options: dict[str, Any] | None = None
    upgrade_strategy: dict[str, Any] | None = None


class SubmitterConfig(Model):
    backoff_limit: int | None = Field(None, ge=0, le=INT32)


class RayJobSpec(Model):
    entrypoint: str = ""
    runtime_env_yaml: str = Field("", alias="runtimeEnvYAML")
    metadata: dict[str, str] | None = None
    job_id: str | None = None
    submission_mode: Literal["K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode"] = (
        "K8sJobMode"
    )
    entrypoint_num_cpus: float = Field(0, ge=0)
    entrypoint_num_gpus: float = Field(0, ge=0)
    entrypoint_resources: str | None = None
    ray_cluster_spec: RayClusterSpec | None = None
    cluster_selector: dict[str, str] | None = None
    submitter_pod_template: Template | None = None
    submitter_config: SubmitterConfig | None = None
    shutdown_after_job_finishes: bool = False
    ttl_seconds_after_finished: int = Field(0, ge=0, le=INT32)
    active_deadline_seconds: int | None = Field(None, ge=1, le=INT32)
    pre_running_deadline_seconds: int | None = Field(None, ge=1, le=INT32)
    backoff_limit: int | None = Field(None, ge=0, le=INT32)
    suspend: bool = False
    managed_by: str | None = None
    deletion_strategy: dict[str, Any] | None = None


class Resource(templates.CustomResource):
    api_version: Literal["ray.io/v1"]
    kind: Literal["RayJob", "RayCluster"]


def ray_options(cluster: RayClusterSpec, job: RayJobSpec | None, where: str) -> RayOptions:
    """What the Ray framework reads: each group's `rayStartParams`, the auth mode, and the
    RayJob's submission (entrypoint, runtime env, metadata, entrypoint resources, id); and the
    autoscaler's fields given (the groups run at their declared sizes: a warning says so)."""
    auth = cluster.auth_options
    autoscaler = {
        "enableInTreeAutoscaling": cluster.enable_in_tree_autoscaling,
        "autoscalerOptions": cluster.autoscaler_options,
    }
    options = RayOptions(
        params={
            "Head": dict(cluster.head_group_spec.ray_start_params),
            **{g.group_name: dict(g.ray_start_params) for g in cluster.worker_group_specs},
        },
        auth=(auth.secret_name or "") if auth and auth.mode == "token" else None,
        autoscaling=tuple(f"{where}.{field}" for field, given in autoscaler.items() if given),
    )
    if job is not None:
        runtime_env = yaml.safe_load(job.runtime_env_yaml) if job.runtime_env_yaml else None
        submission = {
            "runtime_env": runtime_env,
            "metadata": job.metadata,
            "entrypoint_num_cpus": job.entrypoint_num_cpus or None,
            "entrypoint_num_gpus": job.entrypoint_num_gpus or None,
            "entrypoint_resources": json.loads(job.entrypoint_resources)
            if job.entrypoint_resources
            else None,
        }
        options = dataclasses.replace(
            options,
            job=RaySubmission(
                entrypoint=job.entrypoint.strip(),
                job_id=job.job_id,
                shutdown=job.shutdown_after_job_finishes,
                submitter=bool(job.submitter_pod_template or job.submitter_config),
                extra={k: v for k, v in submission.items() if v is not None},
            ),
        )
    return options
