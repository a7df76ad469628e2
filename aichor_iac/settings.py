"""Stack configuration (`aichor:*` keys of a `Pulumi.<stack>.yaml`), shared by `__main__.py`
and the offline CLI so both expand a manifest the same way.

`Pulumi.yaml` declares the same keys with type, default and description (tests/test_program.py
keeps the two in step); docs/config.md is generated from the concerns below (`reference()`).
"""

from __future__ import annotations

import ipaddress
import json
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from .problems import ManifestError, Problem
from .rules.limits import INT32, Image, LabelKey, LabelValue, dns_label, is_dns_label
from .rules.limits import is_subdomain as _subdomain

WaitMode = Literal["none", "ready", "complete"]
GangScheduler = Literal["none", "coscheduling", "volcano"]


class _Concern(BaseModel):
    # (defer_build: only `Settings` validates; its concerns never need a validator of their own)
    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        defer_build=True,
    )


class Placement(_Concern):
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
        return _object_names(value)


class Waiting(_Concern):
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


class Failures(_Concern):
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


class Platform(_Concern):
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


class Progress(_Concern):
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


class Keeping(_Concern):
    """Runs kept from inside the cluster: object storage and MLflow (docs/stores.md)"""

    history: str | None = Field(
        None,
        description="Where each pod writes its part of the run's record as it runs: an "
        "absolute path or file:// URL on a volume the pods mount, s3://bucket/prefix (any "
        "S3-compatible store), gs://bucket/prefix (GCS's XML API, HMAC keys), or "
        "az://container/prefix (Azure Blob Storage).",
    )
    history_secret: str | None = Field(
        None,
        description="Secret holding the store's keys as the AWS SDKs name them "
        "(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, optional AWS_SESSION_TOKEN), or for az:// "
        "as the Azure CLI does (AZURE_STORAGE_ACCOUNT, AZURE_STORAGE_KEY); unset, the pods "
        "write unsigned, which a store refuses unless anyone may write (validate warns).",
    )
    history_endpoint: str | None = Field(
        None,
        description="The store's endpoint (AWS_ENDPOINT_URL: MinIO, Ceph; unset: AWS's, or "
        "GCS's for gs://; for az://, the account's blob endpoint: Azurite's).",
    )
    history_region: str | None = Field(None, description="The bucket's region (AWS_REGION).")
    mlflow: str | None = Field(
        None,
        description="MLflow tracking URI (http:// or https://): each experiment a run, a "
        "sweep's trials nested under its run.",
    )
    mlflow_secret: str | None = Field(
        None,
        description="Secret holding MLflow's credentials as its client names them "
        "(MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD).",
    )
    mlflow_experiment: str = Field(
        "aichor", min_length=1, max_length=500, description="The MLflow experiment of the runs."
    )

    @field_validator("history")
    @classmethod
    def _history(cls, value: str | None) -> str | None:
        return None if value is None else history_url(value)

    @field_validator("mlflow", "history_endpoint")
    @classmethod
    def _service(cls, value: str | None) -> str | None:
        return None if value is None else service_url(value)

    # (named apart from Placement's `_secrets`: a validator of the same name replaces it)
    @field_validator("history_secret", "mlflow_secret")
    @classmethod
    def _store_secrets(cls, value: str | None) -> str | None:
        return _object_names(value)

    @property
    def keeps(self) -> bool:
        """Whether the pods keep their run (a keeper beside each)."""
        return bool(self.history or self.mlflow)


HISTORY_SCHEMES = ("file", "s3", "gs", "az")


def history_url(value: str) -> str:
    """A store's URL, checked: an absolute path, file://, s3:// or gs:// with a bucket, az://
    with a container, no credentials in it (they go in a Secret: a URL is rendered in the
    pods' spec)."""
    parts = urlsplit(value)
    if not parts.scheme and value.startswith("/"):
        return value
    if parts.scheme not in HISTORY_SCHEMES:
        raise ValueError(
            f"{value!r}: give an absolute path, file://, s3://bucket, gs://bucket or az://container"
        )
    if parts.scheme == "file" and (parts.netloc or not parts.path.startswith("/")):
        raise ValueError(f"{value!r}: a file URL is file:///absolute/path")
    if parts.scheme != "file" and not is_dns_label(parts.netloc.replace(".", "-")):
        raise ValueError(f"{value!r}: give the bucket's (container's) name after {parts.scheme}://")
    if parts.query or parts.fragment:
        raise ValueError(f"{value!r}: no query or fragment (a bucket and a prefix)")
    return value


def service_url(value: str) -> str:
    """An http(s) URL of a service, without credentials (they go in a Secret)."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{value!r}: give an http:// or https:// URL")
    if parts.username or parts.password:
        raise ValueError(
            "a URL with credentials would be rendered in the pods' spec: give the URL "
            "without them and put them in the Secret (aichor:mlflowSecret, "
            "aichor:historySecret)"
        )
    return value.rstrip("/")


class Storage(_Concern):
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
        return _object_names(value)


class Scheduling(_Concern):
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
        return _object_names(value)


class Network(_Concern):
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


class Security(_Concern):
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


# The concerns in the order of the config reference (pydantic takes the fields of the last
# base first: Settings lists them in reverse).
CONCERNS: tuple[type[_Concern], ...] = (
    Placement,
    Waiting,
    Failures,
    Platform,
    Progress,
    Keeping,
    Storage,
    Scheduling,
    Network,
    Security,
)


class Settings(
    Security,
    Network,
    Scheduling,
    Storage,
    Keeping,
    Progress,
    Platform,
    Failures,
    Waiting,
    Placement,
):
    """Everything about an experiment that is not in its manifest: the stack's `aichor:*`
    config, one concern per base class."""

    @classmethod
    def default(cls) -> Settings:
        """What a stack that sets nothing gets: `Settings()`, without building the validator
        (`validate` and `render` without a stack config need none)."""
        return cls.model_construct()

    def updated(self, source: str = "command line", **changes: Any) -> Settings:
        """A copy with `changes`, validated as the stack config is (`model_copy` is not)."""
        data = self.model_dump(by_alias=True)  # aliases: errors name the `aichor:` keys
        data.update({Settings.model_fields[k].alias or k: v for k, v in changes.items()})
        return validated(data, source)


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


def _object_names(value: str | list[str] | None) -> Any:
    """Names of objects in the cluster (a scheduler profile, a PriorityClass, Secrets, a
    StorageClass): each a DNS subdomain."""
    for name in [value] if isinstance(value, str) else value or []:
        if not _subdomain(name):
            raise ValueError(f"{name!r} is not a Kubernetes name (a DNS subdomain)")
    return value


def reference() -> str:
    """The config reference (docs/config.md): a table per concern, from the fields."""
    out = []
    for concern in CONCERNS:
        out += [f"## {concern.__doc__}", "", "| key | default | meaning |", "|---|---|---|"]
        for name, field in concern.model_fields.items():
            default = field.get_default(call_default_factory=True)
            text = default if isinstance(default, str) else json.dumps(default)
            shown = "unset" if default is None else f"`{text}`"
            out.append(f"| `{field.alias or to_camel(name)}` | {shown} | {field.description} |")
        out.append("")
    return "\n".join(out)


CONFIG_KEYS: tuple[str, ...] = tuple(f.alias or n for n, f in Settings.model_fields.items())


# The keys whose value is a list, which a single string may give
LISTS = ("imagePullSecrets", "egressCIDRs", "rdmaNetworks", "entrypoints")


def from_config(values: dict[str, Any], source: str = "stack config") -> Settings:
    """Settings from `aichor:*` config values (namespace prefix optional).

    Pulumi hands structured values (arrays) to programs as JSON text; both forms are accepted.
    """
    data: dict[str, Any] = {}
    for key, value in values.items():
        name = key.split(":", 1)[1] if key.startswith("aichor:") else key
        if ":" in name or value in ("", None):  # another provider's key, or unset
            continue
        if name in LISTS and isinstance(value, str):
            value = json.loads(value) if value.strip().startswith("[") else [value]
        data[name] = value
    return validated(data, source)


def validated(data: dict[str, Any], source: str) -> Settings:
    """Settings from plain values, or a ManifestError naming each bad `aichor:` key."""
    try:
        return Settings.model_validate(data)
    except ValidationError as error:
        raise ManifestError(
            source,
            [
                Problem("aichor:" + ".".join(str(p) for p in e["loc"]), _sentence(e))
                for e in error.errors()
            ],
        ) from None


def from_pulumi_config(config: Any) -> Settings:
    """Settings from the running stack's `pulumi.Config("aichor")`."""
    values = {key: config.get(key) for key in CONFIG_KEYS}
    return from_config({k: v for k, v in values.items() if v is not None}, "Pulumi config")


def load_stack_file(path: str | Path) -> tuple[Settings, str]:
    """Settings from a `Pulumi.<stack>.yaml` file, and the stack name its file name gives."""
    path = Path(path)
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as error:
        raise ManifestError(
            str(path), [Problem("", f"cannot read stack config: {error}")]
        ) from None
    config = document.get("config") or {}
    settings = from_config({k: v for k, v in config.items() if k.startswith("aichor:")}, str(path))
    stack = path.name.removeprefix("Pulumi.").removesuffix(".yaml").removesuffix(".yml")
    return settings, stack


def _sentence(error: Mapping[str, Any]) -> str:
    if error["type"] == "extra_forbidden":
        return f"unknown key; the aichor keys are {', '.join(CONFIG_KEYS)}"
    return error["msg"].removeprefix("Value error, ")
