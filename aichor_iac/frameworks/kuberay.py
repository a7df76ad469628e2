"""Ray from a KubeRay custom resource (RayJob, RayCluster), as KubeRay runs it: each group's
kept pod template with the `ray start` KubeRay generates, KubeRay's env, labels and ports, and
a RayJob's submitter. The AIchor `ray` and `kuberay` operators are `ray.py`'s."""

from __future__ import annotations

import json
import math
import re
import shlex
from typing import Any

from ..experiment.model import Spec
from ..experiment.origin import Kept
from ..limits import quantity
from .base import Endpoint, Env, Group, Names, Plan, expanded
from .ray import (
    CLIENT,
    DASHBOARD,
    GCS,
    HEAD_GROUP,
    SUBMITTER,
    kuberay_env,
    retried,
    submit,
)

ULIMIT = "ulimit -n ${RAY_START_ULIMIT_OPEN_FILES:-65536}"  # before KubeRay's `ray start`
OVERWRITE = "ray.io/overwrite-container-cmd"  # the template annotation keeping the command
METRICS_PORT, AGENT_PORT = 8080, 52365
# `ray start` options that take "true"/"false" as a value; every other "true" is a switch and
# every other "false" is left out (KubeRay's `convertParamMap`).
BOOLEAN_VALUES = ("log-color", "include-dashboard", "include-log-monitor")
ACCELERATORS = {"aws.amazon.com/neuroncore": "neuron_cores", "google.com/tpu": "TPU"}


def plan(spec: Spec, names: Names) -> Plan:
    """A RayJob or RayCluster as KubeRay runs it (v1.7.0, `controllers/ray/common/pod.go`,
    `job.go`): each group's kept template runs KubeRay's generated `ray start` (after the
    container's own command, unless that starts Ray itself) with KubeRay's env; a RayJob's
    submitter submits the entrypoint once every node has joined, and with
    `shutdownAfterJobFinishes` the cluster stops when the job ends. A RayCluster runs until
    `pulumi destroy`."""
    origin = spec.origin
    assert origin is not None
    options, kept = origin.options, origin.kept
    params = {group: start_flags(p) for group, p in options["params"].items()}
    head_params = params["Head"]
    port = int(head_params.get("port", GCS))
    dashboard = int(head_params.get("dashboard-port", DASHBOARD))
    client = int(head_params.get("ray-client-server-port", CLIENT))
    head_service = f"{names.experiment}-head"
    head_host = names.service_host(head_service)
    job = "submitter" if origin.kind == "RayJob" else None
    follows = names.host(job, 0) if job and options["shutdown"] else None
    auth = _auth_env(options["auth"])

    def node(group: str, worker: bool) -> tuple[str, tuple[Env, ...], str | None]:
        """A Ray node's `ray start`, its env, and its command (None: the container's own)."""
        flags = dict(params[group])
        if worker:
            flags.setdefault("address", f"{head_host}:{port}")
        else:
            flags.setdefault("dashboard-host", "0.0.0.0")
        flags.setdefault("metrics-export-port", str(METRICS_PORT))
        flags["block"] = True
        flags.setdefault("dashboard-agent-listen-port", str(AGENT_PORT))
        ray_start = start_command(worker, flags, kept[group].main.get("resources") or {})
        user = frozenset(e["name"] for e in kept[group].main.get("env", []))
        address = f"{head_host if worker else '127.0.0.1'}:{port}"
        service = head_service if worker else None
        name = group if worker else HEAD_GROUP
        env = (
            *(e for e in auth if e.name not in user),  # set on the template, before the rest
            *kuberay_env(names, name, ray_start, service, port, address, user),
        )
        program = _command(kept[group], retried(ray_start) if worker else ray_start)
        return ray_start, env, program

    _, head_env, head_program = node("Head", worker=False)
    identity = {"ray.io/is-ray-node": "yes", "ray.io/cluster": names.experiment}
    groups = [
        Group(
            role="head",
            replica_type="Head",
            spec=spec.types.get("Head"),
            env=head_env,
            ports=(("gcs-server", port), ("dashboard", dashboard), ("client", client)),
            follows=follows,
            leader_first=False,
            program=head_program,
            ready_port=port,
            labels=(
                *identity.items(),
                ("ray.io/node-type", "head"),
                ("ray.io/group", HEAD_GROUP),
            ),
        )
    ]
    for pool in spec.types.get("Workers") or []:
        if pool.count == 0:
            continue
        _, env, program = node(pool.name, worker=True)
        groups.append(
            Group(
                role=pool.name,
                replica_type=pool.name,
                spec=pool,
                env=env,
                waits_for=(Endpoint(head_host, port),),
                follows=follows,
                leader_first=False,
                program=program,
                after=("head",),
                labels=(
                    *identity.items(),
                    ("ray.io/node-type", "worker"),
                    ("ray.io/group", pool.name),
                ),
            )
        )
    expected = sum(g.count for g in groups)
    outputs = {
        "rayAddress": f"{head_host}:{port}",
        "dashboard": f"kubectl port-forward -n {names.namespace} svc/{head_service} {dashboard}",
        "dashboardUrl": f"http://{head_host}:{dashboard}",
        "expectedNodeCount": expected,
    }
    if job is not None:
        submission = options["jobId"] or names.experiment
        url = f"http://{head_host}:{dashboard}"
        submitter = kept["Submitter"]
        program = None
        if not submitter.main.get("command"):  # KubeRay's command unless the user gave one
            entrypoint = options["entrypoint"]
            program = submit(url, submission, entrypoint, expected, spec, options["submission"])
        groups.append(
            Group(
                role=job,
                replica_type="Submitter",
                spec=SUBMITTER,
                env=(
                    Env("PYTHONUNBUFFERED", "1"),
                    Env("RAY_DASHBOARD_ADDRESS", f"{head_host}:{dashboard}"),
                    Env("RAY_JOB_SUBMISSION_ID", submission),
                    *auth,
                ),
                waits_for=(Endpoint(head_host, dashboard),),
                program=program,
                after=tuple(g.role for g in groups),
            )
        )
    return Plan(
        framework="ray",
        groups=tuple(groups),
        entry_point=job or "head",
        addresses={"head": f"{head_host}:{port}"},
        secret="password" if options["auth"] == "" else None,
        services={head_service: "head"},
        outputs=outputs,
        endless=job is None,
    )


def start_command(worker: bool, flags: dict[str, str | bool], resources: dict[str, Any]) -> str:
    """KubeRay's `ray start` (`generateRayStartCommand`): the flags in name order, CPUs, memory
    and accelerators from the container's resources unless given, every value one quoted word
    (KubeRay pastes them into the shell line as they are)."""
    limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
    flags = dict(flags)
    cpu = quantity(limits.get("cpu", 0)) or quantity(requests.get("cpu", 0))
    if "num-cpus" not in flags and cpu:
        flags["num-cpus"] = str(math.ceil(cpu))
    memory = quantity(limits.get("memory", 0))
    if "memory" not in flags and memory:
        flags["memory"] = str(math.ceil(memory))
    extra = json.loads(str(flags.get("resources", "{}")))
    custom = any(name in extra for name in ACCELERATORS.values())
    for key in sorted(limits):
        value = quantity(limits[key])
        if "num-gpus" not in flags and value and _gpu(key):
            flags["num-gpus"] = str(math.ceil(value))
        if not custom and key in ACCELERATORS and value:
            extra.setdefault(ACCELERATORS[key], value)
            flags["resources"] = json.dumps(
                {k: int(v) if float(v).is_integer() else v for k, v in extra.items()},
                sort_keys=True,
                separators=(",", ":"),
            )
            custom = True
    words = ["ray", "start", *(["--head"] if not worker else [])]
    for flag in sorted(flags):
        value = flags[flag]
        if isinstance(value, bool):  # a switch: a bare flag, or nothing
            words += [f"--{flag}"] if value else []
        else:
            words.append(f"--{flag}={shlex.quote(value)}")
    return " ".join(words)


def _gpu(resource: str) -> bool:
    """KubeRay's `IsGPUResourceKey`: `nvidia.com/gpu`, any `*gpu`, or a MIG slice."""
    return resource.endswith("gpu") or bool(re.search(r"nvidia\.com/mig-\d+g\.\d+gb$", resource))


def _command(kept: Kept, ray_start: str) -> str | None:
    """A Ray container's command as KubeRay builds it (`BuildPod`): its own command and args
    (shell text, as KubeRay joins them), then `ulimit; ray start`; None when the container
    keeps its command (the `ray.io/overwrite-container-cmd` annotation, or it runs
    `ray start` itself). Run by bash, as KubeRay runs it."""
    main = kept.main
    own = "".join(f"{word} " for word in (*main.get("command", []), *main.get("args", [])))
    annotations = kept.template.get("metadata", {}).get("annotations", {})
    if str(annotations.get(OVERWRITE, "")).lower() == "true" or "ray start" in own:
        return None
    generated = f"{ULIMIT}; {ray_start}"
    text = f"{expanded(own)} && {generated}" if own else generated
    return f"exec /bin/bash -c {shlex.quote(text)}"


def _auth_env(secret: str | None) -> tuple[Env, ...]:
    """Token authentication (`authOptions.mode: token`): the mode, and the token from the
    user's Secret (`secretName`, key `auth_token`) or the experiment's generated one."""
    if secret is None:
        return ()
    token = (
        Env.secret("RAY_AUTH_TOKEN", "auth_token", secret)
        if secret
        else Env.secret("RAY_AUTH_TOKEN", "password")
    )
    return (Env("RAY_AUTH_MODE", "token"), token)


def start_flags(params: dict[str, str]) -> dict[str, str | bool]:
    """A group's `rayStartParams` as KubeRay's `convertParamMap` passes them: a value written
    `true`/`false` in any case is a switch (a bare flag, or nothing) unless the option takes a
    boolean value; any other value is what `ray start` receives from KubeRay's shell line,
    quotes removed (`'"{\\"TPU\\": 4}"'` is `{"TPU": 4}`), nothing expanded (the front door has
    refused values of several words)."""
    result: dict[str, str | bool] = {}
    for flag, value in params.items():
        if value.lower() in ("true", "false") and flag not in BOOLEAN_VALUES:
            result[flag] = value.lower() == "true"
        else:
            words = shlex.split(value)
            result[flag] = words[0] if words else ""
    return result
