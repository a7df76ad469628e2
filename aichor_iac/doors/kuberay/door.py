"""The KubeRay front door: a `ray.io/v1` RayJob or RayCluster as the neutral description of an
experiment, its pod templates kept as the user wrote them.

KubeRay's own defaulting of the templates is applied here (v1.7.0,
`ray-operator/controllers/ray/common/pod.go`): the Ray container is each template's first; its
`/dev/shm` is a memory-backed emptyDir unless it mounts one or `plasma-directory` is given; it
gets the `metrics` port; a worker group runs `replicas` clamped to its min and max; the
submitter's default template. What KubeRay then adds to each pod (the generated `ray start`,
the env, the Service, the submission) is `frameworks/kuberay.py`'s. Fields aichor-iac cannot
honour are refused with their path and the fix.
"""

from __future__ import annotations

import functools
import json
import shlex
from collections.abc import Sequence
from typing import Any

import yaml

from ...experiment.groups import RAY_ROLES, Accelerators, Resources, Tpu
from ...experiment.model import Experiment, FailurePolicy, Spec
from ...experiment.origin import Kept, Origin, RestartPolicy
from ...problems import Problem
from ...reading import crd
from ...reading import podtemplate as templates
from ...reading.text import Document
from ...rules.limits import INT32, dns_label
from ..identities import RAY, RAY_KINDS
from .spec import RayClusterSpec, RayJobSpec, Resource, SubmitterConfig, ray_options

API_VERSION, KINDS = RAY, RAY_KINDS
UNLIMITED = INT32  # a Job's backoffLimit for KubeRay's "recreate it whenever it fails"
SUBMITTER = "ray-job-submitter"  # KubeRay's default submitter container
SUBMITTER_BACKOFF = 2  # KubeRay's default `submitterConfig.backoffLimit`
SHM = ("shared-mem", "/dev/shm")  # KubeRay's object store volume and where it is mounted
METRICS = ("metrics", 8080)


# What aichor-iac does not run, and what to do instead: each a clear error at its path.
CLUSTER_REFUSED = {
    "gcsFaultToleranceOptions": "GCS fault tolerance (an external Redis) is not run here: "
    "remove it (a failed head is restarted, its state lost, as without it)",
    "historyServerOptions": "the history server's collector is not run here: remove it",
    "networkPolicy": "KubeRay's network policies are not generated here: remove it and set "
    "aichor:networkPolicy (and aichor:egressCIDRs) in the stack",
    "tlsOptions": "Ray's TLS between nodes is not set up here: remove it",
    "upgradeStrategy": "`pulumi up` replaces changed Jobs itself: remove it",
    "headServiceAnnotations": "the head's Service is aichor-iac's: remove it",
    "headGroupSpec.headService": "the head's Service is aichor-iac's: remove it",
    "headGroupSpec.enableIngress": "no Ingress is created here: remove it and use "
    "`kubectl port-forward` to the head's Service (the `dashboard` stack output)",
    "headGroupSpec.ingressOptions": "no Ingress is created here: remove it",
    "headGroupSpec.resources": "group resources for Ray (KubeRay 1.5) are not read here: "
    "give them as rayStartParams.resources",
    "headGroupSpec.labels": "group labels for Ray (KubeRay 1.5) are not read here: give "
    "them as rayStartParams.labels",
}
# KubeRay's RayJobDefaultClusterSelectorKey: the name of the RayCluster a RayJob runs on
SELECTOR_KEY = "ray.io/cluster"
JOB_REFUSED = {
    "clusterSelector": "selects a RayCluster that is not in this file, which aichor-iac cannot "
    "reach: give that RayCluster in the same file (the job then runs on it), or remove "
    "clusterSelector and give rayClusterSpec",
    "deletionStrategy": "deletion rules are not run here: remove it and use "
    "shutdownAfterJobFinishes (the cluster stops when the job ends)",
    "preRunningDeadlineSeconds": "is not run here: remove it and set aichor:peerWaitSeconds "
    "(how long replicas wait for the head) or activeDeadlineSeconds",
}


release, fixes = crd.pinned, crd.unmoved  # (the router's `Door`: KubeRay's pinned CRD)


def validate(
    data: dict[str, Any],
    source: str,
    lines: dict,
    companions: list[dict[str, Any]],
    runtimes: Sequence[Document] = (),  # (a Trainer runtime is its TrainJob's: none here)
) -> Experiment:
    """The RayJob or RayCluster as an experiment whose spec's `origin` keeps its templates, or
    ManifestError naming every problem with its path and line."""

    fail = functools.partial(templates.error, source, lines=lines)
    resource, job, cluster, where = _read(data, fail)
    problems: list[Problem] = []
    if job is not None:
        problems += _job_problems(job)
    if cluster is None:
        problems.append(Problem("spec.rayClusterSpec", "give the cluster the job runs on"))
        raise fail(problems)
    problems += _cluster_problems(cluster, where)
    problems += resource.metadata.problems("KubeRay")
    kept = _kept(cluster, job, where, problems)
    if problems:
        raise fail(problems)
    origin = Origin(
        api_version=API_VERSION,
        kind=resource.kind,
        kept=kept,
        ttl_seconds_after_finished=(job.ttl_seconds_after_finished or None) if job else None,
        suspend=bool(job.suspend if job else cluster.suspend),
        ray=ray_options(cluster, job, where),
        queue=resource.metadata.queue,
        companions=tuple(companions),
    )
    experiment = _experiment(resource.metadata.name, cluster, job, kept)
    if job is not None and job.backoff_limit:  # KubeRay retries it on a new cluster: the
        # head, every worker and the job start again together, as the group restart does
        budget = FailurePolicy(job.backoff_limit, source="spec.backoffLimit")
        spec = experiment.spec.with_failure_policy(budget)
        experiment = experiment.model_copy(update={"spec": spec})
    return resource.metadata.read(experiment, origin, source, lines)


def on_cluster(job: Document, cluster: Document) -> Document | None:
    """A RayJob whose `clusterSelector` names the RayCluster given beside it, as KubeRay runs
    it (the cluster by that name, the job submitted to it once it is ready): one RayJob named
    for the cluster, whose `rayClusterSpec` is the cluster's spec (problems at the cluster's
    lines) and whose cluster runs on after the job (it is the RayCluster's, not the job's).
    None if it selects another cluster."""
    spec, metadata = job.data.get("spec"), cluster.data.get("metadata")
    selector = spec.get("clusterSelector") if isinstance(spec, dict) else None
    name = metadata.get("name") if isinstance(metadata, dict) else None
    kinds = (job.data.get("kind"), cluster.data.get("kind"))
    if kinds != ("RayJob", "RayCluster") or not isinstance(selector, dict):
        return None
    if not name or selector.get(SELECTOR_KEY) != name or "rayClusterSpec" in spec:
        return None
    merged = {
        **job.data,
        "metadata": {**(job.data.get("metadata") or {}), "name": name},
        "spec": {
            **{k: v for k, v in spec.items() if k != "clusterSelector"},
            "rayClusterSpec": cluster.data.get("spec"),
            "shutdownAfterJobFinishes": False,
        },
    }
    lines = {
        **{
            ("spec", "rayClusterSpec", *path[1:]): n
            for path, n in cluster.lines.items()
            if path[:1] == ("spec",)
        },
        **job.lines,
    }
    return Document(merged, lines, job.line)


def _read(data: dict[str, Any], fail: Any) -> tuple[Resource, RayJobSpec | None, Any, str]:
    """The resource, its RayJob spec (None: a RayCluster), its cluster's spec and where that
    is, each validated by its model; or `fail` with the problems."""
    kind = data.get("kind")
    if data.get("apiVersion") != API_VERSION or kind not in KINDS:
        known = " or ".join(f"{API_VERSION} {k}" for k in KINDS)
        reason = f"{data.get('apiVersion')} {kind!s} is not a custom resource aichor-iac reads"
        raise fail([Problem("kind", f"{reason}: give {known}")])
    resource = templates.parsed(Resource, data, (), fail)
    if resource.kind == "RayJob":
        job = templates.parsed(RayJobSpec, resource.spec, ("spec",), fail)
        return resource, job, job.ray_cluster_spec, "spec.rayClusterSpec"
    return resource, None, templates.parsed(RayClusterSpec, resource.spec, ("spec",), fail), "spec"


def _refused(given: dict[str, Any], refused: dict[str, str], where: str) -> list[Problem]:
    problems = []
    for path, reason in refused.items():
        value: Any = given
        for key in path.split("."):
            value = value.get(key) if isinstance(value, dict) else None
        if value not in (None, False, {}, []):
            problems.append(Problem(f"{where}.{path}", reason))
    return problems


def _job_problems(job: RayJobSpec) -> list[Problem]:
    problems = _refused(job.model_dump(by_alias=True), JOB_REFUSED, "spec")
    if job.submission_mode in ("InteractiveMode", "SidecarMode"):
        reason = {
            "InteractiveMode": "waits for someone to submit the job: use a RayCluster, and "
            "submit with `ray job submit` through `kubectl port-forward`",
            "SidecarMode": "the submitter runs as its own Job here: remove submissionMode "
            "(K8sJobMode)",
        }[job.submission_mode]
        problems.append(Problem("spec.submissionMode", reason))
    if job.backoff_limit and not job.shutdown_after_job_finishes:
        reason = (
            "retries the job on a new cluster; here the cluster restarts with the job and "
            "ends with it: set shutdownAfterJobFinishes: true (KubeRay refuses a backoffLimit "
            "beside a clusterSelector)"
        )
        problems.append(Problem("spec.backoffLimit", reason))
    submitter = (job.submitter_pod_template or {}).get("spec") or {}
    own = any(c.get("command") for c in submitter.get("containers", [])[:1] if isinstance(c, dict))
    if not job.entrypoint.strip() and job.submission_mode != "InteractiveMode" and not own:
        problems.append(Problem("spec.entrypoint", "give the command the Ray job runs"))
    if job.runtime_env_yaml:
        try:
            runtime_env = yaml.safe_load(job.runtime_env_yaml)
        except yaml.YAMLError:
            runtime_env = None
        if not isinstance(runtime_env, dict):
            problems.append(
                Problem("spec.runtimeEnvYAML", "must be a YAML mapping (pip, env_vars, ...)")
            )
    if job.entrypoint_resources is not None and not _json_object(job.entrypoint_resources):
        problems.append(
            Problem("spec.entrypointResources", "must be a JSON object such as '{\"TPU\": 1}'")
        )
    if job.managed_by not in (None, "ray.io/kuberay-operator"):
        problems.append(
            Problem("spec.managedBy", f"'{job.managed_by}' would run this job: remove managedBy")
        )
    return problems


def _cluster_problems(cluster: RayClusterSpec, where: str) -> list[Problem]:
    problems = _refused(cluster.model_dump(by_alias=True), CLUSTER_REFUSED, where)
    version = cluster.ray_version
    if version is not None and not _ray_2(version):
        problems.append(
            Problem(
                f"{where}.rayVersion",
                f"'{version}' is not a Ray version KubeRay runs: give 2.x, e.g. '2.52.0'",
            )
        )
    auth = cluster.auth_options
    if auth and auth.enable_k8s_token_auth:
        problems.append(
            Problem(
                f"{where}.authOptions.enableK8sTokenAuth",
                "Kubernetes token authentication is not set up here: remove it (token mode "
                "alone protects the cluster)",
            )
        )
    if cluster.managed_by not in (None, "ray.io/kuberay-operator"):
        problems.append(
            Problem(
                f"{where}.managedBy", f"'{cluster.managed_by}' would run this: remove managedBy"
            )
        )
    head_type = cluster.head_group_spec.service_type
    if head_type not in (None, "ClusterIP"):
        problems.append(
            Problem(
                f"{where}.headGroupSpec.serviceType",
                "the head's Service is a ClusterIP Service here: remove serviceType and use "
                "`kubectl port-forward` (the `dashboard` stack output)",
            )
        )
    return problems + _group_problems(cluster, where) + _param_problems(cluster, where)


def _group_problems(cluster: RayClusterSpec, where: str) -> list[Problem]:
    """The worker groups' names, hosts and fields this product does not run."""
    problems: list[Problem] = []
    seen: set[str] = set()
    for i, group in enumerate(cluster.worker_group_specs):
        at = f"{where}.workerGroupSpecs.{i}"
        try:
            dns_label(group.group_name, 40)
        except ValueError as error:
            problems.append(Problem(f"{at}.groupName", f"names the group's Job: {error}"))
        if group.group_name in seen:
            problems.append(Problem(f"{at}.groupName", f"'{group.group_name}' is given twice"))
        if group.group_name in RAY_ROLES:
            problems.append(
                Problem(f"{at}.groupName", f"'{group.group_name}' names another Job: rename it")
            )
        seen.add(group.group_name)
        if isinstance(reason := group.tpu_slice(), str):
            problems.append(Problem(f"{at}.numOfHosts", reason))
        if group.scale_strategy and group.scale_strategy.get("workersToDelete"):
            problems.append(
                Problem(
                    f"{at}.scaleStrategy.workersToDelete",
                    "the autoscaler's field: remove it (each group runs its `replicas`)",
                )
            )
        for path, reason in CLUSTER_REFUSED.items():
            field = path.removeprefix("headGroupSpec.")
            if field in ("resources", "labels") and getattr(group, field):
                problems.append(Problem(f"{at}.{field}", reason))
    return problems


def _param_problems(cluster: RayClusterSpec, where: str) -> list[Problem]:
    """`rayStartParams` values KubeRay's shell line would split or misread."""
    problems: list[Problem] = []
    groups = [(f"{where}.headGroupSpec", cluster.head_group_spec.ray_start_params)]
    groups += [
        (f"{where}.workerGroupSpecs.{i}", g.ray_start_params)
        for i, g in enumerate(cluster.worker_group_specs)
    ]
    for at, params in groups:
        for key, value in params.items():
            if key == "resources" and not _json_object(param(value)):
                problems.append(
                    Problem(
                        f"{at}.rayStartParams.resources",
                        "must be a JSON object such as '{\"TPU\": 4}'",
                    )
                )
            elif _words(value) is None:
                problems.append(
                    Problem(
                        f"{at}.rayStartParams.{key}",
                        "must be one value (KubeRay puts it into a shell command line): "
                        "quote it as a whole, or drop the extra words",
                    )
                )
    return problems


def _kept(
    cluster: RayClusterSpec, job: RayJobSpec | None, where: str, problems: list[Problem]
) -> dict[str, Kept]:
    """Each group's template with KubeRay's defaults: the head's (`Head`), each worker
    group's (by its name) and the RayJob's submitter's (`Submitter`)."""
    head = cluster.head_group_spec
    groups = [("Head", f"{where}.headGroupSpec", head.template, head.ray_start_params)]
    groups += [
        (g.group_name, f"{where}.workerGroupSpecs.{i}", g.template, g.ray_start_params)
        for i, g in enumerate(cluster.worker_group_specs)
    ]
    kept = {}
    for name, at, template, params in groups:
        if invalid := templates.template_problems(template, f"{at}.template"):
            problems += invalid
            continue
        template = _ray_defaults(template, params)
        first = template["spec"]["containers"][0]["name"]
        kept[name] = Kept(at, template, first, "OnFailure", UNLIMITED)
    if job is not None and "Head" in kept:
        at = "spec.submitterPodTemplate"
        template = job.submitter_pod_template or _default_submitter(kept["Head"])
        if invalid := templates.template_problems(template, at):
            problems += invalid
        else:
            config = job.submitter_config or SubmitterConfig()
            backoff = SUBMITTER_BACKOFF if config.backoff_limit is None else config.backoff_limit
            restart: RestartPolicy = (
                "OnFailure" if template["spec"].get("restartPolicy") == "OnFailure" else "Never"
            )
            first = template["spec"]["containers"][0]["name"]
            kept["Submitter"] = Kept(at, template, first, restart, backoff, template_path=at)
    return kept


def _ray_defaults(template: dict[str, Any], params: dict[str, str]) -> dict[str, Any]:
    """KubeRay's additions to a Ray node's template: the object store's memory-backed
    /dev/shm (sized as the container's memory) and the metrics port, on the Ray container."""
    spec = dict(template["spec"])
    ray, *others = spec["containers"]
    ray = dict(ray)
    volume, path = SHM
    mounted = any(m.get("mountPath") == path for m in ray.get("volumeMounts", []))
    if "plasma-directory" not in params and not mounted:
        if not any(v.get("name") == volume for v in spec.get("volumes", [])):
            resources = ray.get("resources") or {}
            memory = (resources.get("limits") or {}).get("memory") or (
                resources.get("requests") or {}
            ).get("memory")
            empty_dir = {"medium": "Memory", **({"sizeLimit": memory} if memory else {})}
            spec["volumes"] = [*spec.get("volumes", []), {"name": volume, "emptyDir": empty_dir}]
        ray["volumeMounts"] = [*ray.get("volumeMounts", []), {"name": volume, "mountPath": path}]
    name, port = METRICS
    if not any(p.get("name") == name for p in ray.get("ports", [])):
        ray["ports"] = [*ray.get("ports", []), {"name": name, "containerPort": port}]
    return {**template, "spec": {**spec, "containers": [ray, *others]}}


def _default_submitter(head: Kept) -> dict[str, Any]:
    """KubeRay's submitter template (`GetDefaultSubmitterContainer`): the head's image."""
    container = {
        "name": SUBMITTER,
        "image": head.main["image"],
        "resources": {
            "limits": {"cpu": "1", "memory": "1Gi"},
            "requests": {"cpu": "500m", "memory": "200Mi"},
        },
    }
    return {"spec": {"containers": [container], "restartPolicy": "Never"}}


def _experiment(
    name: str | None, cluster: RayClusterSpec, job: RayJobSpec | None, kept: dict[str, Kept]
) -> Experiment:
    """The neutral description: the head, the worker groups with KubeRay's desired replicas,
    and the resources of each Ray container (for the experiment's totals)."""
    pools = [{"name": g.group_name, "count": g.count} for g in cluster.worker_group_specs]
    spec = Spec(
        operator="kuberay",
        image=kept["Head"].main["image"],
        command=_command(job, kept),
        ray_version=cluster.ray_version,
        types={
            "Head": {"count": 1, "resources": {"memory": 1}},
            "Workers": [{**p, "resources": {"memory": 1}} for p in pools],
        },
        active_deadline_seconds=job.active_deadline_seconds if job else None,
    )
    head = spec.types.get("Head").model_copy(
        update={"resources": templates.resources(kept["Head"].main)}
    )
    slices = {g.group_name: g.tpu_slice() for g in cluster.worker_group_specs}
    workers = [
        pool.model_copy(update={"resources": _resources(kept[pool.name], slices[pool.name])})
        for pool in spec.types.get("Workers") or []
    ]
    types = spec.types.model_copy(update={"Head": head, "Workers": workers})
    return Experiment(name=name, spec=spec.model_copy(update={"types": types}))


def _resources(group: Kept, tpu: Tpu | str | None) -> Resources:
    """A group's Ray container's resources; a multi-host group's TPU slice, whose hosts the
    Ray framework spreads over one Job per slice (with GKE's TPU variables)."""
    resources = templates.resources(group.main)
    if not isinstance(tpu, Tpu):
        return resources
    return resources.model_copy(update={"accelerators": Accelerators(tpu=tpu)})


def _command(job: RayJobSpec | None, kept: dict[str, Kept]) -> str:
    """The experiment's command, for the record: the entrypoint, or the submitter's own."""
    if job is None:
        return "(a Ray cluster, running until destroyed)"
    argv = kept["Submitter"].argv if "Submitter" in kept else None
    return job.entrypoint.strip() or shlex.join(argv or ["(the submitter's command)"])


def _ray_2(version: str) -> bool:
    major, _, rest = version.partition(".")
    return major == "2" and rest.split(".")[0].isdigit()


def _json_object(value: str) -> bool:
    try:
        return isinstance(json.loads(value), dict)
    except ValueError:
        return False


def _words(value: str) -> list[str] | None:
    """A `rayStartParams` value as the shell would read it in KubeRay's command line (quotes
    removed), if it is one word; None if it is several or unbalanced."""
    try:
        words = shlex.split(value)
    except ValueError:
        return None
    return words if len(words) <= 1 else None


def param(value: str) -> str:
    """The value `ray start` receives for a `rayStartParams` value: what the shell makes of
    it in KubeRay's command line (`'"{\\"TPU\\": 4}"'` is `{"TPU": 4}`), never expanded."""
    words = _words(value)
    return words[0] if words else ""
