"""KubeRay custom resources in, plain objects out: `ray.io/v1` RayJob and RayCluster render
to the same kind of objects as an AIchor manifest, their pod templates kept; each Ray node
runs KubeRay's generated `ray start` with KubeRay's env (v1.7.0, host names aside), a RayJob's
submitter submits the entrypoint once every node has joined. The public samples of
ray-project/kuberay v1.7.0 (tests/kuberay/, unchanged) render and pass the API server's schema
and rules, or are refused naming the field and the fix."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import schemas
import yaml
from conftest import ROOT, expand
from kube import ONE_RAY_CLUSTER_AT_A_TIME, LocalCluster, pod_env

from aichor_iac import doors, planning
from aichor_iac.convert import convert
from aichor_iac.frameworks import base, kuberay
from aichor_iac.problems import ManifestError, Problem
from aichor_iac.reading.companions import is_companion
from aichor_iac.rules import limits
from aichor_iac.settings import Settings

SAMPLES = sorted((ROOT / "tests" / "kuberay").glob("*.yaml"))
HEAD = "exp-head.default.svc.cluster.local"


def container(image: str = "rayproject/ray:2.52.0", **fields: Any) -> dict[str, Any]:
    return {"name": "ray", "image": image, **fields}


def rayjob(**spec: Any) -> dict[str, Any]:
    """A RayJob named exp: a head and one worker group `pool` of 2, one container each."""
    cluster = {
        "rayVersion": "2.52.0",
        "headGroupSpec": {
            "rayStartParams": {},
            "template": {"spec": {"containers": [container(resources=LIMITS)]}},
        },
        "workerGroupSpecs": [
            {
                "groupName": "pool",
                "replicas": 2,
                "rayStartParams": {},
                "template": {"spec": {"containers": [container(resources=LIMITS)]}},
            }
        ],
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "exp"},
        "spec": {"entrypoint": "python -c 'import ray; ray.init()'", "rayClusterSpec": cluster}
        | spec,
    }


def raycluster() -> dict[str, Any]:
    job = rayjob()
    return {**job, "kind": "RayCluster", "spec": job["spec"]["rayClusterSpec"]}


LIMITS = {"limits": {"cpu": "2", "memory": "4Gi"}, "requests": {"cpu": "500m", "memory": "2Gi"}}


def jobs(data: dict[str, Any] | Path, **settings: Any) -> dict[str, dict[str, Any]]:
    objects = expand(data, **settings).objects
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == "Job"}


def main(job: dict[str, Any]) -> dict[str, Any]:
    return job["spec"]["template"]["spec"]["containers"][0]


def env(job: dict[str, Any]) -> dict[str, str]:
    """The operator's env of a Job's Ray container, as declared: a value, or where it comes
    from (`field:<path>`, `secret:<name>/<key>`)."""
    result = {}
    for entry in main(job).get("env", []):
        source = entry.get("valueFrom", {})
        if "fieldRef" in source:
            result[entry["name"]] = f"field:{source['fieldRef']['fieldPath']}"
        elif "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            result[entry["name"]] = f"secret:{ref['name']}/{ref['key']}"
        else:
            result[entry["name"]] = entry["value"].replace("$$", "$")
    result.pop("JOB_COMPLETION_INDEX")  # ours, as Kubernetes' own Indexed Jobs set it
    return result


def kuberay_env(group: str, start: str, worker: bool) -> dict[str, str]:
    """What KubeRay v1.7.0's `setContainerEnvVars` gives a Ray container (usage stats aside),
    and ours: no drain before a node stops (it stops only when its whole cluster does)."""
    return {
        **({"FQ_RAY_IP": HEAD, "RAY_IP": "exp-head"} if worker else {}),
        "RAY_CLUSTER_NAME": "exp",
        "RAY_CLUSTER_NAMESPACE": "field:metadata.namespace",
        "RAY_CLOUD_INSTANCE_ID": "field:metadata.name",
        "RAY_NODE_TYPE_NAME": group,
        "KUBERAY_GEN_RAY_START_CMD": start,
        "RAY_PORT": "6379",
        "RAY_ADDRESS": f"{HEAD if worker else '127.0.0.1'}:6379",
        "RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE": "1",
        "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
    }


HEAD_START = (
    "ray start --head --block --dashboard-agent-listen-port=52365 --dashboard-host=0.0.0.0 "
    "--memory=4294967296 --metrics-export-port=8080 --num-cpus=2"
)
POOL_START = (
    f"ray start --address={HEAD}:6379 --block --dashboard-agent-listen-port=52365 "
    "--memory=4294967296 --metrics-export-port=8080 --num-cpus=2"
)


def test_each_node_and_the_submitter_see_kuberays_env() -> None:
    found = jobs(rayjob(), progress=False)  # (KubeRay's env: not our progress variables)
    assert list(found) == ["exp-head", "exp-pool", "exp-submitter"]
    assert env(found["exp-head"]) == kuberay_env("headgroup", HEAD_START, worker=False)
    assert env(found["exp-pool"]) == kuberay_env("pool", POOL_START, worker=True)
    assert env(found["exp-submitter"]) == {
        "PYTHONUNBUFFERED": "1",
        "RAY_DASHBOARD_ADDRESS": f"{HEAD}:8265",
        "RAY_JOB_SUBMISSION_ID": "exp",
    }
    assert found["exp-pool"]["spec"]["completions"] == 2
    labels = found["exp-pool"]["spec"]["template"]["metadata"]["labels"]
    assert labels["ray.io/node-type"] == "worker" and labels["ray.io/group"] == "pool"
    assert labels["ray.io/cluster"] == "exp"


def test_the_users_env_wins_where_kuberay_defers_to_it() -> None:
    # KubeRay adds RAY_PORT, RAY_ADDRESS and the disk usage flag only when the container does
    # not set them (`EnvVarExists`); the rest it always appends. So does our no-drain default
    # (a cluster serving Ray Serve traffic may want its nodes drained).
    cr = rayjob()
    head = cr["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    head["env"] = [
        {"name": "RAY_ADDRESS", "value": "mine:1"},
        {"name": "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S", "value": "20"},
        {"name": "X", "value": "y"},
    ]
    declared = [e["name"] for e in main(jobs(cr)["exp-head"])["env"]]
    assert declared.count("RAY_ADDRESS") == declared.count("RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S")
    assert declared.count("RAY_ADDRESS") == 1
    assert env(jobs(cr)["exp-head"])["RAY_ADDRESS"] == "mine:1"
    assert env(jobs(cr)["exp-head"])["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"] == "20"


@pytest.mark.parametrize(
    ("worker", "params", "resources", "expected"),
    [
        # CPUs from the limit, else the request, rounded up; memory from the limit only
        (False, {}, {"requests": {"cpu": "1500m", "memory": "1Gi"}}, "--head --num-cpus=2"),
        # GPUs from any *gpu limit; params win; "true" is a switch, "false" left out
        (
            True,
            {"num-cpus": "0", "disable-usage-stats": "true", "no-monitor": "false"},
            {"limits": {"nvidia.com/gpu": "1", "cpu": "4"}},
            "--disable-usage-stats --num-cpus=0 --num-gpus=1",
        ),
        # a TPU limit becomes the TPU resource; options that take a boolean value keep it
        (
            True,
            {"include-dashboard": "false"},
            {"limits": {"google.com/tpu": "4"}},
            "--include-dashboard=false --resources='{\"TPU\":4}'",
        ),
        # values are one quoted word each: nothing the user wrote reaches the shell as code
        (True, {"temp-dir": "'/tmp/a b; rm -rf /'"}, {}, "--temp-dir='/tmp/a b; rm -rf /'"),
        # the switch rule reads the value as written: quoted, "true" is a value
        (True, {"temp-dir": "TRUE", "log-dir": "'true'"}, {}, "--log-dir=true --temp-dir"),
    ],
)
def test_kuberays_ray_start(
    worker: bool, params: dict[str, str], resources: dict[str, Any], expected: str
) -> None:
    words = kuberay.start_command(worker, kuberay.start_flags(params), resources).split(" ", 2)
    assert words[:2] == ["ray", "start"]
    assert words[2] == expected


def test_ray_start_params_in_kuberays_shell_quoting() -> None:
    # KubeRay pastes values into its shell line, so users quote JSON for the shell; the value
    # `ray start` receives is what that shell makes of it (never expanded here).
    cr = rayjob()
    params = cr["spec"]["rayClusterSpec"]["headGroupSpec"]["rayStartParams"]
    params["resources"] = '"{\\"custom\\": 2}"'
    params["temp-dir"] = "$HOME/x"
    start = env(jobs(cr)["exp-head"])["KUBERAY_GEN_RAY_START_CMD"]
    assert shlex.split(start)[5:] == [
        "--dashboard-host=0.0.0.0",
        "--memory=4294967296",
        "--metrics-export-port=8080",
        "--num-cpus=2",
        '--resources={"custom": 2}',
        "--temp-dir=$HOME/x",
    ]


@pytest.mark.parametrize(
    ("command", "args", "annotations", "runs"),
    [
        # no command: `ulimit; ray start`, run by bash as KubeRay does
        (None, None, {}, "ulimit -n ${RAY_START_ULIMIT_OPEN_FILES:-65536}; ray start --head"),
        # the container's command and args (shell text, joined as KubeRay joins them) first
        (["echo", "hi"], ["&&", "pip install x"], {}, "echo hi && pip install x  && ulimit"),
        # Kubernetes' $(VAR) and $$ in that text, as the shell sees them once expanded
        (["echo $(HOME) $$x"], None, {}, "echo ${HOME-$(HOME)} $x  && ulimit"),
    ],
)
def test_the_ray_containers_command(
    command: list[str] | None, args: list[str] | None, annotations: dict[str, str], runs: str
) -> None:
    cr = rayjob()
    head = cr["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]
    head["metadata"] = {"annotations": annotations}
    fields = {"command": command, "args": args}
    head["spec"]["containers"][0].update({k: v for k, v in fields.items() if v is not None})
    line = main(jobs(cr)["exp-head"])["command"][2].replace("$$", "$")
    assert line.startswith("exec /bin/bash -c ")
    assert shlex.split(line)[3].startswith(runs)


@pytest.mark.parametrize(
    ("command", "annotations"),
    [
        (["/bin/bash", "-c", "ray start --head --block"], {}),  # it starts Ray itself
        (["my-entrypoint"], {"ray.io/overwrite-container-cmd": "true"}),
    ],
)
def test_a_container_that_starts_ray_itself_keeps_its_command(
    command: list[str], annotations: dict[str, str]
) -> None:
    cr = rayjob()
    head = cr["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]
    head["metadata"] = {"annotations": annotations}
    head["spec"]["containers"][0]["command"] = command
    for shutdown in (False, True):  # kept as written, or run as written by the wrapper
        cr["spec"]["shutdownAfterJobFinishes"] = shutdown
        line = main(jobs(cr)["exp-head"])["command"]
        assert line == command if not shutdown else shlex.join(command) in line[-1]


def test_kuberays_object_store_volume_and_metrics_port() -> None:
    pod = jobs(rayjob())["exp-head"]["spec"]["template"]["spec"]
    assert {"name": "shared-mem", "emptyDir": {"medium": "Memory", "sizeLimit": "4Gi"}} in pod[
        "volumes"
    ]
    assert {"name": "shared-mem", "mountPath": "/dev/shm"} in main(
        {"spec": {"template": {"spec": pod}}}
    )["volumeMounts"]
    assert {"name": "metrics", "containerPort": 8080} in pod["containers"][0]["ports"]


@pytest.mark.parametrize(
    ("text", "shell"),
    [
        ("echo $(HOME)", "echo ${HOME-$(HOME)}"),
        ("a $$(b) $$$$", "a $(b) $$"),
        ("$(not.a.name) $(", "$(not.a.name) $("),
    ],
)
def test_kubernetes_expansion_of_command_text(text: str, shell: str) -> None:
    assert base.expanded(text) == shell


@pytest.mark.parametrize("shutdown", [True, False])
def test_shutdown_after_the_job_stops_the_cluster_else_it_runs_on(shutdown: bool) -> None:
    found = jobs(rayjob(shutdownAfterJobFinishes=shutdown))
    for name in ("exp-head", "exp-pool"):
        command = " ".join(main(found[name])["command"])
        assert ("exp-submitter-0.exp.default.svc.cluster.local" in command) == shutdown


def test_a_raycluster_runs_until_destroyed() -> None:
    found = jobs(raycluster(), wait="complete")
    assert list(found) == ["exp-head", "exp-pool"]
    for job in found.values():  # nothing awaited to complete: `pulumi up` returns
        annotations = job["metadata"]["annotations"]
        assert annotations.get("pulumi.com/skipAwait") == "true" or "pulumi.com/waitFor" in (
            annotations
        )


def test_submission_options_reach_submit_job() -> None:
    found = jobs(
        rayjob(
            runtimeEnvYAML="pip: [requests]\nenv_vars: {A: b}\n",
            metadata={"team": "x"},
            jobId="my-id",
            entrypointNumCpus=1.5,
            entrypointResources='{"custom": 1}',
        )
    )
    argv = shlex.split(main(found["exp-submitter"])["command"][-1].replace("$$", "$"))
    options = yaml.safe_load(argv[-1])
    assert options == {
        "entrypoint_num_cpus": 1.5,
        "entrypoint_resources": {"custom": 1},
        "metadata": {"team": "x"},
        "runtime_env": {"env_vars": {"A": "b"}, "pip": ["requests"]},
    }
    assert argv[-4] == "my-id"  # (url, submission id, entrypoint, deadline, options)
    assert env(found["exp-submitter"])["RAY_JOB_SUBMISSION_ID"] == "my-id"


def test_token_authentication() -> None:
    cr = rayjob()
    cr["spec"]["rayClusterSpec"]["authOptions"] = {"mode": "token"}
    found = jobs(cr)
    for name in found:
        assert env(found[name])["RAY_AUTH_MODE"] == "token"
        assert env(found[name])["RAY_AUTH_TOKEN"] == "secret:exp-secret/password"
    cr["spec"]["rayClusterSpec"]["authOptions"]["secretName"] = "mine"
    assert env(jobs(cr)["exp-pool"])["RAY_AUTH_TOKEN"] == "secret:mine/auth_token"


def test_config_maps_beside_the_resource_are_created_first(tmp_path: Path) -> None:
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "code", "namespace": "elsewhere", "labels": {"team": "x"}},
        "data": {"main.py": "print(1)\n"},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump_all([rayjob(), config_map]))
    objects = expand(path).objects
    made = next(o for o in objects if o["kind"] == "ConfigMap")
    assert made["metadata"]["name"] == "code" and made["metadata"]["namespace"] == "default"
    assert made["metadata"]["labels"]["team"] == "x" and made["data"] == config_map["data"]
    assert objects.index(made) < min(i for i, o in enumerate(objects) if o["kind"] == "Job")


def test_a_rayjob_runs_on_the_raycluster_its_selector_names_beside_it(tmp_path: Path) -> None:
    """KubeRay's use-existing-raycluster sample with the RayCluster it selects in the same
    file (in either order): one experiment named for the cluster, its nodes from the
    cluster's spec, the job submitted to it once it is up; the cluster runs on after the job.
    A problem of the cluster's spec is reported at the cluster's line."""
    job = yaml.safe_load((ROOT / "tests" / "kuberay" / f"{NO_CLUSTER}.yaml").read_text())
    cluster = raycluster()
    cluster["metadata"]["name"] = "ray-cluster-kuberay"
    for order in ([job, cluster], [cluster, job]):
        path = tmp_path / "both.yaml"
        path.write_text(yaml.safe_dump_all(order, sort_keys=False))
        assert doors.load(path).name == "ray-cluster-kuberay"
        found = jobs(path)  # (named exp here)
        assert sorted(found) == ["exp-head", "exp-pool", "exp-submitter"]
        assert "ray.cluster_resources()" in " ".join(main(found["exp-submitter"])["command"])
        head = " ".join(main(found["exp-head"])["command"])
        assert "exp-submitter-0" not in head  # (it does not follow the job: it runs on)
    cluster["spec"]["headGroupSpec"]["serviceType"] = "LoadBalancer"
    path.write_text(yaml.safe_dump_all([job, cluster], sort_keys=False))
    with pytest.raises(ManifestError) as error:
        doors.load(path)
    (problem,) = error.value.problems
    assert problem.path == "spec.rayClusterSpec.headGroupSpec.serviceType"
    text = path.read_text().splitlines()
    assert "serviceType" in text[problem.line - 1]


@pytest.mark.parametrize(
    ("documents", "message"),
    [
        (
            [{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "redis"}}],
            "a Deployment beside the experiment",
        ),
        (
            [{**rayjob(), "metadata": {"name": "other"}}],
            "holds 2 experiments (exp, other): read them with aichor_iac.load_all (a stack "
            "runs every experiment of its file)",
        ),
        (
            [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Bad_Name"}}],
            "ConfigMap Bad_Name.metadata.name: give a DNS-1123 subdomain name",
        ),
        (
            [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": 3}],
            "ConfigMap c.data: not a valid ConfigMap",
        ),
    ],
)
def test_documents_beside_the_resource_that_are_refused(
    documents: list[dict[str, Any]], message: str
) -> None:
    with pytest.raises(ManifestError, match=re.escape(message)):
        doors.parse(yaml.safe_dump_all([rayjob(), *documents]))


def test_an_aichor_manifest_is_one_document() -> None:
    data = {"kind": "AIchorManifest", "spec": {"operator": "kuberay"}}
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    with pytest.raises(ManifestError, match="holds several YAML documents"):
        doors.parse(yaml.safe_dump_all([data, config_map]))


def refused(path: str, value: Any, message: str) -> tuple[Any, str, str]:
    """A case of `test_bad_resources`: `value` at `path` is refused there with `message`."""
    return (_set(path, value), path, message)


def _set(path: str, value: Any) -> Any:
    def change(cr: dict[str, Any]) -> None:
        *keys, last = path.split(".")
        target = cr
        for key in keys:
            target = target[int(key)] if isinstance(target, list) else target.setdefault(key, {})
        target[last] = value

    return change


CLUSTER = "spec.rayClusterSpec"


@pytest.mark.parametrize(
    ("change", "path", "message"),
    [
        refused(f"{CLUSTER}.tlsOptions", {"enabled": True}, "remove it"),
        refused(
            "spec.clusterSelector", {"a": "b"}, "selects a RayCluster that is not in this file"
        ),
        refused("spec.submissionMode", "InteractiveMode", "RayCluster"),
        refused("spec.entrypoint", "", "give the command"),
        refused("spec.runtimeEnvYAML", "- a list", "YAML mapping"),
        refused(f"{CLUSTER}.rayVersion", "1.13.0", "give 2.x"),
        refused(f"{CLUSTER}.workerGroupSpecs.0.groupName", "head", "names another Job"),
        refused(f"{CLUSTER}.workerGroupSpecs.0.groupName", "Bad_Name", "names the group's Job"),
        refused(f"{CLUSTER}.headGroupSpec.rayStartParams.num-cpus", 2, "string"),
        refused(f"{CLUSTER}.headGroupSpec.rayStartParams.temp-dir", "a b", "must be one value"),
        refused(f"{CLUSTER}.headGroupSpec.rayStartParams.resources", "{x", "JSON object"),
        refused(f"{CLUSTER}.headGroupSpec.serviceType", "NodePort", "port-forward"),
        refused(f"{CLUSTER}.headGroupSpec.template.spec.containers", [], "at least one container"),
        (
            _set(f"{CLUSTER}.authOptions", {"mode": "token", "enableK8sTokenAuth": True}),
            f"{CLUSTER}.authOptions.enableK8sTokenAuth",
            "remove it",
        ),
        refused("metadata.name", "Exp", "DNS-1035"),
        refused("spec.unknown", 1, ""),
        # a null item (the API server would read an empty value), found by the fuzzer
        (
            _set(f"{CLUSTER}.headGroupSpec.template.spec.containers.0.ports", [None]),
            f"{CLUSTER}.headGroupSpec.template.spec.containers.0.ports.0",
            'Invalid value: "null": must be of type object',
        ),
    ],
)
def test_bad_resources(change: Any, path: str, message: str) -> None:
    cr = rayjob()
    change(cr)
    with pytest.raises(ManifestError) as error:
        expand(cr)
    assert any(p.path == path and message in p.message for p in error.value.problems), str(
        error.value
    )


def tpu_pool(cr: dict[str, Any], hosts: int, replicas: int = 2) -> dict[str, Any]:
    """`cr` whose pool is `replicas` multi-host TPU slices: v4 2x2x2 (8 chips, 4 a host)."""
    pool = cr["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    pool.update(replicas=replicas, numOfHosts=hosts)
    spec = pool["template"]["spec"]
    spec["containers"][0]["resources"] = {"limits": {**LIMITS["limits"], "google.com/tpu": "4"}}
    spec["nodeSelector"] = {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v4-podslice",
        "cloud.google.com/gke-tpu-topology": "2x2x2",
    }
    return cr


def test_a_multi_host_group_is_a_job_per_tpu_slice() -> None:
    """numOfHosts: each replica a slice of numOfHosts pods on one node pool, with KubeRay's
    replica labels and the env GKE's TPU webhook gives (multislice across replicas)."""
    found = jobs(tpu_pool(rayjob(), hosts=2))
    assert sorted(found) == ["exp-head", "exp-pool-0", "exp-pool-1", "exp-submitter"]
    for s in (0, 1):
        job = found[f"exp-pool-{s}"]
        assert (job["spec"]["completions"], job["spec"]["completionMode"]) == (2, "Indexed")
        labels = job["spec"]["template"]["metadata"]["labels"]
        assert labels["ray.io/group"] == "pool"
        assert labels["ray.io/worker-group-replica-index"] == str(s)
        seen = env(job)
        hosts = [f"exp-pool-{s}-{h}.exp.default.svc.cluster.local" for h in (0, 1)]
        assert seen["TPU_WORKER_ID"] == "$(JOB_COMPLETION_INDEX)"
        assert seen["TPU_WORKER_HOSTNAMES"].split(",") == hosts
        assert (seen["MEGASCALE_NUM_SLICES"], seen["MEGASCALE_SLICE_ID"]) == ("2", str(s))
        assert seen["MEGASCALE_COORDINATOR_ADDRESS"] == "exp-pool-0-0.exp.default.svc.cluster.local"
        assert seen["KUBERAY_GEN_RAY_START_CMD"].startswith(f"ray start --address={HEAD}:6379")
        term = job["spec"]["template"]["spec"]["affinity"]["podAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ][0]
        assert term["topologyKey"] == "cloud.google.com/gke-nodepool"
        assert term["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == f"pool-{s}"
    # every node of every slice joins before the entrypoint is submitted
    assert found["exp-submitter"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert (
        planning.blueprint(doors.validate(tpu_pool(rayjob(), 2))).plan.outputs["expectedNodeCount"]
        == 1 + 2 * 2
    )


@pytest.mark.parametrize(
    ("hosts", "tpu", "message"),
    [
        (4, True, "a 2x2x2 slice of 4 chips per host has 2 hosts: give numOfHosts 2"),
        (2, False, "multi-host groups run here as TPU slices: give the Ray container a"),
    ],
)
def test_a_multi_host_group_that_is_not_a_tpu_slice_is_refused(
    hosts: int, tpu: bool, message: str
) -> None:
    cr = tpu_pool(rayjob(), hosts) if tpu else _with(rayjob(), numOfHosts=hosts)
    with pytest.raises(ManifestError) as error:
        expand(cr)
    (problem,) = error.value.problems
    assert problem.path == f"{CLUSTER}.workerGroupSpecs.0.numOfHosts"
    assert problem.message.startswith(message)


def _with(cr: dict[str, Any], **pool: Any) -> dict[str, Any]:
    cr["spec"]["rayClusterSpec"]["workerGroupSpecs"][0].update(pool)
    return cr


def test_a_null_field_of_a_template_is_absent_as_the_api_server_reads_it() -> None:
    cr = rayjob()
    head = cr["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    head.update(env=None, ports=None, command=None)
    assert jobs(cr) == jobs(rayjob())


# The documented fix (docs/coming-from/kuberay.md) each public sample needs: none for 31 of them; otherwise what
# the first error names, then the next (a field removed, the other documents created beside the
# stack, a multi-host group as single hosts). One cannot run here: it has no cluster of its own.
FIXES = {
    "ray-cluster.custom-head-service": {"headService"},
    "ray-cluster.deprecate-gcs-ft": {"beside"},
    "ray-cluster.embedded-gcs-ft": {"gcsFaultToleranceOptions"},
    "ray-cluster.external-redis-uri": {"beside", "gcsFaultToleranceOptions"},
    "ray-cluster.external-redis": {"beside", "gcsFaultToleranceOptions"},
    "ray-cluster.historyserver": {"historyServerOptions"},
    "ray-cluster.kai-gpu-sharing": {"cluster-scoped"},
    "ray-cluster.kai-scheduler": {"cluster-scoped"},
    "ray-cluster.kubernetes.auth-manual": {"cluster-scoped"},
    "ray-cluster.kubernetes.auth": {"cluster-scoped", "enableK8sTokenAuth"},
    "ray-cluster.mtls": {"tlsOptions"},
    "ray-cluster.network-policy-deny-all": {"networkPolicy"},
    "ray-cluster.persistent-redis-sidecar": {"gcsFaultToleranceOptions"},
    "ray-cluster.persistent-redis": {"beside", "gcsFaultToleranceOptions"},
    "ray-cluster.separate-ingress": {"serviceType"},
    "ray-cluster.volcano-scheduler-queue": {"cluster-scoped"},
    "ray-job.custom-head-svc": {"headService"},
    "ray-job.deletion-rules": {"deletionStrategy"},
    "ray-job.interactive-mode": {"submissionMode"},
    "ray-job.sidecar-mode": {"submissionMode"},
    "ray-job.volcano-scheduler-queue": {"cluster-scoped"},
}
NO_CLUSTER = "ray-job.use-existing-raycluster"  # clusterSelector: another cluster runs it


def test_the_docs_list_exactly_the_samples_that_need_a_change() -> None:
    """docs/coming-from/kuberay.md's table of samples that need a change is FIXES (and the
    one whose cluster must be beside it): it cannot fall behind the samples."""
    text = (ROOT / "docs" / "coming-from" / "kuberay.md").read_text()
    table = text.split("## The samples that need a change", 1)[1]
    listed = re.findall(r"^\| `([\w.-]+)` \|", table, flags=re.M)
    assert sorted(listed) == sorted([*FIXES, NO_CLUSTER])


def runnable(path: Path, directory: Path) -> tuple[Path, set[str]]:
    """A sample as it is, or with the fixes its errors ask for applied, and which."""
    documents, fixes = list(yaml.safe_load_all(path.read_text())), set()
    fixed = directory / path.name
    fixed.write_text(path.read_text())
    for _ in range(4):
        try:
            expand(fixed)
            return fixed, fixes
        except ManifestError as error:
            problems = error.problems
        for problem in problems:
            fixes.add(_fix(documents, problem))
        fixed.write_text(yaml.safe_dump_all(documents))
    raise AssertionError(f"{path.name} still fails: {problems}")


def _fix(documents: list[dict[str, Any]], problem: Problem) -> str:
    """Apply the fix a problem's message gives; its name."""
    for fix in ("beside the experiment", "is cluster-scoped"):  # created beside the stack
        if fix in problem.message:
            documents[:] = [
                d for d in documents if d["apiVersion"] == "ray.io/v1" or is_companion(d)
            ]
            return "beside" if fix.startswith("beside") else "cluster-scoped"
    cr = next(d for d in documents if d["apiVersion"] == "ray.io/v1")
    *parents, last = problem.path.split(".")
    target = cr
    for key in parents:
        target = target[int(key)] if isinstance(target, list) else target[key]
    if last == "submissionMode" and target[last] == "InteractiveMode":  # a RayCluster
        cr.update(kind="RayCluster", spec=cr["spec"]["rayClusterSpec"])
    else:
        target.pop(last, None)
    return last


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_public_samples_render_valid_objects(path: Path, tmp_path: Path) -> None:
    """Each sample renders as it is, or after the documented fixes its errors ask for, which
    are exactly FIXES; the objects pass the strict schema and the API server's rules, each
    node sees KubeRay's env, each group runs KubeRay's desired replicas."""
    if path.stem == NO_CLUSTER:  # (with that cluster beside it, it runs: below)
        with pytest.raises(ManifestError, match=r"spec\.clusterSelector: selects a RayCluster"):
            expand(path)
        return
    fixed, fixes = runnable(path, tmp_path)
    assert fixes == FIXES.get(path.stem, set())
    objects = expand(fixed).objects
    for obj in objects:
        schemas.validate(obj)
    assert limits.check(objects) == []
    cr = next(d for d in yaml.safe_load_all(fixed.read_text()) if d["apiVersion"] == "ray.io/v1")
    cluster = cr["spec"].get("rayClusterSpec", cr["spec"])
    found = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Job"}
    name = "exp"  # (the stack's experiment name in these tests)
    head = found[f"{name}-head"]
    assert env(head)["RAY_ADDRESS"].endswith(":6379")
    assert "ray start --head" in env(head)["KUBERAY_GEN_RAY_START_CMD"]
    for group in cluster.get("workerGroupSpecs", []):
        count = min(
            max(group.get("replicas", 0), group.get("minReplicas", 0)),
            group.get("maxReplicas", 2**31 - 1),
        )
        hosts = group.get("numOfHosts", 1)
        slices = [f"-{s}" for s in range(count)] if hosts > 1 else [""]
        for job in [found.get(f"{name}-{group['groupName']}{s}") for s in slices]:
            assert (job["spec"]["completions"] if job else 0) == (hosts if hosts > 1 else count)
            if job:
                assert env(job)["FQ_RAY_IP"] == f"{name}-head.default.svc.cluster.local"
    assert (f"{name}-submitter" in found) == (cr["kind"] == "RayJob")


def test_rendering_is_deterministic() -> None:
    path = ROOT / "tests" / "kuberay" / "ray-job.sample.yaml"
    runs = [
        subprocess.run(
            [str(ROOT / ".venv" / "bin" / "aichor-iac"), "render", str(path)],
            capture_output=True,
            check=True,
        ).stdout
        for _ in range(2)
    ]
    assert runs[0] == runs[1] and b"kind: ConfigMap" in runs[0]


def test_the_samples_are_kuberays() -> None:
    # tests/kuberay holds ray-project/kuberay v1.7.0's ray-job.* and ray-cluster.* samples as
    # published (ray-operator/config/samples), none edited.
    assert len(SAMPLES) == 62
    assert FIXES.keys() <= {p.stem for p in SAMPLES}


# --- a real RayJob from the rendered pods -----------------------------------------------------

RAY = shutil.which("ray", path=str(Path(sys.executable).parent)) is not None
real = pytest.mark.skipif(
    not (RAY and LocalCluster.available()),
    reason="needs Ray (the test extra installs ray[default]) and `ip netns` (root)",
)
JOB = """\
import os, socket, ray
ray.init()
@ray.remote(num_cpus=1)
def where():
    return socket.gethostname()
hosts = set(ray.get([where.remote() for _ in range(8)]))
print("counter_name", os.environ["counter_name"], "nodes", len(ray.nodes()), flush=True)
"""


@real
@ONE_RAY_CLUSTER_AT_A_TIME
def test_real_rayjob_runs_its_entrypoint_on_the_cluster_then_the_cluster_ends(
    tmp_path: Path,
) -> None:
    cr = rayjob(
        entrypoint="python /code/job.py",
        runtimeEnvYAML="env_vars:\n  counter_name: test_counter\n",
        shutdownAfterJobFinishes=True,
    )
    cluster = cr["spec"]["rayClusterSpec"]
    small = {"limits": {"cpu": "1", "memory": "2Gi"}}
    for group in (cluster["headGroupSpec"], cluster["workerGroupSpecs"][0]):
        group["rayStartParams"] = {"object-store-memory": "100000000"}
        group["template"]["spec"]["containers"][0]["resources"] = small
    cluster["workerGroupSpecs"][0]["replicas"] = 1
    head = cluster["headGroupSpec"]["template"]["spec"]
    head["volumes"] = [{"name": "code", "configMap": {"name": "job-code"}}]
    head["containers"][0]["volumeMounts"] = [{"name": "code", "mountPath": "/code"}]
    code = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "job-code"},
        "data": {"job.py": JOB},
    }
    path = tmp_path / "rayjob.yaml"
    path.write_text(yaml.safe_dump_all([cr, code]))
    objects = expand(path).objects
    env = pod_env(AICHOR_FOLLOW_INTERVAL="0.5")
    # The worker starts once the head's `ray start` has finished (two CPUs for every pod here:
    # Ray gives a joining raylet a fixed 30 s).
    held = {"exp-pool-0": ("exp-head-0", "Running subprocesses are monitored")}
    with LocalCluster(objects, env) as local:
        results = local.run(timeout=300, held=held)
    submitter = results["exp-submitter-0"]
    assert submitter.returncode == 0, submitter.stdout[-3000:] + submitter.stderr[-3000:]
    assert "aichor: submitted Ray job exp" in submitter.stdout
    assert "counter_name test_counter nodes 2" in submitter.stdout
    assert "aichor: Ray job exp SUCCEEDED" in submitter.stdout
    for pod in ("exp-head-0", "exp-pool-0"):  # shutdownAfterJobFinishes: the cluster ends
        assert results[pod].returncode == 0, results[pod].stderr[-3000:]
        assert "exp-submitter-0.exp.default.svc.cluster.local (it has ended)" in results[pod].stdout


@real
@ONE_RAY_CLUSTER_AT_A_TIME
def test_real_raycluster_is_reached_through_a_service_given_beside_it(tmp_path: Path) -> None:
    """A RayCluster with a ClusterIP Service of the user's for its dashboard (as KubeRay users
    expose one): the stack creates the Service, which selects the head by KubeRay's labels; a
    job submitted through it from another pod runs on both nodes."""
    cluster = raycluster()
    small = {"limits": {"cpu": "1", "memory": "2Gi"}}
    for group in (cluster["spec"]["headGroupSpec"], cluster["spec"]["workerGroupSpecs"][0]):
        group["rayStartParams"] = {"object-store-memory": "100000000"}
        group["template"]["spec"]["containers"][0]["resources"] = small
    cluster["spec"]["workerGroupSpecs"][0]["replicas"] = 1
    dashboard = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "ray-dashboard"},
        "spec": {
            "selector": {"ray.io/cluster": "exp", "ray.io/node-type": "head"},
            "ports": [{"name": "dashboard", "port": 8265, "targetPort": 8265}],
        },
    }
    path = tmp_path / "raycluster.yaml"
    path.write_text(yaml.safe_dump_all([cluster, dashboard]))
    objects = expand(path).objects
    assert any(o["kind"] == "Service" and o["metadata"]["name"] == "ray-dashboard" for o in objects)
    env = pod_env()
    submit = [
        str(Path(sys.executable).parent / "ray"),
        "job",
        "submit",
        "--address",
        "http://ray-dashboard.default.svc.cluster.local:8265",
        "--",
        "python",
        "-c",
        NODES,
    ]
    held = {"exp-pool-0": ("exp-head-0", "Running subprocesses are monitored")}
    with LocalCluster(objects, env) as local:
        local.start("exp-head", timeout=300)
        local.start("exp-pool", timeout=300, held=held)
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not all(
            local.job_status(job).get("ready") for job in ("exp-head", "exp-pool")
        ):
            time.sleep(1)
        result = local.exec("exp-pool-0", *submit)
        while time.monotonic() < deadline and "nodes 2" not in result.stdout:
            time.sleep(2)  # (the worker's raylet may join after it is Ready)
            result = local.exec("exp-pool-0", *submit)
    assert "nodes 2" in result.stdout, result.stdout[-3000:] + result.stderr[-3000:]
    assert "succeeded" in result.stdout


NODES = "import ray; ray.init(); print('nodes', len(ray.nodes()), flush=True)"


@pytest.mark.parametrize(
    "path",
    [p for p in SAMPLES if p.stem not in FIXES and p.stem != NO_CLUSTER],
    ids=lambda p: p.stem,
)
def test_convert_gives_a_valid_manifest_or_says_why_not(path: Path) -> None:
    """A RayJob converts to an `operator: kuberay` manifest rendering the same Jobs (each
    group with its count), listing what it loses; a RayCluster, or a submitter with its own
    command, is refused with the reason."""
    resource = doors.load(path)
    try:
        conversion = convert(resource)
    except ManifestError as error:
        assert resource.spec.origin.kind == "RayCluster" or "submitter runs its own" in str(
            error
        ), str(error)
        return
    converted = doors.validate(conversion.manifest, "converted.yaml")
    assert converted.spec.operator == "kuberay"
    before = {n: j["spec"]["completions"] for n, j in jobs(path).items()}
    after = {n: j["spec"]["completions"] for n, j in jobs(conversion.manifest).items()}
    assert before == after
    for c in resource.spec.origin.companions:
        what = f"{c['kind']} {c['metadata']['name']}:"
        assert any(line.startswith(what) for line in conversion.lost)


def test_convert_says_what_a_rayjob_loses() -> None:
    cr = rayjob(runtimeEnvYAML="pip: [x]\n", jobId="id-1")
    params = cr["spec"]["rayClusterSpec"]["headGroupSpec"]["rayStartParams"]
    params.update({"num-cpus": "0", "port": "6380"})
    conversion = convert(doors.validate(cr, "cr.yaml"))
    assert conversion.manifest["spec"]["command"] == cr["spec"]["entrypoint"]
    assert conversion.manifest["spec"]["types"]["Head"]["rayStartParams"] == {"num-cpus": "0"}
    lost = "\n".join(conversion.lost)
    for text in (
        "headGroupSpec.rayStartParams.port: set by aichor-iac",
        "spec.runtimeEnvYAML: {'pip': ['x']}",
        "spec.jobId: id-1",
        "spec.shutdownAfterJobFinishes: false",
        "env: the replicas see AIchor's CURRENT_POD_IP",
    ):
        assert text in lost, lost


@pytest.mark.parametrize("name", ["ray-cluster.autoscaler", "ray-cluster.autoscaler-v2"])
def test_an_autoscaling_cluster_runs_at_its_declared_size_and_says_so(name: str) -> None:
    path = ROOT / "tests" / "kuberay" / f"{name}.yaml"
    experiment = doors.load(path)
    blueprint = planning.blueprint(experiment, Settings(), "exp")
    (warning,) = [w for w in planning.warnings(blueprint) if "autoscaler" in w.message]
    assert warning.path == "spec.enableInTreeAutoscaling" and warning.line
    pools = experiment.spec.types.get("Workers")
    for pool in pools:
        assert f"{pool.name} {pool.count}" in warning.message  # the size each group runs at
    sizes = {j["metadata"]["name"]: j["spec"]["completions"] for j in jobs(path).values()}
    assert all(sizes.get(f"exp-{p.name}", 0) == p.count for p in pools)


def test_converting_an_autoscaling_rayjob_says_the_pools_keep_their_count() -> None:
    cr = rayjob()
    cr["spec"]["rayClusterSpec"]["enableInTreeAutoscaling"] = True
    lost = convert(doors.validate(cr, "cr.yaml")).lost
    field = "spec.rayClusterSpec.enableInTreeAutoscaling"
    assert f"{field}: no autoscaler; each pool runs at its count" in lost
