"""XGBoost, JAX, PaddlePaddle and TensorFlow contracts (DESIGN §5): the env every replica's command sees,
computed from the rendered Jobs as Kubernetes would, plus waits, followers and bad manifests."""

from __future__ import annotations

import json
import shlex

import pytest
from conftest import expand, replica_envs, wait_of

from aichor_iac import pods as programs
from aichor_iac.doors import validate
from aichor_iac.k8s import progress, shell
from aichor_iac.problems import ManifestError

R = {"cpus": 2, "ramRatio": 2}
HOST = "exp-{role}-{i}.exp.default.svc.cluster.local"


def manifest(operator: str, **counts: int) -> dict:
    types = {name: {"count": n, "resources": dict(R)} for name, n in counts.items()}
    return {
        "apiVersion": "0.2.3",
        "spec": {"operator": operator, "image": "img", "command": "run", "types": types},
    }


def pods(data: dict) -> dict[str, dict]:
    spec = {o["metadata"]["name"]: o for o in expand(data).objects if o["kind"] == "Job"}
    return {name: job["spec"]["template"]["spec"] for name, job in spec.items()}


# --- XGBoost ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("counts", "coordinator"),
    [
        ({"Master": 1, "Worker": 2}, "master"),
        ({"Master": 1, "Worker": 0}, "master"),
        ({"Worker": 3}, "worker"),
    ],
)
def test_xgboost_env(counts, coordinator):
    seen = replica_envs(manifest("xgboost", **counts))
    world = sum(counts.values())
    workers = counts.get("Worker", 0)
    assert sorted(int(env["RANK"]) for _, _, env in seen) == list(range(world))
    for role, index, env in seen:
        rank = index + (1 if role == "worker" and "Master" in counts else 0)
        assert env["RANK"] == env["DMLC_TASK_ID"] == str(rank)
        assert env["MASTER_ADDR"] == env["DMLC_TRACKER_URI"] == HOST.format(role=coordinator, i=0)
        assert env["MASTER_PORT"] == env["DMLC_TRACKER_PORT"] == env["WORKER_PORT"] == "9999"
        assert env["WORLD_SIZE"] == env["DMLC_NUM_WORKER"] == str(world)
        assert env["WORKER_ADDRS"] == ",".join(
            HOST.format(role="worker", i=i) for i in range(workers)
        )


def test_xgboost_workers_wait_for_the_tracker():
    spec = pods(manifest("xgboost", Master=1, Worker=2))
    assert not wait_of(spec["exp-master"])
    assert f"{HOST.format(role='master', i=0)} 9999" in wait_of(spec["exp-worker"])


# --- JAX -------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 4])
def test_jax_env(n):
    seen = replica_envs(manifest("jax", Worker=n))
    assert sorted(int(env["JAX_PROCESS_ID"]) for _, _, env in seen) == list(range(n))
    coordinator = f"{HOST.format(role='worker', i=0)}:1234" if n > 1 else "127.0.0.1:1234"
    for _, index, env in seen:
        assert env["JAXOPERATOR_PROCESS_ID"] == env["JAX_PROCESS_ID"] == str(index)
        assert env["JAXOPERATOR_NUM_PROCESSES"] == env["JAX_NUM_PROCESSES"] == str(n)
        assert (
            env["JAXOPERATOR_COORDINATOR_ADDRESS"] == env["JAX_COORDINATOR_ADDRESS"] == coordinator
        )


def test_jax_processes_wait_for_and_follow_process_zero():
    worker = pods(manifest("jax", Worker=4))["exp-worker"]
    assert f"{HOST.format(role='worker', i=0)} 1234" in wait_of(worker)
    assert "aichor_lookup" in worker["containers"][0]["command"][2]
    single = pods(manifest("jax", Worker=1))["exp-worker"]
    # (no wait for peers: its only init container is the progress receiver)
    assert [c["name"] for c in single.get("initContainers", [])] == [progress.CONTAINER]
    assert single["containers"][0]["command"] == ["/bin/sh", "-c", "run"]


# --- PaddlePaddle ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "counts", [{"Worker": 1}, {"Worker": 3}, {"Master": 1, "Worker": 2}, {"Master": 2, "Worker": 3}]
)
def test_paddle_env_is_the_paddlejob_operators(counts):
    # kubeflow/trainer release-1.9 pkg/controller.v1/paddlepaddle/envvar.go, replica by replica.
    seen = replica_envs(manifest("paddle", **counts))
    rendezvous = "master" if "Master" in counts else "worker"
    for role, index, env in seen:
        ours = {
            k: v for k, v in env.items() if k.startswith(("PADDLE_", "POD_IP")) or "MASTER" in k
        }
        expected = {"PADDLE_JOB_ID": "exp", "PADDLE_NNODES": str(sum(counts.values()))}
        if (role, index) == (rendezvous, 0):  # it publishes its own address (the pod IP)
            expected["POD_IP_DUMMY"] = "10.0.0.1"
            expected["PADDLE_MASTER"] = "10.0.0.1:36543"
        else:
            expected["PADDLE_MASTER"] = HOST.format(role=rendezvous, i=0) + ":36543"
        if "Master" in counts:  # parameter-server mode: one server or one trainer per pod
            expected["PADDLE_SERVER_NUM" if role == "master" else "PADDLE_TRAINER_NUM"] = "1"
        assert ours == expected, (role, index)  # never MASTER_ADDR/MASTER_PORT
        assert env["PYTHONUNBUFFERED"] == "1"


def test_paddle_replicas_wait_for_and_follow_rank_zero():
    spec = pods(manifest("paddle", Master=1, Worker=2))
    ports = spec["exp-master"]["containers"][0]["ports"]
    assert {"name": "master", "containerPort": 36543, "protocol": "TCP"} in ports
    assert spec["exp-master"]["containers"][0]["name"] == "paddle"  # the operator's container
    assert not wait_of(spec["exp-master"])
    assert f"{HOST.format(role='master', i=0)} 36543" in wait_of(spec["exp-worker"])
    outputs = expand(manifest("paddle", Worker=2)).outputs
    assert outputs["entryPoint"] == "exp-worker"
    assert outputs["addresses"] == {"worker": HOST.format(role="worker", i=0) + ":36543"}


# --- TensorFlow ------------------------------------------------------------------------------


def tf_configs(**counts: int) -> list[tuple[str, int, dict]]:
    return [
        (role, i, json.loads(env["TF_CONFIG"]))
        for role, i, env in replica_envs(manifest("tf", **counts))
    ]


def test_tf_config_for_chief_ps_workers_and_evaluator():
    configs = tf_configs(Chief=1, PS=2, Worker=3, Evaluator=1)
    assert len(configs) == 7
    cluster = {
        "chief": [f"{HOST.format(role='chief', i=0)}:2222"],
        "ps": [f"{HOST.format(role='ps', i=i)}:2222" for i in range(2)],
        "worker": [f"{HOST.format(role='worker', i=i)}:2222" for i in range(3)],
    }
    for role, index, config in configs:
        assert config == {
            "cluster": cluster,
            "task": {"type": role, "index": index},
            "environment": "cloud",
        }
    assert len({json.dumps(c, sort_keys=True) for _, _, c in configs}) == 7


def test_issue_example_six_distinct_tf_configs():
    configs = tf_configs(Chief=1, PS=2, Worker=3)
    assert len({json.dumps(c["task"], sort_keys=True) for _, _, c in configs}) == 6
    assert len({json.dumps(c["cluster"], sort_keys=True) for _, _, c in configs}) == 1


@pytest.mark.parametrize("counts", [{"Worker": 1}, {"Chief": 1}])
def test_a_single_pod_tf_experiment_has_no_tf_config(counts):
    ((_, _, env),) = replica_envs(manifest("tf", **counts))
    assert "TF_CONFIG" not in env


@pytest.mark.parametrize(
    ("counts", "entry"),
    [
        ({"Chief": 1, "PS": 2, "Worker": 2, "Evaluator": 1}, "chief"),
        ({"PS": 1, "Worker": 3}, "worker"),
    ],
)
def test_tf_replicas_follow_the_entry_point(counts, entry):
    spec = pods(manifest("tf", **counts))
    entry_host = HOST.format(role=entry, i=0)
    for name, pod in spec.items():
        script = pod["containers"][0]["command"]
        if name == f"exp-{entry}" and counts.get(entry.capitalize(), 0) == 1:
            # the entry point follows no one; its followers keep a lifeline to it
            assert script[3:] == ["aichor", "run"] and "aichor_lookup" not in script[2]
            lifeline = shlex.quote(programs.source("lifeline")) + ' "$1" entry '
            assert shell.k8s_escape(lifeline) in script[2]
        else:
            assert f"aichor_lookup {entry_host}" in script[2], name
        if name == f"exp-{entry}" and counts.get(entry.capitalize(), 0) == 1:
            assert not wait_of(pod)
        else:  # no TCP wait (TF's gRPC channels retry), but the entry point must exist first
            assert f'aichor_wait {entry_host} ""' in wait_of(pod), name
    outputs = expand(manifest("tf", **counts)).outputs
    assert outputs["entryPoint"] == f"exp-{entry}"
    assert outputs["addresses"] == {entry: f"{entry_host}:2222"}


# --- bad manifests ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("operator", "counts", "expected"),
    [
        ("tf", {"Chief": 2, "Worker": 1}, "spec.types.Chief.count: at most one Chief"),
        ("tf", {"Evaluator": 1}, "spec.types: TF needs a Chief or at least one Worker"),
        ("xgboost", {"Master": 2, "Worker": 1}, "spec.types.Master.count: must be 1, not 2"),
        (
            "xgboost",
            {"Master": 1, "Chief": 1},
            "spec.types.Chief: operator 'xgboost' has no Chief; its types are Master, Worker",
        ),
        ("jax", {"Worker": 0}, "spec.types.Worker.count: JAX needs at least one Worker"),
        (
            "paddle",
            {"Master": 1, "Worker": 0},
            "spec.types.Worker.count: PaddlePaddle needs at least one Worker",
        ),
        (
            "jax",
            {"Master": 1, "Worker": 1},
            "spec.types.Master: operator 'jax' has no Master; its types are Worker",
        ),
    ],
)
def test_bad_manifests(operator, counts, expected):
    with pytest.raises(ManifestError) as caught:
        validate(manifest(operator, **counts))
    assert expected in [f"{p.path}: {p.message}" for p in caught.value.problems]


@pytest.mark.parametrize(
    ("operator", "component"),
    [
        ("xgboost", "aichor:index:XGBoostJob"),
        ("jax", "aichor:index:JaxJob"),
        ("paddle", "aichor:index:PaddleJob"),
        ("tf", "aichor:index:TFJob"),
        ("pytorch", "aichor:index:PyTorchJob"),
    ],
)
def test_component_type_tokens(operator, component):
    rendering = expand(manifest(operator, Worker=2))
    assert rendering.resources[0].type == component
