"""Manifests as AIchor users write them (tests/aichor/: the shapes of AIchor's public demos
and teams' repositories, with their comments, modelines, quoting, CRLF line ends and trailing
spaces, apiVersions 0.2.1 to 0.2.3, both casings of type names): each one validates, renders
unchanged with no stack config, every object is valid Kubernetes (strict), and every replica
sees the env its framework promises."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import schemas
import yaml
from conftest import ROOT, expand, replica_envs
from kube import container_env

from aichor_iac import cli, doors

MANIFESTS = ROOT / "tests" / "aichor"
TB = "/aichor/tensorboard"  # TensorBoard without storage: each replica's local log directory


def host(role: str, index: int = 0) -> str:
    return f"exp-{role}-{index}.exp.default.svc.cluster.local"


def jobset_env(name: str, job: int, global_index: int, replicas: int, total: int) -> dict:
    return {
        "JOB_INDEX": str(job),
        "JOB_GLOBAL_INDEX": str(global_index),
        "GLOBAL_REPLICAS": str(total),
        "REPLICATED_JOB_NAME": name,
        "REPLICATED_JOB_REPLICAS": str(replicas),
    }


# file -> {(role, index): env subset that replica sees}; "*" is every replica.
EXPECTED: dict[str, dict] = {
    "pytorch-master-workers.yaml": {
        "*": {"WORLD_SIZE": "3", "MASTER_ADDR": host("master"), "AICHOR_TENSORBOARD_PATH": TB},
        ("master", 0): {"RANK": "0", "PET_NODE_RANK": "0"},
        ("worker", 0): {"RANK": "1"},
        ("worker", 1): {"RANK": "2"},
    },
    "jax-workers.yaml": {
        "*": {"JAX_NUM_PROCESSES": "2", "JAX_COORDINATOR_ADDRESS": f"{host('worker')}:1234"},
        ("worker", 0): {"JAX_PROCESS_ID": "0", "JAXOPERATOR_PROCESS_ID": "0"},
        ("worker", 1): {"JAX_PROCESS_ID": "1", "JAXOPERATOR_PROCESS_ID": "1"},
    },
    "pytorch-single-worker-crlf.yaml": {
        ("worker", 0): {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": host("worker")},
    },
    "kuberay-tune.yaml": {
        "*": {"RAY_SERVER": "exp-head.default.svc.cluster.local:6379"},
        ("head", 0): {
            "RAY_ADDRESS": "exp-head.default.svc.cluster.local:6379",
            "RAY_NODE_TYPE_NAME": "headgroup",
        },
        **{("cpu-workers", i): {} for i in range(5)},
        ("submitter", 0): {},
    },
    "jobset-smoke.yaml": {
        ("master-0", 0): jobset_env("master", 0, 0, 1, 2),
        ("worker-0", 0): jobset_env("worker", 0, 1, 1, 2),
    },
    "jobset-parallel.yaml": {
        ("worker-heavy-0", 0): jobset_env("worker-heavy", 0, 0, 1, 5),
        **{
            (f"worker-{j}", i): {
                **jobset_env("worker", j, j + 1, 4, 5),
                "JOB_COMPLETION_INDEX": str(i),
            }
            for j in range(4)
            for i in range(10)
        },
    },
    "xgboost-modeline.yaml": {
        "*": {"WORKER_ADDRS": host("worker"), "AICHOR_TENSORBOARD_PATH": TB},
        ("master", 0): {"RANK": "0"},
        ("worker", 0): {"RANK": "1"},
    },
    "batchjob-older-keys.yaml": {
        "*": {"LOG_LEVEL": "debug", "SHARDS": "4"},
        **{("worker", i): {"JOB_COMPLETION_INDEX": str(i)} for i in range(4)},
    },
    "pytorch-rdma-h100.yaml": {
        "*": {"WORLD_SIZE": "2", "PET_NPROC_PER_NODE": "8", "AICHOR_TENSORBOARD_PATH": TB},
        ("master", 0): {"RANK": "0"},
        ("worker", 0): {"RANK": "1"},
    },
    "kuberay-tpu-slice.yaml": {
        "*": {"RAY_SERVER": "exp-head.default.svc.cluster.local:6379"},
        ("head", 0): {"RAY_ADDRESS": "exp-head.default.svc.cluster.local:6379"},
        **{
            ("tpu-pool-0", w): {
                "TPU_WORKER_ID": str(w),
                "TPU_NAME": "tpu-pool-0",
                "TPU_WORKER_HOSTNAMES": ",".join(host("tpu-pool-0", i) for i in range(4)),
            }
            for w in range(4)
        },
        ("submitter", 0): {},
    },
    "jax-tpu-multislice.yaml": {
        "*": {
            "JAX_NUM_PROCESSES": "4",
            "JAX_COORDINATOR_ADDRESS": f"{host('worker-0')}:1234",
            "MEGASCALE_COORDINATOR_ADDRESS": host("worker-0"),
            "MEGASCALE_NUM_SLICES": "2",
        },
        **{
            (f"worker-{s}", w): {
                "JAX_PROCESS_ID": str(2 * s + w),
                "TPU_WORKER_ID": str(w),
                "TPU_NAME": f"worker-{s}",
                "TPU_WORKER_HOSTNAMES": f"{host(f'worker-{s}', 0)},{host(f'worker-{s}', 1)}",
                "MEGASCALE_SLICE_ID": str(s),
            }
            for s in range(2)
            for w in range(2)
        },
    },
    "tf-vscode-off.yaml": {
        ("chief", 0): {"TF_CONFIG": ("chief", 0)},
        ("ps", 0): {"TF_CONFIG": ("ps", 0)},
        ("worker", 0): {"TF_CONFIG": ("worker", 0)},
        ("worker", 1): {"TF_CONFIG": ("worker", 1)},
    },
}


def test_every_manifest_has_expectations():
    assert sorted(p.name for p in MANIFESTS.glob("*.yaml")) == sorted(EXPECTED)


def seen_env(path) -> dict[tuple[str, int], dict[str, str]]:
    """What each replica's command sees: run for real, except Ray's programs (`ray start`),
    whose env is computed as Kubernetes would give it."""
    data = doors.load(path)
    if data.spec.operator in ("ray", "kuberay"):
        jobs = [o for o in expand(path).objects if o["kind"] == "Job"]
        return {
            (j["metadata"]["labels"]["training.kubeflow.org/replica-type"], i): container_env(j, i)
            for j in jobs
            for i in range(j["spec"]["completions"])
        }
    return {(r, i): env for r, i, env in replica_envs(yaml.safe_load(path.read_text()))}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_manifest_runs_unchanged(name, capsys):
    path = MANIFESTS / name
    assert cli.main(["validate", str(path)]) == 0, capsys.readouterr().err
    rendering = expand(path)
    for obj in rendering.objects:
        schemas.validate(obj)
    seen = seen_env(path)
    expected = dict(EXPECTED[name])
    common = expected.pop("*", {})
    assert sorted(seen) == sorted(expected)
    for replica, wanted in expected.items():
        env = seen[replica]
        for key, value in {**common, **wanted}.items():
            if key == "TF_CONFIG":
                task = json.loads(env[key])["task"]
                assert (task["type"], task["index"]) == value
            else:
                assert env.get(key) == value, (replica, key)
    assert rendering.outputs["pods"] == len(seen)


def test_real_manifests_keep_their_commands_verbatim():
    path = MANIFESTS / "pytorch-single-worker-crlf.yaml"
    (job,) = [o for o in expand(path).objects if o["kind"] == "Job"]
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[-1] == (
        'env NCCL_P2P_DISABLE="1" NCCL_IB_DISABLE="1" torchrun --nproc_per_node gpu main.py '
        "--mixed_precision fp16"
    )


def test_older_keys_reach_the_jobs():
    objects = expand(MANIFESTS / "batchjob-older-keys.yaml").objects
    (job,) = [o for o in objects if o["kind"] == "Job"]
    assert job["spec"]["activeDeadlineSeconds"] == 7200
    assert all(o["metadata"]["labels"]["aichor.ai/engine-name"] == "kyber-cpu" for o in objects)
    (tf_chief, *_) = [
        o for o in expand(MANIFESTS / "tf-vscode-off.yaml").objects if o["kind"] == "Job"
    ]
    assert tf_chief["spec"]["activeDeadlineSeconds"] == 6 * 3600


@pytest.mark.parametrize(
    ("name", "slices", "expected_nodes"),
    [
        ("kuberay-tpu-slice.yaml", {"tpu-pool-0": 4}, 5),
        ("jax-tpu-multislice.yaml", {"worker-0": 2, "worker-1": 2}, None),
    ],
)
def test_tpu_slices_are_one_job_each_kept_on_one_node_pool(name, slices, expected_nodes):
    rendering = expand(MANIFESTS / name)
    jobs = {
        o["metadata"]["name"].removeprefix("exp-"): o
        for o in rendering.objects
        if o["kind"] == "Job"
    }
    for role, hosts in slices.items():
        spec = jobs[role]["spec"]
        assert spec["completions"] == spec["parallelism"] == hosts
        pod = spec["template"]["spec"]
        (term,) = pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["topologyKey"] == "cloud.google.com/gke-nodepool"
        assert term["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == role
        assert pod["containers"][0]["resources"]["limits"]["google.com/tpu"] == "4"
        assert pod["nodeSelector"]["cloud.google.com/gke-tpu-accelerator"] == "tpu-v5-lite-podslice"
    if expected_nodes:
        assert rendering.outputs["expectedNodeCount"] == expected_nodes


DEMOS = os.environ.get("AICHOR_DEMOS")  # a checkout of AIchor's public demos, if given


@pytest.mark.skipif(not DEMOS, reason="set AICHOR_DEMOS to a checkout of instadeepai/aichor-demo")
def test_public_aichor_demos_run_unchanged(capsys):
    paths = sorted(
        p for p in Path(DEMOS).rglob("*.y*ml") if "kind: AIchorManifest" in p.read_text()
    )
    assert paths
    for path in paths:
        assert cli.main(["validate", str(path)]) == 0, (path, capsys.readouterr().err)
        for obj in expand(path).objects:
            schemas.validate(obj)
