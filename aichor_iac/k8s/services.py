"""What an experiment has beside its replicas: the shared volume, the NetworkPolicy that
isolates it and the PodGroup of a gang scheduler (TensorBoard: `tensorboard`). Pure, like
`objects`."""

from __future__ import annotations

from typing import Any

from ..frameworks import Names
from ..frameworks.base import Mount
from . import kinds
from .awaits import SKIP_AWAIT
from .context import Context

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
        spec=kinds.PersistentVolumeClaimSpecArgs(
            access_modes=[volume.access_mode],
            storage_class_name=volume.storage_class,
            resources=kinds.VolumeResourceRequirementsArgs(
                requests={"storage": f"{volume.size_gb}Gi"}
            ),
        ),
    )


def network_policy(ctx: Context) -> dict:
    """The experiment's pods accept traffic from each other only, and reach each other, DNS
    and the CIDRs the stack config opts into."""
    own = kinds.NetworkPolicyPeerArgs(
        pod_selector=kinds.LabelSelectorArgs(match_labels=ctx.experiment_selector())
    )
    dns = [kinds.NetworkPolicyPortArgs(protocol=p, port=53) for p in ("UDP", "TCP")]
    egress = [
        kinds.NetworkPolicyEgressRuleArgs(to=[own]),
        kinds.NetworkPolicyEgressRuleArgs(ports=dns),
    ]
    if ctx.settings.egress_cidrs:
        egress.append(
            kinds.NetworkPolicyEgressRuleArgs(
                to=[
                    kinds.NetworkPolicyPeerArgs(ip_block=kinds.IPBlockArgs(cidr=c))
                    for c in ctx.settings.egress_cidrs
                ]
            )
        )
    return dict(
        metadata=ctx.metadata(ctx.names.experiment, replica=False),
        spec=kinds.NetworkPolicySpecArgs(
            pod_selector=kinds.LabelSelectorArgs(match_labels=ctx.experiment_selector()),
            policy_types=["Ingress", "Egress"],
            ingress=[kinds.NetworkPolicyIngressRuleArgs(from_=[own])],
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


def companion(ctx: Context, document: dict) -> dict:
    """An object given beside a custom resource (`reading.companions`): in the experiment's
    namespace, with its labels (the user's too), its fields as written; a RoleBinding's
    subjects that are ServiceAccounts of the same file are in that namespace too."""
    metadata = document["metadata"]
    fields = {
        kinds.snake(key): value
        for key, value in document.items()
        if key not in ("apiVersion", "kind", "metadata")
    }
    if document["kind"] == "RoleBinding" and "subjects" in document:
        accounts = {
            c["metadata"]["name"]
            for c in ctx.spec.origin.companions  # type: ignore[union-attr]
            if c["kind"] == "ServiceAccount"
        }
        fields["subjects"] = [
            {**s, "namespace": ctx.names.namespace}
            if s.get("kind") == "ServiceAccount" and s.get("name") in accounts
            else s
            for s in document["subjects"]
        ]
    return dict(
        metadata=ctx.metadata(
            metadata["name"],
            annotations=metadata.get("annotations"),
            replica=False,
            labels={**metadata.get("labels", {}), **ctx.labels(replica=False)},
        ),
        **fields,
    )


def pod_group(ctx: Context) -> dict:
    """A PodGroup for the gang scheduler: none of the gang's pods starts until all that exist
    at once can (`gangs.Gang`), or as the custom resource's `schedulingPolicy` asks (as its
    operator fills the PodGroup)."""
    gang, origin = ctx.blueprint.gang, ctx.spec.origin
    assert gang is not None
    asked = origin.scheduling.pod_group(gang.scheduler) if origin and origin.scheduling else {}
    return dict(
        api_version=POD_GROUP_APIS[gang.scheduler],
        kind="PodGroup",
        metadata=ctx.metadata(ctx.names.experiment, replica=False),
        spec={"minMember": gang.size, **asked},
    )


def storage(
    ctx: Context, read_only: bool = False
) -> tuple[list[kinds.VolumeArgs], list[kinds.VolumeMountArgs]]:
    """Volumes and mounts of the shared volume and of the existing claims to attach."""
    claims = [(c.name, c.mount_point) for c in ctx.spec.storage.attach_existing_pvcs]
    if ctx.shared_volume_claim and (shared := ctx.spec.storage.shared_volume) is not None:
        claims.insert(0, (ctx.shared_volume_claim, shared.mount_point))
    volumes, mounts = [], []
    for i, (claim, mount_point) in enumerate(claims):
        name = f"storage-{i}"
        volumes.append(
            kinds.VolumeArgs(
                name=name,
                persistent_volume_claim=kinds.PersistentVolumeClaimVolumeSourceArgs(
                    claim_name=claim, read_only=read_only or None
                ),
            )
        )
        mounts.append(
            kinds.VolumeMountArgs(name=name, mount_path=mount_point, read_only=read_only or None)
        )
    return volumes, mounts


def projected_volume(names: Names, mount: Mount) -> kinds.VolumeArgs:
    """Files of the experiment's Secret (or the mount's) and ConfigMap in one directory, with
    one mode."""

    def items(source: str) -> list[kinds.KeyToPathArgs]:
        return [
            kinds.KeyToPathArgs(key=f.key, path=f.path, mode=f.mode)
            for f in mount.files
            if f.source == source
        ]

    sources = []
    if secret := items("secret"):
        sources.append(
            kinds.VolumeProjectionArgs(
                secret=kinds.SecretProjectionArgs(
                    name=mount.secret_name or names.secret, items=secret
                )
            )
        )
    if config := items("config"):
        sources.append(
            kinds.VolumeProjectionArgs(
                config_map=kinds.ConfigMapProjectionArgs(name=names.config, items=config)
            )
        )
    return kinds.VolumeArgs(
        name=mount.name,
        projected=kinds.ProjectedVolumeSourceArgs(sources=sources, default_mode=mount.mode),
    )
