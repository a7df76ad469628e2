"""Rendered objects as text: deterministic YAML, and one-line summaries for the preview."""

from __future__ import annotations

from typing import Any

import yaml

# Keys Kubernetes users expect first; all others follow in alphabetical order.
LEADING_KEYS = ("apiVersion", "kind", "metadata", "name", "namespace", "spec")


def canonical(value: Any) -> Any:
    """The same data with keys in a fixed order, so that output never depends on dict order."""
    if isinstance(value, dict):
        keys = sorted(value, key=lambda k: (LEADING_KEYS.index(k) if k in LEADING_KEYS else 99, k))
        return {k: canonical(value[k]) for k in keys}
    if isinstance(value, list):
        return [canonical(v) for v in value]
    return value


try:  # (libyaml's: 5x faster)
    from yaml import CSafeDumper as _Base
except ImportError:  # (a PyYAML built without it)
    from yaml import SafeDumper as _Base  # type: ignore[assignment]


class _Dumper(_Base):
    """Block style; shell scripts and other multi-line strings as literal blocks."""


def _str(dumper: _Dumper, value: str) -> yaml.Node:
    style = (
        "|"
        if "\n" in value and not any(line != line.rstrip() for line in value.splitlines())
        else None
    )
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


# Above a rendered Secret: what its `[secret]` values are.
SECRET_NOTE = (
    "# Values redacted ([secret]): generated ones come from pulumi-random / pulumi-tls, yours\n"
    "# from your file; the stack state keeps them encrypted. Never rendered, logged or printed.\n"
)


def to_yaml(objects: list[dict[str, Any]]) -> str:
    """Multi-document YAML, byte-identical for the same objects; a generated Secret says
    that its values are redacted."""
    documents = [
        (SECRET_NOTE if o.get("kind") == "Secret" else "")
        + yaml.dump(
            canonical(o),
            Dumper=_Dumper,
            sort_keys=False,
            default_flow_style=False,
            width=100,
            allow_unicode=True,
        )
        for o in objects
    ]
    return "---\n".join(documents)


def file_name(index: int, obj: dict[str, Any], extension: str = "yaml") -> str:
    """`render -o`'s file for an object: creation order, kind, name (`03-job-exp-master.yaml`)."""
    return f"{index:02d}-{obj['kind'].lower()}-{obj['metadata']['name']}.{extension}"


def summary(obj: dict[str, Any]) -> str:
    """What one object asks for, in a line: pods, resources and GPUs of a Job, ports of a
    Service."""
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    if kind == "Service":
        ports = ", ".join(f"{p.get('name')}/{p['port']}" for p in spec.get("ports", []))
        mode = "headless" if spec.get("clusterIP") == "None" else spec.get("type", "ClusterIP")
        return f"{mode}, ports {ports or 'none'}"
    template = (spec.get("template") or {}).get("spec")
    if not template:
        return ""
    pods = spec.get("completions", spec.get("replicas", 1))
    container = template["containers"][0]
    resources = container.get("resources", {})
    requests, limits = resources.get("requests", {}), resources.get("limits", {})
    count = f"{pods} pod{'s' if pods != 1 else ''}"
    if kind == "Job" and template.get("hostname"):  # a Job per replica (k8s.Context.replicas)
        count += " (a Job per replica: its image's entrypoint gets literal env)"
    parts = [
        count,
        f"{requests.get('cpu', '?')} CPU",
        f"{requests.get('memory', '?')} memory",
    ]
    accelerators = {k: v for k, v in limits.items() if k not in ("cpu", "memory")}
    selector = template.get("nodeSelector", {})
    for resource, count in sorted(accelerators.items()):
        product = next((v for k, v in selector.items() if "product" in k or "tpu" in k), "")
        parts.append(f"{count} × {resource}" + (f" ({product})" if product else ""))
    text = ", ".join(parts) + " each"
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    if wait := annotations.get("pulumi.com/waitFor"):
        return f"{text}; pulumi up waits for {wait.removeprefix('jsonpath=')}"
    if kind == "Job" and "pulumi.com/skipAwait" not in annotations:
        return f"{text}; pulumi up waits until it completes"
    return text
