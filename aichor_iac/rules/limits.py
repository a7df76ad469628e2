"""The API server's rules that our objects must keep and that its OpenAPI schema does not state
(`kubernetes-validate` passes objects that break every one of them), as data.

`RULES` says where each rule applies in a plain Kubernetes object and where the API server (or
the kernel a container runs on) enforces it; `check()` applies them all to the rendered objects
before anything is printed or registered. The manifest and stack-config models use the same
patterns and bounds (`LabelKey`, `LabelValue`, ...), so most problems are reported on the field
that causes them and `check()` is the net under everything derived from several fields.

Sources: k8s.io/apimachinery/pkg/util/validation (names, label keys and values, IANA service
names, env names), pkg/apis/core/validation (containers, env, tolerations, resources,
annotations, ConfigMap and Secret sizes), pkg/apis/batch/validation (Indexed Jobs), Linux
`execve` (MAX_ARG_STRLEN, ARG_MAX), etcd's default request size.

Pure: no Pulumi, Kubernetes client or manifest import (every other module may import this one).
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import AfterValidator, Field

from .places import Places

# Numbers.
INT32 = 2**31 - 1  # int32 fields: ports, counts, probe periods, backoffLimit, ...
MAX_INDEXED = 100_000  # completions and parallelism of an Indexed Job
MAX_LABEL = 63  # DNS labels, label values, label-key names
MAX_SUBDOMAIN = 253  # DNS subdomains, label-key prefixes
MAX_ANNOTATIONS = 256 * 1024  # all of one object's annotation keys and values
MAX_DATA = 1024 * 1024  # all of a ConfigMap's or Secret's data
MAX_OBJECT = 3 * 512 * 1024  # etcd's default request limit (--max-request-bytes, 1.5 MiB)
MAX_ARG_STRLEN = 128 * 1024  # one argument, or one NAME=value of the environment (Linux execve)
ARG_MAX = 2 * 1024 * 1024  # a process's arguments and environment together (8 MiB stack / 4)
MAX_PORT = 65535

# Patterns (compiled with \Z: `$` would accept a trailing newline). The `*_SCHEMA` strings are
# the same patterns for pydantic and JSON Schema, whose `$` ends the text.
_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = rf"{_LABEL}(?:\.{_LABEL})*"
_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"  # a label-key name, a label value
DNS_LABEL = re.compile(rf"{_LABEL}\Z")  # DNS-1123 label
DNS_1035 = re.compile(r"[a-z](?:[-a-z0-9]*[a-z0-9])?\Z")  # DNS-1035 label: Services, hosts
DNS_SUBDOMAIN = re.compile(rf"{_SUBDOMAIN}\Z")
QUALIFIED_NAME = re.compile(rf"{_NAME}\Z")
ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*\Z")  # before 1.32's relaxed rule
DATA_KEY = re.compile(r"[-._a-zA-Z0-9]+\Z")  # ConfigMap and Secret keys
PORT_NAME = re.compile(r"(?!.*--)[a-z0-9](?:[-a-z0-9]*[a-z0-9])?\Z")  # IANA service name
QUANTITY = re.compile(
    r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+|[KMGTPE]i|[numkMGTPE])?\Z"
)
IMAGE_SCHEMA = r"^\S+$"  # a container image reference has no whitespace
LABEL_VALUE_SCHEMA = rf"^(?:{_NAME})?$"
LABEL_KEY_SCHEMA = rf"^(?:{_SUBDOMAIN}/)?{_NAME}$"


def is_dns_label(value: str) -> bool:
    return len(value) <= MAX_LABEL and bool(DNS_LABEL.match(value))


def dns_label(value: str, limit: int = 63) -> str:
    """`value`, if it is a DNS label of at most `limit` characters (a name that ends up in
    host names); else the ValueError that says what one is (a pydantic validator)."""
    if not DNS_1035.match(value) or len(value) > limit:
        raise ValueError(
            f"{value!r} must be a DNS label: lowercase letters, digits and '-', starting with a "
            f"letter, at most {limit} characters"
        )
    return value


def is_subdomain(value: str) -> bool:
    return len(value) <= MAX_SUBDOMAIN and bool(DNS_SUBDOMAIN.match(value))


def is_label_value(value: str) -> bool:
    return value == "" or (len(value) <= MAX_LABEL and bool(QUALIFIED_NAME.match(value)))


def is_label_key(value: str) -> bool:
    """`[prefix/]name`: the prefix a DNS subdomain, the name a qualified name."""
    prefix, slash, name = value.rpartition("/")
    return (
        (not slash or is_subdomain(prefix))
        and len(name) <= MAX_LABEL
        and bool(QUALIFIED_NAME.match(name))
    )


def is_port_name(value: str) -> bool:
    return len(value) <= 15 and bool(PORT_NAME.match(value)) and any(c.isalpha() for c in value)


def _checked(test: Callable[[str], bool], what: str) -> Callable[[str], str]:
    def validate(value: str) -> str:
        if not test(value):
            raise ValueError(f"{value!r} is not {what}")
        return value

    return validate


LABEL_VALUE_RULE = (
    "a label value (at most 63 letters, digits, '-', '_' or '.', beginning and ending with a "
    "letter or digit)"
)
LABEL_KEY_RULE = (
    "a label key ([prefix/]name: the prefix a DNS subdomain, the name at most 63 letters, "
    "digits, '-', '_' or '.', beginning and ending with a letter or digit)"
)


def _schema(pattern: str, max_length: int) -> Any:
    """The pattern and length in a field's JSON Schema (for editors); the check itself is an
    AfterValidator, whose error says what the value must be."""
    return Field(json_schema_extra={"pattern": pattern, "maxLength": max_length})


# Manifest and stack-config fields that end up as label keys and values (node selectors,
# tolerations, queue names) or images, checked where the user wrote them.
LabelValue = Annotated[
    str,
    _schema(LABEL_VALUE_SCHEMA, MAX_LABEL),
    AfterValidator(_checked(is_label_value, LABEL_VALUE_RULE)),
]
LabelKey = Annotated[
    str,
    _schema(LABEL_KEY_SCHEMA, MAX_SUBDOMAIN + 1 + MAX_LABEL),
    AfterValidator(_checked(is_label_key, LABEL_KEY_RULE)),
]
Image = Annotated[
    str,
    _schema(IMAGE_SCHEMA, 4096),
    AfterValidator(
        _checked(lambda v: bool(v) and v.split() == [v], "an image reference (no spaces)")
    ),
]


# --- Rules over rendered objects ------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """`test` applied at every place `path` reaches (`places.Places`) in an object of one of
    `kinds` (all when empty); it returns what is wrong, or None."""

    path: str
    test: Callable[[Any], str | None]
    source: str
    kinds: frozenset[str] = frozenset()


def _must(ok: Callable[[Any], bool], what: str) -> Callable[[Any], str | None]:
    return lambda value: None if ok(value) else f"{_shown(value)} is not {what}"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}… ({len(text):,} characters)"


def _int_within(low: int, high: int) -> Callable[[Any], str | None]:
    def test(value: Any) -> str | None:
        if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
            return None
        return f"{_shown(value)} is not a whole number from {low:,} to {high:,}"

    return test


def _size(value: Any) -> int:
    """Bytes of the value as the API server stores it (JSON, UTF-8)."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def _at_most(limit: int, what: str) -> Callable[[Any], str | None]:
    def test(value: Any) -> str | None:
        size = _size(value)
        return None if size <= limit else f"{size:,} bytes, more than {what} ({limit:,})"

    return test


def _data_size(value: dict[str, str]) -> str | None:
    sizes = {k: len(k.encode()) + len(str(v).encode()) for k, v in value.items()}
    if sum(sizes.values()) <= MAX_DATA:
        return None
    largest = max(sizes, key=sizes.__getitem__)
    return (
        f"{sum(sizes.values()):,} bytes of data ({largest}: {sizes[largest]:,}), more than "
        f"1 MiB ({MAX_DATA:,})"
    )


def _exec_size(container: dict[str, Any]) -> str | None:
    """What `execve` takes: each argument and each NAME=value at most MAX_ARG_STRLEN, all of them
    at most ARG_MAX (values from the downward API or Secrets are small and not counted)."""
    strings = [*container.get("command", []), *container.get("args", [])]
    strings += [f"{e['name']}={e['value']}" for e in container.get("env", []) if "value" in e]
    for text in strings:
        if len(text.encode()) > MAX_ARG_STRLEN:
            name = text.partition("=")[0] if "=" in text[:256] else "an argument"
            return (
                f"{name} is {len(text.encode()):,} bytes, more than one argument or environment "
                f"entry of a Linux process can hold ({MAX_ARG_STRLEN:,}, MAX_ARG_STRLEN)"
            )
    total = sum(len(t.encode()) + 1 for t in strings)
    if total > ARG_MAX:
        return (
            f"command and environment are {total:,} bytes, more than a Linux process "
            f"starts with ({ARG_MAX:,})"
        )
    return None


def _image(value: Any) -> str | None:
    if isinstance(value, str) and value and not any(c.isspace() for c in value):
        return None
    return f"{_shown(value)} is not an image reference (no spaces, not empty)"


def _toleration(value: dict[str, Any]) -> str | None:
    key, operator = value.get("key", ""), value.get("operator", "Equal")
    if key and not is_label_key(key):
        return f"key {_shown(key)} is not {LABEL_KEY_RULE}"
    if not key and operator != "Exists":
        return "a toleration without a key must have operator Exists"
    if operator == "Exists" and value.get("value"):
        return "a toleration with operator Exists has no value"
    if not is_label_value(value.get("value", "")):
        return f"value {_shown(value.get('value'))} is not {LABEL_VALUE_RULE}"
    if "tolerationSeconds" in value and value.get("effect") != "NoExecute":
        return "tolerationSeconds needs effect NoExecute"
    return None


def _resources(value: dict[str, Any]) -> str | None:
    """Quantities parse; an extended resource (a GPU, a TPU, an RDMA device) is a whole number
    requested exactly as it is limited."""
    requests, limits = value.get("requests", {}), value.get("limits", {})
    for name, quantity in [*requests.items(), *limits.items()]:
        if not is_label_key(name):
            return f"{_shown(name)} is not a resource name"
        if not QUANTITY.match(str(quantity)):
            return f"{name}: {_shown(quantity)} is not a quantity such as 500m, 2 or 4Gi"
        if "/" in name and not str(quantity).isdigit():
            return f"{name}: {_shown(quantity)} is not a whole number of devices"
    for name in sorted({*requests, *limits}):
        extended = "/" in name and not name.startswith("kubernetes.io/")
        if extended and name not in limits:  # ("Limit must be set for non overcommitable …")
            return (
                f"{name} is requested without a limit, which the API server refuses for an "
                f"extended resource: add limits.{name}: {requests[name]} (a request, if given, "
                "equals the limit)"
            )
        if extended and requests.get(name, limits[name]) != limits[name]:
            return (
                f"{name} is requested ({requests[name]}) other than it is limited "
                f"({limits[name]}): an extended resource is requested exactly as it is limited; "
                "give the limit alone, or both equal"
            )
    return None


def _cidr(value: Any) -> str | None:
    try:
        ipaddress.ip_network(value, strict=False)
    except (TypeError, ValueError):
        return f"{_shown(value)} is not a CIDR such as 10.0.0.0/8"
    return None


def _pod_hosts(job: dict[str, Any]) -> str | None:
    """An Indexed Job's pod `i` is the host `<job>-<i>` (a DNS label) in the subdomain."""
    spec = job.get("spec", {})
    if spec.get("completionMode") != "Indexed" or not spec.get("template", {}).get("spec", {}).get(
        "subdomain"
    ):
        return None
    last = f"{job['metadata']['name']}-{max(spec.get('completions', 1) - 1, 0)}"
    return None if is_dns_label(last) else f"pod host name {last!r} is not a DNS label"


def _mounts(pod: dict[str, Any]) -> str | None:
    """Each container mounts volumes of the pod, each at its own path (ValidateVolumeMounts:
    a mount of no volume, or two mounts at one path, are refused)."""
    volumes = {v.get("name") for v in pod.get("volumes", []) if isinstance(v, dict)}
    for container in [*pod.get("initContainers", []), *pod.get("containers", [])]:
        paths: set[str] = set()
        for mount in container.get("volumeMounts", []) if isinstance(container, dict) else []:
            name, path = mount.get("name"), mount.get("mountPath")
            if name not in volumes:
                return f"{container.get('name')}: mounts {_shown(name)}, which is not a volume"
            if not path or path in paths:
                return f"{container.get('name')}: mounts two volumes at {_shown(path)}"
            paths.add(path)
    return None


_LABEL_RULE = "a DNS label (lowercase letters, digits and '-', at most 63)"
_label = _must(is_dns_label, _LABEL_RULE)
_subdomain = _must(is_subdomain, "a DNS subdomain (lowercase letters, digits, '-' and '.')")
_service_name = _must(lambda v: len(v) <= MAX_LABEL and bool(DNS_1035.match(v)), "a DNS-1035 label")
_label_key = _must(is_label_key, LABEL_KEY_RULE)
_label_value = _must(is_label_value, LABEL_VALUE_RULE)
_env_name = _must(lambda v: bool(ENV_NAME.match(v)), "an environment variable name")
_port_name = _must(is_port_name, "a port name (an IANA service name of at most 15 characters)")
_data_key = _must(lambda v: len(v) <= MAX_SUBDOMAIN and bool(DATA_KEY.match(v)), "a data key")
_quantity = _must(lambda v: bool(QUANTITY.match(str(v))), "a quantity such as 500m, 2 or 4Gi")
INT32_FIELDS = (
    "completions",
    "parallelism",
    "backoffLimit",
    "ttlSecondsAfterFinished",
    "periodSeconds",
    "failureThreshold",
    "timeoutSeconds",
    "initialDelaySeconds",
    "replicas",
    "minMember",
)
_CONTAINERS = "**.containers|initContainers.*"
_LABEL_MAPS = "**.labels|matchLabels|nodeSelector"


def _only(*kinds: str) -> frozenset[str]:
    return frozenset(kinds)


RULES: tuple[Rule, ...] = (
    # Names. A Job's name is also the job-name label of its pods (at most 63).
    Rule(
        "metadata.name",
        _label,
        "ValidateNamespaceName; batch job-name label",
        _only("Namespace", "Job"),
    ),
    Rule("metadata.name", _service_name, "ValidateServiceName", _only("Service")),
    Rule(
        "metadata.name",
        _subdomain,
        "ValidateObjectMeta (DNS subdomain)",
        _only(
            "ConfigMap",
            "Secret",
            "PersistentVolumeClaim",
            "NetworkPolicy",
            "Deployment",
            "PodGroup",
        ),
    ),
    # Labels, selectors and annotations.
    Rule(f"{_LABEL_MAPS}.~", _label_key, "ValidateLabels"),
    Rule(f"{_LABEL_MAPS}.*", _label_value, "ValidateLabels"),
    Rule("spec.selector.~", _label_key, "ValidateLabels", _only("Service")),
    Rule("spec.selector.*", _label_value, "ValidateLabels", _only("Service")),
    Rule("**.annotations.~", _label_key, "ValidateAnnotations"),
    Rule("**.annotations", _at_most(MAX_ANNOTATIONS, "annotations hold"), "ValidateAnnotations"),
    # Containers and pods.
    Rule(f"{_CONTAINERS}.name", _label, "validateContainers"),
    Rule(f"{_CONTAINERS}.image", _image, "validateContainers"),
    Rule(f"{_CONTAINERS}.env.*.name", _env_name, "validateEnv"),
    Rule(f"{_CONTAINERS}.envFrom.*.secretRef|configMapRef.name", _subdomain, "validateEnvFrom"),
    Rule(
        f"{_CONTAINERS}.env.*.valueFrom.secretKeyRef|configMapKeyRef.name",
        _subdomain,
        "validateEnvVarValueFrom",
    ),
    Rule(_CONTAINERS, _exec_size, "Linux execve: MAX_ARG_STRLEN, ARG_MAX"),
    Rule(f"{_CONTAINERS}.resources", _resources, "ValidateResourceRequirements"),
    Rule(f"{_CONTAINERS}.ports.*.name", _port_name, "validateContainerPorts"),
    Rule("**.containerPort", _int_within(1, MAX_PORT), "validateContainerPorts"),
    Rule("**.ports.*.port", _int_within(1, MAX_PORT), "ValidateService", _only("Service")),
    Rule("**.tolerations.*", _toleration, "ValidateTolerations"),
    Rule("**.volumes.*.name", _label, "ValidateVolumes"),
    Rule("**.subdomain", _label, "ValidatePodSpec"),
    Rule("spec.template.spec", _mounts, "ValidateVolumeMounts", _only("Job", "Deployment")),
    # Numbers.
    Rule(f"**.{'|'.join(INT32_FIELDS)}", _int_within(0, INT32), "int32 fields"),
    Rule("spec.completions", _int_within(1, MAX_INDEXED), "batch: Indexed Job", _only("Job")),
    Rule("spec.parallelism", _int_within(1, MAX_INDEXED), "batch: Indexed Job", _only("Job")),
    Rule("", _pod_hosts, "pod hostname (a DNS label)", _only("Job")),
    # Sizes and the rest.
    Rule("data", _data_size, "ConfigMap and Secret size", _only("ConfigMap", "Secret")),
    Rule("stringData", _data_size, "Secret size", _only("Secret")),
    Rule("data.~", _data_key, "IsConfigMapKey", _only("ConfigMap", "Secret")),
    Rule("stringData.~", _data_key, "IsConfigMapKey", _only("Secret")),
    Rule("**.ipBlock.cidr", _cidr, "ValidateNetworkPolicy"),
    Rule("spec.resources.requests.storage", _quantity, "ValidatePersistentVolumeClaim"),
    Rule("spec.minResources.*", _quantity, "PodGroup minResources", _only("PodGroup")),
    Rule(
        "spec.minResources.~",
        _must(is_label_key, "a resource name"),
        "PodGroup minResources",
        _only("PodGroup"),
    ),
    Rule("spec.queue", _subdomain, "Volcano queue name", _only("PodGroup")),
    Rule("spec.priorityClassName", _subdomain, "PriorityClass name", _only("PodGroup")),
    Rule("", _at_most(MAX_OBJECT, "etcd stores as one object"), "etcd --max-request-bytes"),
)


def check(objects: list[dict[str, Any]]) -> list[str]:
    """One line per place where an object breaks a rule: `Kind/name: path: what is wrong`."""
    return [
        f"{obj.get('kind')}/{obj.get('metadata', {}).get('name', '?')}: {where or 'the object'}: "
        f"{wrong}"
        for obj in objects
        for _, where, wrong in violations(obj)
    ]


def violations(obj: dict[str, Any]) -> Iterator[tuple[Rule, str, str]]:
    """(rule, path, what is wrong) for every place where `obj` breaks a rule."""
    kind = obj.get("kind", "")
    places = Places(obj)
    for rule in RULES:
        if rule.kinds and kind not in rule.kinds:
            continue
        for where, value in places.of(rule.path):
            if (wrong := rule.test(value)) is not None:
                yield rule, where, wrong


SUFFIXES = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def quantity(value: object) -> float:
    """A Kubernetes quantity (`500m`, `4Gi`, `1e3`) as a number; 0 if it is not one (the
    API server's own check of the rendered objects names it)."""
    if isinstance(value, float) and not math.isfinite(value):
        return 0.0
    text = str(value)
    try:
        for suffix, factor in (*BINARY.items(), *SUFFIXES.items()):
            if text.endswith(suffix):
                return float(text[: -len(suffix)]) * factor
        return float(text)
    except ValueError:
        return 0.0
