"""RayCluster: head, pools and job (or kuberay's submitter) ordered by Pulumi, the Ray env on
every container, and real Ray clusters run from the rendered pods (aichor_iac/local.py)."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, by_name, expand, wait_of
from kube import ONE_RAY_CLUSTER_AT_A_TIME, LocalCluster, container_env, pod_env
from test_mpi import validate

from aichor_iac import doors, engine
from aichor_iac.frameworks import ray as ray_framework
from aichor_iac.k8s import progress
from aichor_iac.pods.regroup import GAVE_UP

EXAMPLES = {"ray": ROOT / "examples" / "ray.yaml", "kuberay": ROOT / "examples" / "kuberay.yaml"}
HEAD = "exp-head.default.svc.cluster.local"


def ray(operator: str = "ray", version: str | None = None, **overrides: Any) -> dict:
    types: dict[str, Any] = {
        "Head": {"resources": {"cpus": 8, "ramRatio": 4, "accelerators": {"gpu": {"count": 1}}}},
        "Workers": [
            {"name": "small-cpu-workers", "count": 10, "resources": {"cpus": 8, "ramRatio": 2}},
            {"name": "big-cpu-workers", "count": 10, "resources": {"cpus": 48, "ramRatio": 2}},
        ],
    }
    if operator == "ray":
        types["Job"] = {"resources": {"cpus": 2, "ramRatio": 2}}
    spec = {"operator": operator, "image": "rayproject/ray:2.9.3", "command": "python run.py"}
    if version:
        spec["rayVersion"] = version
    return {"kind": "AIchorManifest", "apiVersion": "0.2.2", "spec": {**spec, "types": types}}


def main(job: dict) -> str:
    """The group's program: what the main container runs as `$1`."""
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    return command[-1].replace("$$", "$")


def ray_start(job: dict) -> str:
    """The `ray start` a Ray node's program runs (a pool's and a job's: tried again)."""
    found = re.search(r"^(?:until )?(ray start .*?)(?:; do)?$", main(job), re.M)
    assert found, main(job)
    return found.group(1)


def test_head_pools_and_job_of_the_issue():
    rendering = expand(ray())
    objects = by_name(rendering.objects)
    jobs = {k: o for k, o in objects.items() if k.startswith("Job/")}
    assert list(jobs) == [
        "Job/exp-head",
        "Job/exp-big-cpu-workers",
        "Job/exp-small-cpu-workers",
        "Job/exp-job",
    ]
    assert jobs["Job/exp-big-cpu-workers"]["spec"]["completions"] == 10
    assert jobs["Job/exp-small-cpu-workers"]["spec"]["completions"] == 10
    assert ' 21 "$CURRENT_POD_IP" 1800' in main(jobs["Job/exp-job"])
    assert rendering.outputs["expectedNodeCount"] == 21
    head_service = objects["Service/exp-head"]["spec"]
    assert head_service["selector"]["app.kubernetes.io/component"] == "head"
    assert [(p["name"], p["port"]) for p in head_service["ports"]] == [
        ("gcs", 6379),
        ("dashboard", 8265),
        ("client", 10001),
    ]
    urns = {r.name: r.urn for r in rendering.resources}
    deps = {r.name: set(r.dependencies) for r in rendering.resources}
    for pool in ("exp-small-cpu-workers", "exp-big-cpu-workers"):
        assert urns["exp-head"] in deps[pool]
        assert urns[pool] in deps["exp-job"]
    assert urns["exp-head"] in deps["exp-job"]


@pytest.mark.parametrize("wait", ["none", "ready", "complete"])
def test_pulumi_waits_for_the_head_whatever_the_wait_mode(wait):
    rendering = expand(ray(), wait=wait)
    jobs = by_name(rendering.objects)
    head = jobs["Job/exp-head"]
    assert head["metadata"]["annotations"] == {
        "pulumi.com/waitFor": "jsonpath={$[?@.ready==1 || @.succeeded==1]}",
        "pulumi.com/deletionPropagationPolicy": "background",
    }
    probe = head["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
    assert probe["tcpSocket"] == {"port": 6379}
    options = next(r.options for r in rendering.resources if r.name == "exp-head")
    assert options["customTimeouts"] == {"create": "1800s", "update": "1800s"}
    if wait == "none":
        pool = jobs["Job/exp-small-cpu-workers"]["metadata"]["annotations"]
        assert pool["pulumi.com/skipAwait"] == "true" and "pulumi.com/waitFor" not in pool


def test_commands_of_head_pools_and_job():
    jobs = by_name(expand(ray()).objects)
    head = main(jobs["Job/exp-head"])
    assert head.startswith("ray start --head --port=6379 --dashboard-host=0.0.0.0")
    for flag in (
        "--dashboard-port=8265",
        "--ray-client-server-port=10001",
        '--node-ip-address="$CURRENT_POD_IP"',
        "--num-cpus=8",
        "--num-gpus=1",
        f"--memory={32 * 2**30}",
        "--block",
    ):
        assert flag in head.split(), flag
    pool = ray_start(jobs["Job/exp-big-cpu-workers"]).split()
    assert pool[:4] == ["ray", "start", f"--address={HEAD}:6379", "--block"]
    assert "--resources='{\"big-cpu-workers\":48}'" in pool and "--num-gpus=0" in pool
    job = main(jobs["Job/exp-job"])
    assert ray_start(jobs["Job/exp-job"]).startswith(f"ray start --address={HEAD}:6379 ")
    assert job.splitlines()[-1] == "exec /bin/sh -c 'python run.py'"
    for name in ("exp-big-cpu-workers", "exp-job"):  # both wait for the head's GCS first
        assert f"aichor_wait {HEAD} 6379" in wait_of(
            jobs[f"Job/{name}"]["spec"]["template"]["spec"]
        )


def test_ray_start_params_pass_through_and_merge():
    data = ray()
    data["spec"]["types"]["Workers"][0]["rayStartParams"] = {
        "resources": '{"TPU": 4}',
        "num-cpus": 6,
        "disable-usage-stats": True,
        "object_store_memory": 1000,
    }
    command = ray_start(by_name(expand(data).objects)["Job/exp-small-cpu-workers"]).split()
    assert '--resources=\'{"small-cpu-workers":8,"TPU":4}\'' in command
    assert "--num-cpus=6" in command and "--num-cpus=8" not in command
    assert "--disable-usage-stats" in command and "--object-store-memory=1000" in command


# What KubeRay gives each Ray node (ray-operator setContainerEnvVars), per job of the
# rendered cluster: literal values, or the pod field they come from.
KUBERAY_ENV = {
    "exp-head": {
        "RAY_CLUSTER_NAME": "exp",
        "RAY_NODE_TYPE_NAME": "headgroup",
        "RAY_PORT": "6379",
        "RAY_ADDRESS": f"{HEAD}:6379",  # not KubeRay's 127.0.0.1: our GCS is on the pod IP
        "RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE": "1",
    },
    "exp-small-cpu-workers": {
        "RAY_CLUSTER_NAME": "exp",
        "RAY_NODE_TYPE_NAME": "small-cpu-workers",
        "RAY_PORT": "6379",
        "RAY_ADDRESS": f"{HEAD}:6379",
        "FQ_RAY_IP": HEAD,
        "RAY_IP": "exp-head",
        "RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE": "1",
    },
    "exp-submitter": {
        "RAY_ADDRESS": f"{HEAD}:6379",
        "RAY_DASHBOARD_ADDRESS": f"{HEAD}:8265",
        "RAY_JOB_SUBMISSION_ID": "exp",
    },
}
FIELDS = {"RAY_CLUSTER_NAMESPACE": "metadata.namespace", "RAY_CLOUD_INSTANCE_ID": "metadata.name"}


@pytest.mark.parametrize("job", sorted(KUBERAY_ENV))
def test_every_ray_pod_sees_what_kuberay_gives_it(job):
    objects = by_name(expand(ray("kuberay")).objects)
    spec = objects[f"Job/{job}"]
    env = container_env(spec, 3 if "workers" in job else 0)
    assert {k: env[k] for k in KUBERAY_ENV[job]} == KUBERAY_ENV[job]
    if job != "exp-submitter":
        assert env["RAY_CLUSTER_NAMESPACE"] == "default"
        assert env["RAY_CLOUD_INSTANCE_ID"].startswith(f"{job}-")  # the pod's name
        entries = spec["spec"]["template"]["spec"]["containers"][0]["env"]
        fields = {
            e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"]
            for e in entries
            if "valueFrom" in e and "fieldRef" in e["valueFrom"]
        }
        assert FIELDS.items() <= fields.items()
        # the `ray start` this pod runs, as KubeRay records it
        assert env["KUBERAY_GEN_RAY_START_CMD"] == ray_start(spec)
    names = [e["name"] for e in spec["spec"]["template"]["spec"]["containers"][0]["env"]]
    assert len(names) == len(set(names))  # no variable given twice


@pytest.mark.parametrize(("version", "legacy"), [(None, False), ("2.9.3", False), ("1.13.0", True)])
def test_env_on_every_container_and_the_secret_by_reference(version, legacy):
    objects = expand(ray(version=version)).objects
    jobs = [o for o in objects if o["kind"] == "Job"]
    for job in jobs:
        env = {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["CURRENT_POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
        ref = {"secretKeyRef": {"name": "exp-secret", "key": "password"}}
        assert env["REDIS_PASSWORD"]["valueFrom"] == ref
        assert env["RAY_SERVER"]["value"] == f"{HEAD}:6379"
        assert env["RAY_ADDRESS"]["value"] == f"{HEAD}:6379"
        assert ("RAY_AUTH_MODE" in env) is not legacy
        if not legacy:
            assert env["RAY_AUTH_TOKEN"]["valueFrom"] == ref
        assert ('--redis-password="$REDIS_PASSWORD"' in main(job)) is legacy
        # Ray 1.x's password is on command lines (Ray's own too): seen only inside the container
        assert "shareProcessNamespace" not in job["spec"]["template"]["spec"]
    secret = next(o for o in objects if o["kind"] == "Secret")
    assert secret["stringData"] == {
        "password": engine.REDACTED,
        **dict.fromkeys(progress.KEYS, engine.REDACTED),  # (the progress receiver's)
    }
    assert engine.GENERATED["random:index/randomPassword:RandomPassword"]["result"] not in str(
        objects
    )


def test_kuberay_submits_to_the_head_and_follows_the_job():
    rendering = expand(ray("kuberay"))
    jobs = by_name(rendering.objects)
    assert "Job/exp-job" not in jobs
    submitter = jobs["Job/exp-submitter"]
    program = main(submitter)
    assert program.startswith("python3 -c ")
    assert f"http://{HEAD}:8265 exp " in program
    assert '"ray", "job", "logs"' in program and "JobStatus.SUCCEEDED" in program
    assert f"aichor_wait {HEAD} 8265" in wait_of(submitter["spec"]["template"]["spec"])
    assert rendering.outputs["entryPoint"] == "exp-submitter"
    env = container_env(jobs["Job/exp-head"], 0)
    assert env["RAY_ADDRESS"] == f"{HEAD}:6379"
    for name in ("exp-head", "exp-small-cpu-workers"):  # they end with the submitter
        script = jobs[f"Job/{name}"]["spec"]["template"]["spec"]["containers"][0]["command"][2]
        assert "aichor_lookup exp-submitter-0.exp.default.svc.cluster.local" in script


# A stand-in for Ray's Jobs API (ray.job_submission): the dashboard refuses the first
# submissions as Ray's does while the head's job agent has not registered, or refuses them all.
FAKE_JOB_SUBMISSION = """\
import enum, os
from pathlib import Path
class JobStatus(str, enum.Enum):
    SUCCEEDED, FAILED, STOPPED = "SUCCEEDED", "FAILED", "STOPPED"
class JobSubmissionClient:
    def __init__(self, url):
        self.tries = Path(os.environ["TRIES"])
    def get_job_status(self, job):
        if not self.tries.read_text().endswith("submitted"):
            raise RuntimeError(f"Request failed with status code 404: Job {job} does not exist.")
        return JobStatus.SUCCEEDED
    def submit_job(self, entrypoint, submission_id, **options):
        tries = self.tries.read_text()
        self.tries.write_text(tries + "x")
        if len(tries) < int(os.environ["REFUSALS"]):
            raise RuntimeError(os.environ["REFUSAL"])
        self.tries.write_text(tries + "submitted")
"""
AGENT_NOT_UP = (
    "Request failed with status code 500: No available agent to submit job, please try again later."
)


@pytest.mark.parametrize(
    ("refusals", "refusal", "code", "said"),
    [
        (0, "", 0, "aichor: Ray job exp SUCCEEDED"),
        (2, AGENT_NOT_UP, 0, "aichor: Ray job exp SUCCEEDED"),  # the agent registers late
        (1, "Request failed with status code 400: bad env", 1, "submitting Ray job exp failed"),
        (99, AGENT_NOT_UP, 1, "aichor: gave up submitting Ray job exp"),  # past the deadline
    ],
    ids=["accepted", "agent-late", "bad-request", "agent-never"],
)
def test_the_submitter_retries_a_submission_the_head_is_not_ready_for(
    tmp_path: Path, refusals: int, refusal: str, code: int, said: str
) -> None:
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "__init__.py").write_text("")
    (tmp_path / "ray" / "job_submission.py").write_text(FAKE_JOB_SUBMISSION)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "ray").write_text('#!/bin/sh\necho following "$@"\n')
    (tmp_path / "bin" / "ray").chmod(0o755)
    (tmp_path / "tries").write_text("")
    program = main(by_name(expand(ray("kuberay")).objects)["Job/exp-submitter"])
    argv = shlex.split(program)  # python3 -c ray_submit url job entrypoint deadline options
    argv[0], argv[6] = sys.executable, "5"  # a deadline 5 s away
    env = {
        "PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin",
        "PYTHONPATH": str(tmp_path),
        "TRIES": str(tmp_path / "tries"),
        "REFUSALS": str(refusals),
        "REFUSAL": refusal,
    }
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == code, done.stdout + done.stderr
    assert said in done.stdout + done.stderr
    if code == 0:  # submitted once accepted, and followed
        assert (tmp_path / "tries").read_text() == "x" * refusals + "submitted"
        assert "following job logs --address http://exp-head" in done.stdout


def test_examples_render():
    for operator, path in EXAMPLES.items():
        rendering = engine.expand(doors.load(path))
        assert rendering.outputs["framework"] == "ray"
        assert rendering.outputs["entryPoint"].endswith("job" if operator == "ray" else "submitter")


@pytest.mark.parametrize(
    ("change", "path", "message"),
    [
        (lambda d: d["spec"]["types"].pop("Workers"), "spec.types.Workers", "worker pool"),
        (
            lambda d: d["spec"]["types"]["Workers"][1].update(name="small-cpu-workers"),
            "spec.types.Workers.1.name",
            "duplicate pool name",
        ),
        (
            lambda d: d["spec"]["types"]["Workers"][0].update(name="head"),
            "spec.types.Workers.0.name",
            "choose another name",
        ),
        (
            lambda d: d["spec"]["types"]["Head"].update(rayStartParams={"address": "x"}),
            "spec.types.Head.rayStartParams.address",
            "set by aichor-iac",
        ),
        (
            lambda d: d["spec"]["types"]["Workers"][0].update(rayStartParams={"resources": "x"}),
            "spec.types.Workers.0.rayStartParams.resources",
            "JSON object",
        ),
        (lambda d: d["spec"].update(rayVersion="3.1"), "spec.rayVersion", "1.6 to 2.x"),
        (lambda d: d["spec"]["types"].pop("Job"), "spec.types.Job", "needs a Job"),
    ],
)
def test_bad_ray_manifests(change, path, message):
    data = ray()
    change(data)
    errors = validate(data)
    assert any(path in e and message in e for e in errors), errors


@pytest.mark.parametrize(
    ("change", "path", "message"),
    [
        (
            lambda d: d["spec"]["types"].update(Job={"resources": {"cpus": 1, "ramRatio": 1}}),
            "spec.types.Job",
            "has no Job",
        ),
        (lambda d: d["spec"].update(rayVersion="1.13.0"), "spec.rayVersion", "Ray 2.0"),
    ],
)
def test_bad_kuberay_manifests(change, path, message):
    data = ray("kuberay")
    change(data)
    errors = validate(data)
    assert any(path in e and message in e for e in errors), errors


# --- real Ray clusters from the rendered pods ---------------------------------------------------

RAY = shutil.which("ray", path=str(Path(sys.executable).parent)) is not None
real = pytest.mark.skipif(
    not (RAY and LocalCluster.available()),
    reason="needs Ray (the test extra installs ray[default]) and `ip netns` (root)",
)
SMALL = {"resources": {"cpus": 1, "memory": 2}, "rayStartParams": {"object-store-memory": 10**8}}
TOKEN = "s3cret-token-for-tests-0123456789"


def run_cluster(
    operator: str, command: str, held: dict[str, tuple[str, str]] | None = None, **settings
) -> dict:
    types: dict[str, Any] = {"Head": SMALL, "Workers": [{"name": "cpu-pool", "count": 1, **SMALL}]}
    if operator == "ray":
        types["Job"] = SMALL
    data = {"spec": {"operator": operator, "image": "img", "command": command, "types": types}}
    env = pod_env(AICHOR_FOLLOW_INTERVAL="0.5")
    if settings:  # (Ray's `ray start --block` takes long to end on TERM on two cores)
        env["AICHOR_STOP_GRACE"] = "5"
    with LocalCluster(expand(data, **settings).objects, env, {"password": TOKEN}) as cluster:
        return cluster.run(timeout=300, held=held)


# Each attempt checks the cluster: a client with a wrong token is refused at once
# (RAY_gcs_server_port_wait_time_s: it does not try again for Ray's 20 s), a bare ray.init()
# reaches every node and the pool's custom resource. Attempt 0 then fails.
ATTEMPT = """\
out=$(RAY_AUTH_TOKEN=wrong-token-wrong-token RAY_gcs_server_port_wait_time_s=2 \\
  timeout 120 python3 -c 'import ray; ray.init()' 2>&1)
case $out in *uthentication*) echo "refused without the token";; *) echo "unprotected: $out";; esac
python3 -c 'import ray; ray.init(); print("nodes", len(ray.nodes()), "cpu-pool", ray.cluster_resources().get("cpu-pool"))'
echo "attempt $AICHOR_RESTART_ATTEMPT"; [ "$AICHOR_RESTART_ATTEMPT" != 0 ] || exit 3
"""


@real
@ONE_RAY_CLUSTER_AT_A_TIME
def test_real_ray_job_waits_for_every_node_and_restarts_with_its_cluster():
    """The pool's pod stays pending (a node scaling up) until the job has seen the cluster
    incomplete: the job must wait for it. The job fails in attempt 0: the head, the pool and
    the job start again in their pods, the head's Ray processes stopped first, and attempt 1
    runs on a fresh cluster of every node; then the cluster stops, the job having ended."""
    held = {"exp-cpu-pool-0": ("exp-job-0", "retrying in 2s")}
    results = run_cluster("ray", ATTEMPT, held=held, max_restarts=1)
    job = results["exp-job-0"]
    out = job.stdout
    assert job.returncode == 0, out[-3000:] + job.stderr[-3000:]
    before, _, after = out.partition("restart attempt 1 (1 of 1 counted)")
    address = f"ray_address={HEAD}:6379"
    assert f"{address}, node_count=1, expected_node_count=2" in before, out[-3000:]
    assert "retrying in 2s" in before
    for attempt, lines in enumerate((before, after)):
        assert f"{address}, node_count=2, expected_node_count=2" in lines, out[-3000:]
        assert "refused without the token" in lines
        assert "nodes 3 cpu-pool 1.0" in lines  # the head, the pool, the job's own node
        assert f"attempt {attempt}" in lines
    for pod in ("exp-head-0", "exp-cpu-pool-0"):
        assert results[pod].returncode == 0, results[pod].stderr[-3000:]
        assert "restart attempt 1" in results[pod].stdout
        assert "exp-job-0.exp.default.svc.cluster.local has ended" in results[pod].stdout


# Pulumi creates the pools once the head is Ready; here every pod shares two CPUs, so the pool
# waits until the head's `ray start` has finished: Ray gives a new node's raylet a fixed 30 s to
# register, which a head still starting its dashboard and agents can make it miss.
HEAD_STARTED = {"exp-cpu-pool-0": ("exp-head-0", "Running subprocesses are monitored")}
FAILING = """\
python3 -c 'import ray; ray.init(); print("nodes", len(ray.nodes()))'
echo "attempt $AICHOR_RESTART_ATTEMPT"; exit 3
"""


@real
@ONE_RAY_CLUSTER_AT_A_TIME
def test_real_kuberay_cluster_restarts_with_its_job_then_the_submitter_fails_with_it():
    """The Ray job fails in each attempt: after attempt 0 the head, the pool and the
    submitter start again, and attempt 1 runs on a fresh cluster of every node; its failure
    is the experiment's: the submitter gives up, and the cluster with it."""
    results = run_cluster("kuberay", FAILING, held=HEAD_STARTED, max_restarts=1)
    submitter = results["exp-submitter-0"]
    out = submitter.stdout
    assert submitter.returncode == GAVE_UP, out[-3000:] + submitter.stderr[-3000:]
    before, _, after = out.partition("restart attempt 1 (1 of 1 counted)")
    for attempt, lines in enumerate((before, after)):
        assert "aichor: submitted Ray job exp" in lines, out[-3000:]
        assert "expected_node_count=2" in lines  # the wait ran on the head
        assert "nodes 2" in lines and f"attempt {attempt}" in lines  # every node joined
        assert "aichor: Ray job exp FAILED" in lines
    assert "aichor: the experiment has failed" in after
    for pod in ("exp-head-0", "exp-cpu-pool-0"):  # the group's failure is every replica's
        assert results[pod].returncode == GAVE_UP, results[pod].stdout[-3000:]
        assert "restart attempt 1" in results[pod].stdout
        assert "aichor: the experiment has failed" in results[pod].stdout


@pytest.mark.parametrize(
    ("failures", "status", "starts"),
    [(0, 0, 1), (1, 0, 2), (2, 0, 3), (5, 1, 3)],
)
def test_a_node_tries_ray_start_again_when_it_fails(
    tmp_path, monkeypatch, failures, status, starts
):
    # A pool's `ray start` that fails (the head not registered yet, a raylet missing Ray's 30 s)
    # is stopped and tried again, at most START_ATTEMPTS times, as KubeRay restarts it.
    monkeypatch.setattr(ray_framework, "START_PAUSE", 0)
    calls = tmp_path / "calls"
    fake = tmp_path / "ray"
    fake.write_text(
        f'#!/bin/sh\necho "$1" >> {calls}\n'
        f'[ "$1" = stop ] && exit 0\n[ "$(grep -c start {calls})" -gt {failures} ]\n'
    )
    fake.chmod(0o755)
    program = ray_framework.retried("ray start --address=head:6379 --block")
    result = subprocess.run(
        ["/bin/sh", "-c", program],
        env={"PATH": f"{tmp_path}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == status, result.stderr
    lines = calls.read_text().split()
    assert lines.count("start") == starts and lines.count("stop") == min(failures, starts - 1)
    if failures:
        assert "aichor: ray start failed (1 of 3 tries), again in 0s" in result.stderr
