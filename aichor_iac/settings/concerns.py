"""The stack's settings by concern (`aichor:*` keys): each a pydantic model whose fields are
the keys it holds, with their defaults, descriptions (docs/config.md) and checks."""

from __future__ import annotations

import ipaddress
import shlex
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from ..rules.limits import INT32, Image, LabelKey, LabelValue, dns_label, is_dns_label
from ..rules.limits import is_subdomain as _subdomain

WaitMode = Literal["none", "ready", "complete"]
GangScheduler = Literal["none", "coscheduling", "volcano"]


class Concern(BaseModel):
    # (defer_build: only `Settings` validates; its concerns never need a validator of their own)
    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        defer_build=True,
    )


class Placement(Concern):
    """What runs, where: the experiment, its name and namespace, the image's pull Secrets"""

    manifest: str | None = Field(
        None,
        description="Path of the experiment's file (an AIchor manifest, a Kubeflow or KubeRay "
        "custom resource), or of a file or directory of several experiments, relative to the "
        "Pulumi project (required).",
    )
    namespace: str = Field("default", description="Namespace of every object.")
    create_namespace: bool = Field(False, description="Create the namespace with the stack.")
    experiment_name: str | None = Field(
        None,
        description="Experiment name (default: the manifest `name`, else the stack name); "
        "unset for a manifest of several experiments (each has its own).",
    )
    cluster_domain: str = Field("cluster.local", description="The cluster's DNS domain.")
    gpu_product_label: LabelKey = Field(
        "nvidia.com/gpu.product", description="Node label holding the GPU product name."
    )
    image_pull_secrets: list[str] = Field(
        default_factory=list, description="Names of existing image pull Secrets."
    )

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        # It names every object and ends up in host names the replicas' scripts look up.
        return dns_label(value)

    @field_validator("cluster_domain")
    @classmethod
    def _cluster_domain(cls, value: str) -> str:
        # It ends every host name the replicas' scripts look up.
        if not _subdomain(value):
            raise ValueError(f"{value!r} is not a DNS domain such as cluster.local")
        return value

    @field_validator("image_pull_secrets")
    @classmethod
    def _secrets(cls, value: list[str]) -> list[str]:
        return object_names(value)


class Waiting(Concern):
    """What `pulumi up` and the replicas wait for, and how long"""

    wait: WaitMode = Field(
        "none",
        description="What `pulumi up` waits for: none (objects created), ready (every replica "
        "running) or complete (the entry point succeeded).",
    )
    peer_wait_seconds: int = Field(
        1800,
        ge=10,
        le=INT32,  # shell arithmetic in the wait script: a 64-bit `sh` holds it
        description="How long a replica waits for the peers it depends on.",
    )
    wait_timeout_seconds: int = Field(
        86400,
        ge=60,
        le=INT32,
        description="How long pulumi up follows a run under wait: complete when the manifest "
        "gives no timeout.",
    )
    check: bool = Field(
        False,
        description="Check the experiment against the cluster (`aichor-iac check`, read only) "
        "on each `pulumi preview` and `up`: what blocks it, as warnings.",
    )


class Failures(Concern):
    """When a replica fails: the whole group restarts, up to a budget"""

    max_restarts: int | None = Field(
        None,
        ge=0,
        le=INT32,
        description="How many times every replica stops and starts again together after one "
        "fails (unset: the input's own policy, else 0: a failure ends the experiment).",
    )
    permanent_exit_codes: list[int] = Field(
        default_factory=list,
        description="Exit codes (1-255) that fail the experiment at once, whatever restarts "
        "are left.",
    )

    entrypoints: list[str] = Field(
        default_factory=list,
        description="What an image runs where a container gives no command, each "
        "`IMAGE=COMMAND` (its Entrypoint, then its Cmd unless the container has args; "
        "`run --local`'s `--entrypoint`): the group restart runs it again as a command, and "
        "`run --local` runs it (no image is pulled).",
    )

    @field_validator("permanent_exit_codes")
    @classmethod
    def _exit_codes(cls, value: list[int]) -> list[int]:
        if any(not 1 <= code <= 255 for code in value):
            raise ValueError("exit codes are 1 to 255 (0 is success)")
        return sorted(set(value))

    @field_validator("entrypoints")
    @classmethod
    def _entrypoints(cls, value: list[str]) -> list[str]:
        for option in value:
            told_entrypoint(option)
        return value

    def entrypoint_argvs(self) -> dict[str, list[str]]:
        """Each image's entrypoint the stack names (`entrypoints`), as argv (the last given
        for an image wins)."""
        return dict(told_entrypoint(option) for option in self.entrypoints)


class Platform(Concern):
    """AIchor's platform env: the `AICHOR_*` variables of every replica"""

    experiment_id: str | None = Field(None, description="AICHOR_EXPERIMENT_ID for every replica.")
    project_id: str | None = Field(None, description="AICHOR_PROJECT_ID for every replica.")
    input_path: str | None = Field(
        None,
        description="AICHOR_INPUT_PATH for every replica (unset: on the shared volume, if any).",
    )
    output_path: str | None = Field(
        None,
        description="AICHOR_OUTPUT_PATH for every replica (unset: on the shared volume, if any).",
    )
    tensorboard_path: str | None = Field(
        None,
        description="AICHOR_TENSORBOARD_PATH for every replica (unset: on the shared volume, "
        "if any).",
    )
    logs_path: str | None = Field(
        None,
        description="AICHOR_LOGS_PATH for every replica (unset: on the shared volume, if any).",
    )

    def platform_env(self, defaults: dict[str, str] | None = None) -> dict[str, str]:
        """The AICHOR_* variables, configured or else from `defaults`, in a fixed order."""
        defaults = defaults or {}
        values = {
            "AICHOR_EXPERIMENT_ID": self.experiment_id,
            "AICHOR_PROJECT_ID": self.project_id,
            "AICHOR_INPUT_PATH": self.input_path,
            "AICHOR_OUTPUT_PATH": self.output_path,
            "AICHOR_TENSORBOARD_PATH": self.tensorboard_path,
            "AICHOR_LOGS_PATH": self.logs_path,
        }
        values = {k: v if v is not None else defaults.get(k) for k, v in values.items()}
        return {k: v for k, v in values.items() if v is not None}


class Progress(Concern):
    """Progress reports: Kubeflow Trainer's protocol, served by the experiment"""

    progress: bool = Field(
        True,
        description="Give every replica Kubeflow Trainer's progress protocol "
        "(`KUBEFLOW_TRAINER_SERVER_*`), served by a receiver beside the entry point "
        "(docs/architecture.md).",
    )
    progress_image: Image | None = Field(
        None,
        description="Image of the progress receiver (needs `python3`; unset: the experiment's).",
    )


class Storage(Concern):
    """TensorBoard and the volumes the stack keeps"""

    tensorboard_image: str = Field(
        "tensorflow/tensorflow:2.16.1",
        description="Image of TensorBoard (needs `tensorboard` and `python3`).",
    )
    tensorboard_volume_gb: int = Field(
        10,
        ge=1,
        alias="tensorboardVolumeGB",
        description="Size of TensorBoard's log volume, made when no other log location is set.",
    )
    tensorboard_storage_class: str | None = Field(
        None, description="StorageClass of TensorBoard's log volume (default: the cluster's)."
    )
    delete_shared_volume: bool = Field(
        False, description="Let `pulumi destroy` delete the shared volume and its data."
    )

    @field_validator("tensorboard_storage_class")
    @classmethod
    def _storage_class(cls, value: str | None) -> str | None:
        return object_names(value)


class Scheduling(Concern):
    """Queues, gangs and priorities"""

    kueue_queue: LabelValue | None = Field(
        None, description="Kueue LocalQueue: sets kueue.x-k8s.io/queue-name on every Job."
    )
    gang_scheduler: GangScheduler = Field(
        "none", description="Gang scheduling: none, coscheduling (scheduler-plugins) or volcano."
    )
    scheduler_name: str | None = Field(
        None, description="Pod schedulerName (default: the gang scheduler's usual name)."
    )
    priority_class_name: str | None = Field(None, description="PriorityClass of every replica.")

    @field_validator("scheduler_name", "priority_class_name")
    @classmethod
    def _names(cls, value: str | None) -> str | None:
        return object_names(value)


class Network(Concern):
    """The experiment's network: isolation, egress, RDMA"""

    network_policy: bool | None = Field(
        None,
        description="Isolate the experiment: its pods talk to each other and DNS only "
        "(default: on for an AIchor manifest, off for a Kubeflow or KubeRay custom resource, "
        "whose operators add none).",
    )
    rdma_resource_prefix: str = Field(
        "intel.com",
        pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        description="Extended-resource prefix of the SR-IOV device plugin (resources.rdma).",
    )
    rdma_networks: list[str] = Field(
        default_factory=list,
        description="device=network entries: the NetworkAttachmentDefinition (name or "
        "namespace/name) of each RDMA device (default: the device name, _ written -).",
    )
    egress_cidrs: list[str] = Field(
        default_factory=list,
        alias="egressCIDRs",
        description="Extra egress the NetworkPolicy allows (CIDRs).",
    )

    @field_validator("egress_cidrs")
    @classmethod
    def _cidrs(cls, value: list[str]) -> list[str]:
        for cidr in value:
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                raise ValueError(f"{cidr!r} is not a CIDR such as 10.0.0.0/8") from None
        return value

    @field_validator("rdma_networks")
    @classmethod
    def _device_networks(cls, value: list[str]) -> list[str]:
        for entry in value:
            device, _, network = entry.partition("=")
            namespace, _, name = network.rpartition("/")
            if not device or not _subdomain(name) or (namespace and not is_dns_label(namespace)):
                raise ValueError(
                    f"'{entry}' is not device=network, the network a Kubernetes name or "
                    "namespace/name (e.g. sriov_a=sriov-net-a)"
                )
        return value

    def rdma_network(self, device: str) -> str:
        """The network attached for an RDMA device: the configured one, else the device's name
        as a Kubernetes object name."""
        mapped = dict(e.split("=", 1) for e in self.rdma_networks)
        return mapped.get(device, device.lower().replace("_", "-").replace(".", "-"))


class Security(Concern):
    """Who the containers run as"""

    run_as_non_root: bool = Field(
        False, description="Refuse to start containers that would run as root (runAsNonRoot)."
    )
    run_as_user: int | None = Field(
        None,
        ge=0,
        le=INT32,
        description="UID of every container (default: the image's; not for mpi, whose workers' "
        "sshd runs as root).",
    )
    run_as_group: int | None = Field(
        None, ge=0, le=INT32, description="GID of every container (default: the image's)."
    )
    fs_group: int | None = Field(
        None, ge=0, le=INT32, description="Group that owns the pods' volumes (fsGroup)."
    )


def told_entrypoint(option: str) -> tuple[str, list[str]]:
    """`IMAGE=COMMAND` as the image and argv (COMMAND split as a shell would), or ValueError
    saying what to give."""
    image, _, command = option.partition("=")
    try:
        argv = shlex.split(command)
    except ValueError as error:
        raise ValueError(f"{option}: {error}") from None
    if not image or not argv:
        raise ValueError(f"{option}: give IMAGE=COMMAND, e.g. 'my/image:1=python /app/train.py'")
    return image, argv


def object_names(value: str | list[str] | None) -> Any:
    """Names of objects in the cluster (a scheduler profile, a PriorityClass, Secrets, a
    StorageClass): each a DNS subdomain."""
    for name in [value] if isinstance(value, str) else value or []:
        if not _subdomain(name):
            raise ValueError(f"{name!r} is not a Kubernetes name (a DNS subdomain)")
    return value
