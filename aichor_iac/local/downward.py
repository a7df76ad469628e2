"""What Kubernetes does with a container of a pod template on the way to running it: the
downward API's values, Secret references, and `$(VAR)` expansion of env values and commands."""

from __future__ import annotations

import hashlib
import os
import re
from typing import Any

from .jobs import indexed, pod_name

INDEX_PATH = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
JOB_UID = "metadata.labels['batch.kubernetes.io/controller-uid']"


def expand(text: str, mapping: dict[str, str]) -> str:
    """Kubernetes' expansion (k8s.io/kubernetes third_party/forked/golang/expansion): `$(VAR)`
    becomes the value of an earlier variable, `$$` becomes `$`, anything else stays."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2 : end]
                    out.append(mapping.get(name, f"$({name})"))
                    i = end + 1
                    continue
            out.append("$" + nxt)
            i += 2
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


def container_env(
    job: dict[str, Any],
    index: int,
    container: str | None = None,
    pod_ip: str | None = None,
    secrets: dict[tuple[str, str], str] | None = None,
) -> dict[str, str]:
    """The env Kubernetes gives a container of pod `index` of a Job; `secrets` holds the
    values of (Secret name, key) references."""
    main = container_of(job["spec"]["template"]["spec"], container)
    env: dict[str, str] = {}
    for entry in main.get("env", []):
        if "valueFrom" in entry:
            value = _value_from(entry, job, index, pod_ip, secrets)
            if value is not None:  # (an optional key of a Secret not here: unset)
                env[entry["name"]] = value
        else:
            env[entry["name"]] = expand(entry.get("value", ""), env)
    if indexed(job):  # the Job controller adds it otherwise
        env.setdefault("JOB_COMPLETION_INDEX", str(index))
    env["HOSTNAME"] = pod_name(job, index)  # the pod's host name
    return env


def container_argv(
    container: dict[str, Any], env: dict[str, str], entrypoints: dict[str, list[str]]
) -> list[str]:
    """What a container runs: its command and args, `$(VAR)`s expanded as Kubernetes does,
    after its image's entrypoint (`entrypoints[image]`, never expanded) where it gives no
    command."""
    args = [expand(part, env) for part in container.get("command", []) + container.get("args", [])]
    return args if "command" in container else [*entrypoints[container["image"]], *args]


# A label's or an annotation's value: `metadata.labels['key']`, `metadata.annotations['key']`
POD_METADATA = re.compile(r"metadata\.(labels|annotations)\['(.+)'\]\Z")


def _value_from(
    entry: dict[str, Any],
    job: dict[str, Any],
    index: int,
    pod_ip: str | None,
    secrets: dict[tuple[str, str], str] | None,
) -> str | None:
    """An env entry's `valueFrom`: a field of the pod, or a Secret's key."""
    source = entry["valueFrom"]
    if "fieldRef" in source:
        name = job["metadata"]["name"]
        # the Job controller names pod i `<job>-<i>-<5 random characters>` (Indexed), else
        # `<job>-<5 random characters>`; a missing annotation's value is ""
        prefix = f"{name}-{index}-" if indexed(job) else f"{name}-"
        path = source["fieldRef"]["fieldPath"]
        if path == JOB_UID:  # (the Job controller's label: the Job's uid)
            return job["metadata"].get("uid", "")
        if (meta := POD_METADATA.match(path)) and path != INDEX_PATH:  # the template's
            return (job["spec"]["template"]["metadata"].get(meta[1]) or {}).get(meta[2], "")
        return {
            INDEX_PATH: str(index) if indexed(job) else "",
            "status.podIP": pod_ip or f"10.0.0.{index + 1}",
            "metadata.namespace": job["metadata"]["namespace"],
            "metadata.name": prefix + hashlib.sha1(f"{name}{index}".encode()).hexdigest()[:5],
        }[source["fieldRef"]["fieldPath"]]
    if "secretKeyRef" in source and secrets and _key(source) in secrets:
        return secrets[_key(source)]
    if source.get("secretKeyRef", {}).get("optional"):
        # A Secret of the user's that a local run has not: the variable of that name in the
        # user's environment stands in for an optional key (the stores' keys: docs/stores.md)
        return os.environ.get(entry["name"])
    return f"<{entry['name']} from {sorted(source)[0]}>"  # (a Secret of the user's: not here)


def _key(source: dict[str, Any]) -> tuple[str, str]:
    """The (Secret name, key) an env value's `secretKeyRef` names."""
    return source["secretKeyRef"]["name"], source["secretKeyRef"]["key"]


def container_of(pod_spec: dict[str, Any], name: str | None) -> dict[str, Any]:
    """The container (or init container) `name` of a pod spec; None: the first."""
    containers = pod_spec["containers"] + pod_spec.get("initContainers", [])
    return next(c for c in containers if name is None or c["name"] == name)
