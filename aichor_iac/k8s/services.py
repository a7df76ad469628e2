"""What an experiment has beside its replicas: the shared volume, TensorBoard, the
NetworkPolicy that isolates it and the PodGroup of a gang scheduler. Pure, like `objects`."""

from __future__ import annotations

from typing import Any

from pulumi_kubernetes.apps.v1 import DeploymentSpecArgs
from pulumi_kubernetes.core.v1 import (
    ContainerArgs,
    ContainerPortArgs,
    EnvVarArgs,
    PersistentVolumeClaimSpecArgs,
    PodSpecArgs,
    PodTemplateSpecArgs,
    ProbeArgs,
    ResourceRequirementsArgs,
    ServicePortArgs,
    ServiceSpecArgs,
    TCPSocketActionArgs,
    VolumeResourceRequirementsArgs,
)
from pulumi_kubernetes.meta.v1 import LabelSelectorArgs, ObjectMetaArgs
from pulumi_kubernetes.networking.v1 import (
    IPBlockArgs,
    NetworkPolicyEgressRuleArgs,
    NetworkPolicyIngressRuleArgs,
    NetworkPolicyPeerArgs,
    NetworkPolicyPortArgs,
    NetworkPolicySpecArgs,
)

from .objects import SKIP_AWAIT, Context, container_security

TENSORBOARD_PORT = 6006
POD_GROUP_APIS = {
    "coscheduling": "scheduling.x-k8s.io/v1alpha1",
    "volcano": "scheduling.volcano.sh/v1beta1",
}


def shared_volume(ctx: Context) -> dict:
    """The experiment's PersistentVolumeClaim. Never awaited: with a WaitForFirstConsumer
    storage class it stays Pending until a replica mounts it."""
    volume = ctx.spec.storage.shared_volume
    assert volume is not None and ctx.shared_volume_claim is not None
    return dict(
        metadata=ctx.metadata(
            ctx.shared_volume_claim, "storage", {SKIP_AWAIT: "true"}, replica=False
        ),
        spec=PersistentVolumeClaimSpecArgs(
            access_modes=[volume.access_mode],
            storage_class_name=volume.storage_class,
            resources=VolumeResourceRequirementsArgs(requests={"storage": f"{volume.size_gb}Gi"}),
        ),
    )


def tensorboard_path(ctx: Context) -> str | None:
    return ctx.platform_env().get("AICHOR_TENSORBOARD_PATH")


def tensorboard_name(ctx: Context) -> str:
    return f"{ctx.names.experiment}-tensorboard"


def _tensorboard_await(ctx: Context) -> dict[str, str]:
    return {} if ctx.settings.wait == "ready" else {SKIP_AWAIT: "true"}


def tensorboard_deployment(ctx: Context) -> dict:
    """TensorBoard on the experiment's log location, reading the shared volume read-only."""
    labels = ctx.labels("tensorboard", replica=False)
    volumes, mounts = ctx.storage(read_only=True)
    path = tensorboard_path(ctx)
    return dict(
        metadata=ctx.metadata(
            tensorboard_name(ctx), "tensorboard", _tensorboard_await(ctx), replica=False
        ),
        spec=DeploymentSpecArgs(
            replicas=1,
            selector=LabelSelectorArgs(match_labels=labels),
            template=PodTemplateSpecArgs(
                metadata=ObjectMetaArgs(labels=labels),
                spec=PodSpecArgs(
                    containers=[
                        ContainerArgs(
                            name="tensorboard",
                            image=ctx.settings.tensorboard_image,
                            command=[
                                "tensorboard",
                                "--logdir",
                                path or "",
                                "--host",
                                "0.0.0.0",
                                "--port",
                                str(TENSORBOARD_PORT),
                            ],
                            env=[
                                EnvVarArgs(name="AICHOR_TENSORBOARD_PATH", value=path),
                                EnvVarArgs(name="NVIDIA_VISIBLE_DEVICES", value="void"),
                            ],
                            ports=[
                                ContainerPortArgs(
                                    name="tensorboard",
                                    container_port=TENSORBOARD_PORT,
                                    protocol="TCP",
                                )
                            ],
                            readiness_probe=ProbeArgs(
                                tcp_socket=TCPSocketActionArgs(port=TENSORBOARD_PORT),
                                period_seconds=10,
                            ),
                            resources=ResourceRequirementsArgs(
                                requests={"cpu": "250m", "memory": "1Gi"},
                                limits={"cpu": "1", "memory": "2Gi"},
                            ),
                            volume_mounts=mounts or None,
                            security_context=container_security(ctx.spec),
                        )
                    ],
                    volumes=volumes or None,
                    **ctx.pod_defaults(),
                ),
            ),
        ),
    )


def tensorboard_service(ctx: Context) -> dict:
    """ClusterIP only: reach it with `kubectl port-forward` (no LoadBalancer, no NodePort)."""
    return dict(
        metadata=ctx.metadata(
            tensorboard_name(ctx), "tensorboard", _tensorboard_await(ctx), replica=False
        ),
        spec=ServiceSpecArgs(
            type="ClusterIP",
            selector=ctx.labels("tensorboard", replica=False),
            ports=[
                ServicePortArgs(
                    name="tensorboard",
                    port=TENSORBOARD_PORT,
                    target_port=TENSORBOARD_PORT,
                    protocol="TCP",
                )
            ],
        ),
    )


def network_policy(ctx: Context) -> dict:
    """The experiment's pods accept traffic from each other only, and reach each other, DNS
    and the CIDRs the stack config opts into."""
    own = NetworkPolicyPeerArgs(
        pod_selector=LabelSelectorArgs(match_labels=ctx.experiment_selector())
    )
    dns = [NetworkPolicyPortArgs(protocol=p, port=53) for p in ("UDP", "TCP")]
    egress = [NetworkPolicyEgressRuleArgs(to=[own]), NetworkPolicyEgressRuleArgs(ports=dns)]
    if ctx.settings.egress_cidrs:
        egress.append(
            NetworkPolicyEgressRuleArgs(
                to=[
                    NetworkPolicyPeerArgs(ip_block=IPBlockArgs(cidr=c))
                    for c in ctx.settings.egress_cidrs
                ]
            )
        )
    return dict(
        metadata=ctx.metadata(ctx.names.experiment, replica=False),
        spec=NetworkPolicySpecArgs(
            pod_selector=LabelSelectorArgs(match_labels=ctx.experiment_selector()),
            policy_types=["Ingress", "Egress"],
            ingress=[NetworkPolicyIngressRuleArgs(from_=[own])],
            egress=egress,
        ),
    )


def generated_secret(ctx: Context, data: dict[str, Any]) -> dict:
    """The experiment's Secret, from values of Pulumi resources (kept in Pulumi's state, so
    stable across `pulumi up`); the values reach Kubernetes only, never env literals or logs."""
    return dict(
        metadata=ctx.metadata(ctx.names.secret, replica=False),
        type="kubernetes.io/ssh-auth" if ctx.plan.secret == "ssh" else "Opaque",
        string_data=data,
    )


def config_map(ctx: Context) -> dict:
    """Files the replicas mount (MPI's hostfile and SSH client configuration)."""
    return dict(metadata=ctx.metadata(ctx.names.config, replica=False), data=ctx.plan.files)


def pod_group(ctx: Context) -> dict:
    """A PodGroup for the gang scheduler: no replica starts until all of them can."""
    return dict(
        api_version=POD_GROUP_APIS[ctx.settings.gang_scheduler],
        kind="PodGroup",
        metadata=ctx.metadata(ctx.names.experiment, replica=False),
        spec={"minMember": ctx.plan.pods},
    )
