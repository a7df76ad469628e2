"""A `Plan` as typed `pulumi_kubernetes` arguments: the headless Service and one Indexed Job
per replica group (DESIGN §4). Pure: builds argument objects, registers nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from pulumi_kubernetes.batch.v1 import JobSpecArgs
from pulumi_kubernetes.core.v1 import (
    CapabilitiesArgs,
    ContainerArgs,
    ContainerPortArgs,
    EmptyDirVolumeSourceArgs,
    EnvVarArgs,
    EnvVarSourceArgs,
    LocalObjectReferenceArgs,
    ObjectFieldSelectorArgs,
    PodSecurityContextArgs,
    PodSpecArgs,
    PodTemplateSpecArgs,
    ResourceRequirementsArgs,
    SeccompProfileArgs,
    SecurityContextArgs,
    ServicePortArgs,
    ServiceSpecArgs,
    TolerationArgs,
    VolumeArgs,
    VolumeMountArgs,
)
from pulumi_kubernetes.meta.v1 import ObjectMetaArgs

from ..frameworks import Group, Names, Plan
from ..frameworks.base import INDEX_VAR
from ..manifest import Resources, Spec
from ..settings import Settings
from . import shell

INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
SKIP_AWAIT = "pulumi.com/skipAwait"
WAIT_FOR = "pulumi.com/waitFor"
TPU_RESOURCE = "google.com/tpu"
TPU_SELECTORS = ("cloud.google.com/gke-tpu-accelerator", "cloud.google.com/gke-tpu-topology")
WAIT_CONTAINER = "wait-for-peers"


@dataclass(frozen=True)
class Context:
    """What every object of one experiment shares."""

    spec: Spec
    plan: Plan
    names: Names
    settings: Settings

    def labels(self, role: str | None = None) -> dict[str, str]:
        labels = {
            "app.kubernetes.io/name": self.plan.framework,
            "app.kubernetes.io/instance": self.names.experiment,
            "app.kubernetes.io/part-of": "aichor",
            "app.kubernetes.io/managed-by": "pulumi",
            "training.kubeflow.org/job-name": self.names.experiment,
        }
        if role:
            labels["app.kubernetes.io/component"] = role
            labels["training.kubeflow.org/replica-type"] = role
        return labels

    def selector(self) -> dict[str, str]:
        return {
            "app.kubernetes.io/instance": self.names.experiment,
            "app.kubernetes.io/part-of": "aichor",
        }

    def metadata(self, name: str, role: str | None = None, annotations: dict | None = None):
        return ObjectMetaArgs(
            name=name,
            namespace=self.names.namespace,
            labels=self.labels(role),
            annotations=annotations or None,
        )


def service(ctx: Context) -> dict:
    """Headless Service giving every replica a stable DNS name, resolvable before it is Ready."""
    return dict(
        metadata=ctx.metadata(ctx.names.service, annotations={SKIP_AWAIT: "true"}),
        spec=ServiceSpecArgs(
            cluster_ip="None",
            publish_not_ready_addresses=True,
            selector=ctx.selector(),
            ports=[
                ServicePortArgs(name=name, port=port, target_port=port, protocol="TCP")
                for name, port in ctx.plan.ports
            ],
        ),
    )


def await_annotations(ctx: Context, group: Group) -> dict[str, str]:
    """How `pulumi up` waits for this group's Job, per `aichor:wait` (DESIGN §4)."""
    mode = ctx.settings.wait
    if mode == "ready":
        return {WAIT_FOR: f"jsonpath={{.status.ready}}={group.count}"}
    if mode == "complete" and group.role == ctx.plan.entry_point:
        return {}  # the provider's Job await: succeeds on Complete, fails on Failed
    return {SKIP_AWAIT: "true"}


def job(ctx: Context, group: Group) -> dict:
    spec = ctx.spec
    return dict(
        metadata=ctx.metadata(ctx.names.job(group.role), group.role, await_annotations(ctx, group)),
        spec=JobSpecArgs(
            completion_mode="Indexed",
            completions=group.count,
            parallelism=group.count,
            backoff_limit=spec.restart_policy.backoff_limit,
            active_deadline_seconds=spec.timeout_seconds,
            template=PodTemplateSpecArgs(
                metadata=ObjectMetaArgs(labels=ctx.labels(group.role)),
                spec=pod_spec(ctx, group),
            ),
        ),
    )


def pod_spec(ctx: Context, group: Group) -> PodSpecArgs:
    resources = group.spec.resources
    volumes, mounts = [], []
    if resources.shm_size_gb:
        volumes.append(
            VolumeArgs(
                name="dshm",
                empty_dir=EmptyDirVolumeSourceArgs(
                    medium="Memory", size_limit=gib(resources.shm_size_gb)
                ),
            )
        )
        mounts.append(VolumeMountArgs(name="dshm", mount_path="/dev/shm"))
    security = container_security(ctx.spec)
    main = ContainerArgs(
        name=ctx.plan.framework,
        image=ctx.spec.image,
        command=shell.main_command(ctx.spec.command, group.env, group.follows),
        env=env(ctx, group),
        ports=[ContainerPortArgs(name=n, container_port=p, protocol="TCP") for n, p in group.ports]
        or None,
        resources=requirements(resources),
        volume_mounts=mounts or None,
        security_context=security,
    )
    init = None
    if group.waits_for is not None:
        init = [
            ContainerArgs(
                name=WAIT_CONTAINER,
                image=ctx.spec.image,
                command=[
                    "/bin/sh",
                    "-c",
                    shell.k8s_escape(
                        shell.wait_script(group.waits_for, ctx.settings.peer_wait_seconds)
                    ),
                ],
                env=[EnvVarArgs(name="NVIDIA_VISIBLE_DEVICES", value="void")],
                resources=ResourceRequirementsArgs(
                    requests={"cpu": "10m", "memory": "64Mi"},
                    limits={"cpu": "1", "memory": "256Mi"},
                ),
                security_context=security,
            )
        ]
    return PodSpecArgs(
        restart_policy="Never",
        subdomain=ctx.names.service,
        automount_service_account_token=False,
        enable_service_links=False,
        security_context=PodSecurityContextArgs(
            seccomp_profile=SeccompProfileArgs(type="RuntimeDefault")
        ),
        node_selector=node_selector(ctx.settings, resources) or None,
        tolerations=tolerations(resources) or None,
        image_pull_secrets=[
            LocalObjectReferenceArgs(name=n) for n in ctx.settings.image_pull_secrets
        ]
        or None,
        init_containers=init,
        containers=[main],
        volumes=volumes or None,
    )


def env(ctx: Context, group: Group) -> list[EnvVarArgs]:
    """The replica index first (downward API), then the framework's variables (those that are
    the index plus an offset are computed by the command's prelude), then AICHOR_* ones."""
    entries = [
        EnvVarArgs(
            name=INDEX_VAR,
            value_from=EnvVarSourceArgs(
                field_ref=ObjectFieldSelectorArgs(
                    field_path=f"metadata.annotations['{INDEX_ANNOTATION}']"
                )
            ),
        )
    ]
    for var in group.env:
        if var.index_offset is None:
            entries.append(EnvVarArgs(name=var.name, value=var.value))
        elif var.index_offset == 0:
            entries.append(EnvVarArgs(name=var.name, value=f"$({INDEX_VAR})"))
    for name, value in ctx.settings.platform_env().items():
        entries.append(EnvVarArgs(name=name, value=shell.k8s_escape(value)))
    if not group.spec.resources.gpus:
        # CUDA images set NVIDIA_VISIBLE_DEVICES=all: a replica without GPUs must not see any.
        entries.append(EnvVarArgs(name="NVIDIA_VISIBLE_DEVICES", value="void"))
    return entries


def container_security(spec: Spec) -> SecurityContextArgs:
    """Pod Security Standards "baseline", and of "restricted" all that ML images allow."""
    return SecurityContextArgs(
        allow_privilege_escalation=False,
        capabilities=CapabilitiesArgs(
            drop=["ALL"], add=["SYS_PTRACE"] if spec.security_context.ptrace else None
        ),
    )


def requirements(resources: Resources) -> ResourceRequirementsArgs:
    memory = resources.memory_gib
    requests = {"cpu": cpu(resources.cpus), "memory": gib(memory)}
    # A memory-backed /dev/shm is charged to the container: make room for it in the limit.
    limits = {
        "cpu": cpu(resources.cpus * resources.cpu_limit_ratio),
        "memory": gib(memory + resources.shm_size_gb),
    }
    gpu, tpu = resources.accelerators.gpu, resources.accelerators.tpu
    if gpu and gpu.count:
        limits[gpu.resource_name] = str(gpu.count)
    if tpu:
        limits[TPU_RESOURCE] = str(tpu.tpu_chips_count)
    return ResourceRequirementsArgs(requests=requests, limits=limits)


def node_selector(settings: Settings, resources: Resources) -> dict[str, str]:
    selector = dict(sorted(resources.extra_selectors.items()))
    gpu, tpu = resources.accelerators.gpu, resources.accelerators.tpu
    if gpu and gpu.count and gpu.product:
        selector[settings.gpu_product_label] = gpu.product
    if tpu:
        selector.update(zip(TPU_SELECTORS, (tpu.type, tpu.topology), strict=True))
    return selector


def tolerations(resources: Resources) -> list[TolerationArgs]:
    result = []
    gpu, tpu = resources.accelerators.gpu, resources.accelerators.tpu
    if gpu and gpu.count:
        result.append(TolerationArgs(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"))
    if tpu:
        result.append(TolerationArgs(key=TPU_RESOURCE, operator="Exists", effect="NoSchedule"))
    result += [
        TolerationArgs(**t.model_dump(exclude_none=True)) for t in resources.extra_tolerations
    ]
    return result


def cpu(value: float) -> str:
    """A CPU quantity: whole cores as integers, otherwise millicores."""
    return str(int(value)) if float(value).is_integer() else f"{round(value * 1000)}m"


def gib(value: float) -> str:
    """A memory quantity from GiB: whole GiB as `Gi`, otherwise rounded to `Mi`."""
    return f"{int(value)}Gi" if float(value).is_integer() else f"{round(value * 1024)}Mi"
