"""The Kubernetes argument types the objects are built from, by their pulumi_kubernetes names
(`kinds.ContainerArgs(...)`, `kinds.JobSpecArgs(...)`).

By default they are pulumi_kubernetes' own typed `*Args`, which the components register. Under
`plain()` they are `Plain` stand-ins that keep the same keyword arguments and give the same
Kubernetes JSON (`as_json`) without importing pulumi_kubernetes, whose type modules take
half a second to import: `aichor-iac validate`, which editors and hooks call on every save,
holds every object to the API server's rules that way. tests/k8s/test_kinds.py checks that
both give the same objects for every input of the render corpus, and that `GROUPS` and
`IRREGULAR` are what pulumi_kubernetes says.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib
import re
from collections.abc import Iterator
from typing import Any

# Where each type lives in pulumi_kubernetes (`pulumi_kubernetes.<group>.v1`).
GROUPS: dict[str, str] = {
    "DeploymentSpecArgs": "apps",
    "DeploymentStrategyArgs": "apps",
    "JobSpecArgs": "batch",
    "PodFailurePolicyArgs": "batch",
    "PodFailurePolicyOnExitCodesRequirementArgs": "batch",
    "PodFailurePolicyOnPodConditionsPatternArgs": "batch",
    "PodFailurePolicyRuleArgs": "batch",
    "AffinityArgs": "core",
    "CapabilitiesArgs": "core",
    "ConfigMapProjectionArgs": "core",
    "ContainerArgs": "core",
    "ContainerPortArgs": "core",
    "EmptyDirVolumeSourceArgs": "core",
    "EnvVarArgs": "core",
    "EnvVarSourceArgs": "core",
    "ExecActionArgs": "core",
    "HTTPGetActionArgs": "core",
    "KeyToPathArgs": "core",
    "LocalObjectReferenceArgs": "core",
    "ObjectFieldSelectorArgs": "core",
    "PersistentVolumeClaimSpecArgs": "core",
    "PersistentVolumeClaimVolumeSourceArgs": "core",
    "PodAffinityArgs": "core",
    "PodAffinityTermArgs": "core",
    "PodDNSConfigArgs": "core",
    "PodSecurityContextArgs": "core",
    "PodSpecArgs": "core",
    "PodTemplateSpecArgs": "core",
    "ProbeArgs": "core",
    "ProjectedVolumeSourceArgs": "core",
    "ResourceRequirementsArgs": "core",
    "SeccompProfileArgs": "core",
    "SecretKeySelectorArgs": "core",
    "SecretProjectionArgs": "core",
    "SecurityContextArgs": "core",
    "ServicePortArgs": "core",
    "ServiceSpecArgs": "core",
    "TCPSocketActionArgs": "core",
    "TolerationArgs": "core",
    "VolumeArgs": "core",
    "VolumeMountArgs": "core",
    "VolumeProjectionArgs": "core",
    "VolumeResourceRequirementsArgs": "core",
    "LabelSelectorArgs": "meta",
    "ObjectMetaArgs": "meta",
    "IPBlockArgs": "networking",
    "NetworkPolicyEgressRuleArgs": "networking",
    "NetworkPolicyIngressRuleArgs": "networking",
    "NetworkPolicyPeerArgs": "networking",
    "NetworkPolicyPortArgs": "networking",
    "NetworkPolicySpecArgs": "networking",
}
# The Kubernetes JSON names of a type's fields that camelCase does not give.
IRREGULAR: dict[str, dict[str, str]] = {
    "ContainerPortArgs": {"host_ip": "hostIP"},
    "PodSpecArgs": {
        "host_ipc": "hostIPC",
        "host_pid": "hostPID",
        "set_hostname_as_fqdn": "setHostnameAsFQDN",
    },
    "ServiceSpecArgs": {
        "cluster_ip": "clusterIP",
        "cluster_ips": "clusterIPs",
        "external_ips": "externalIPs",
        "load_balancer_ip": "loadBalancerIP",
    },
    "VolumeArgs": {"downward_api": "downwardAPI", "scale_io": "scaleIO"},
    "VolumeProjectionArgs": {"downward_api": "downwardAPI"},
}
_PLAIN: contextvars.ContextVar[bool] = contextvars.ContextVar("plain", default=False)


class Plain:
    """A stand-in for the pulumi_kubernetes type `kind`: its keyword arguments, kept."""

    def __init__(self, kind: str, **values: Any) -> None:
        self.kind, self.values = kind, values

    def to_dict(self) -> dict[str, Any]:
        """Its fields by their Kubernetes JSON names, as pulumi's `input_type_to_dict` gives
        a typed one's (None: not set)."""
        names = IRREGULAR.get(self.kind, {})
        return {names.get(k) or camel(k): v for k, v in self.values.items() if v is not None}


def camel(key: str) -> str:
    """A Python keyword argument's Kubernetes JSON name (`restart_policy`: `restartPolicy`)."""
    head, *rest = key.split("_")
    return head + "".join(word.title() for word in rest)


def snake(key: str) -> str:
    """A Kubernetes JSON name's Python keyword argument (`roleRef`: `role_ref`)."""
    return re.sub(r"(?<!^)([A-Z])", r"_\1", key).lower()


@contextlib.contextmanager
def plain() -> Iterator[None]:
    """Build objects from `Plain` stand-ins within this block (this thread or task)."""
    token = _PLAIN.set(True)
    try:
        yield
    finally:
        _PLAIN.reset(token)


def __getattr__(name: str) -> Any:
    if name not in GROUPS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if _PLAIN.get():
        return functools.partial(Plain, name)
    return getattr(importlib.import_module(f"pulumi_kubernetes.{GROUPS[name]}.v1"), name)


def as_json(value: Any) -> Any:
    """Typed `pulumi_kubernetes` arguments (or their `kinds.Plain` stand-ins) as Kubernetes
    JSON (their keys camelCase, maps' keys as they are, no None)."""
    if isinstance(value, Plain):
        value = value.to_dict()
    elif type(value).__module__.startswith("pulumi_kubernetes."):
        # The SDK's own reading of its `*Args` classes (private, but what it serialises with);
        # tests/rules/test_limits.py keeps `Child.object` equal to what the engine registers.
        from pulumi._types import input_type_to_dict

        value = input_type_to_dict(value)
    if isinstance(value, dict):
        return {k: as_json(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [as_json(v) for v in value]
    return value
