"""The PyTorch contract (DESIGN §5): the env every replica's command sees, computed from the
rendered Jobs the way Kubernetes would and by running the command's shell prelude."""

from __future__ import annotations

import pytest
from conftest import expand, pytorch_manifest, replica_envs, wait_of, with_resources
from kube import PRINT_ENV, container_env, process_env
from kube import expand as k8s_expand

HOST = "{exp}-{role}-{i}.{exp}.default.svc.cluster.local"


def replicas(data: dict) -> list[tuple[str, int, dict]]:
    return sorted(replica_envs(data), key=lambda r: int(r[2]["RANK"]))


@pytest.mark.parametrize(
    ("masters", "workers", "coordinator"),
    [
        (1, 0, "master"),
        (1, 1, "master"),
        (1, 2, "master"),
        (1, 5, "master"),
        (None, 1, "worker"),
        (None, 4, "worker"),
    ],
)
def test_every_replica_sees_the_torch_distributed_env(masters, workers, coordinator):
    world = (masters or 0) + workers
    seen = replicas(pytorch_manifest(masters, workers))
    assert [env["RANK"] for _, _, env in seen] == [str(r) for r in range(world)]
    master_host = HOST.format(exp="exp", role=coordinator, i=0)
    for role, index, env in seen:
        expected_rank = index + (1 if role == "worker" and masters else 0)
        assert env["RANK"] == env["PET_NODE_RANK"] == str(expected_rank)
        assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == master_host
        assert env["MASTER_PORT"] == env["PET_MASTER_PORT"] == "23456"
        assert env["WORLD_SIZE"] == env["PET_NNODES"] == str(world)
        assert env["PET_NPROC_PER_NODE"] == "1"
        assert env["PYTHONUNBUFFERED"] == "1"
        assert env["NVIDIA_VISIBLE_DEVICES"] == "void"  # no GPU asked, none visible


def test_issue_example_three_replicas_with_one_gpu_each(render):
    data = with_resources(
        pytorch_manifest(1, 2, command=PRINT_ENV),
        accelerators={"gpu": {"count": 1, "type": "gpu", "product": "Quadro-RTX-4000"}},
    )
    objects = render(data, name="exp")
    master, worker = objects["Job/exp-master"], objects["Job/exp-worker"]
    assert master["spec"]["completions"] == 1 and worker["spec"]["completions"] == 2
    for job in (master, worker):
        pod = job["spec"]["template"]["spec"]
        main = pod["containers"][0]
        assert main["resources"]["requests"] == {"cpu": "4", "memory": "12Gi"}
        assert main["resources"]["limits"] == {"cpu": "8", "memory": "12Gi", "nvidia.com/gpu": "1"}
        assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "Quadro-RTX-4000"}
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
            "tolerations"
        ]
        env = container_env(job, 0)
        assert env["MASTER_ADDR"] == "exp-master-0.exp.default.svc.cluster.local"
        assert "NVIDIA_VISIBLE_DEVICES" not in env  # the device plugin decides
    ranks = [process_env(master, 0)["RANK"]] + [
        process_env(worker, i, extra_env={"AICHOR_FOLLOW_INTERVAL": "0.05"})["RANK"]
        for i in range(2)
    ]
    assert ranks == ["0", "1", "2"]


def test_nproc_per_node_is_the_gpu_count():
    data = with_resources(pytorch_manifest(1, 1), accelerators={"gpu": {"count": 4}})
    job = next(o for o in expand(data).objects if o["metadata"]["name"] == "exp-worker")
    assert container_env(job, 0)["PET_NPROC_PER_NODE"] == "4"


def test_workers_wait_for_and_follow_rank_zero(render):
    objects = render(pytorch_manifest(1, 2))
    master = objects["Job/exp-master"]["spec"]["template"]["spec"]
    worker = objects["Job/exp-worker"]["spec"]["template"]["spec"]
    assert not wait_of(master)
    assert "exp-master-0.exp.default.svc.cluster.local 23456" in wait_of(worker)
    assert "aichor_lookup" in worker["containers"][0]["command"][2]
    # The followed entry point holds the lifeline; the user's command is its `$1`, unchanged.
    command = master["containers"][0]["command"]
    assert command[:2] == ["/bin/sh", "-c"] and command[3:] == ["aichor", "python train.py"]
    assert "lifeline" in [port["name"] for port in master["containers"][0]["ports"]]


def test_user_command_reaches_the_shell_unchanged(render):
    command = 'echo "$HOME $(hostname) $(MASTER_ADDR) $$" && python train.py'
    objects = render(pytorch_manifest(1, 1, command=command))
    worker = objects["Job/exp-worker"]["spec"]["template"]["spec"]["containers"][0]
    master = objects["Job/exp-master"]["spec"]["template"]["spec"]["containers"][0]
    env = {"MASTER_ADDR": "should-not-be-substituted"}
    assert k8s_expand(worker["command"][-1], env) == command
    assert k8s_expand(master["command"][-1], env) == command
