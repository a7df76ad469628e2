"""TrainJobs on Trainer's MPI runtimes (`deepspeed-distributed`, `mlx-distributed`, or one in
the file), as Trainer v2.3.0's MPI plugin runs them: `node` Jobs running sshd, the trainer's
launcher once they are Ready, OpenMPI's variables on the launcher, the generated key pair on
every `node` container and the hostfile on the launcher's."""

from __future__ import annotations

import copy
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import schemas
import yaml
from conftest import expand
from test_trainjob import container, env, node_jobs, run_locally, trainjob

from aichor_iac import doors
from aichor_iac.convert import convert
from aichor_iac.doors.trainer.runtimes import RUNTIMES
from aichor_iac.local import LocalCluster
from aichor_iac.problems import ManifestError
from aichor_iac.rules import limits

OMPI = {
    "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
    "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
    "OMPI_MCA_orte_set_default_slots": "1",
    "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
}


def volumes(job: dict[str, Any]) -> dict[str, Any]:
    return {v["name"]: v for v in job["spec"]["template"]["spec"].get("volumes", [])}


def mounts(job: dict[str, Any]) -> dict[str, str]:
    return {m["name"]: m["mountPath"] for m in container(job).get("volumeMounts", [])}


def hostfile(data: dict[str, Any]) -> str:
    (config,) = [o for o in expand(data, name="tj").objects if o["kind"] == "ConfigMap"]
    return config["data"]["hostfile"]


@pytest.mark.parametrize("runtime", ["deepspeed-distributed", "mlx-distributed"])
def test_an_mpi_runtime_gives_sshd_nodes_and_the_trainers_launcher(runtime: str) -> None:
    """numNodes 3 with the launcher ranking too: a `node` Job of 2 pods (sshd, Ready on 2222)
    and the launcher (1 pod, the trainer's command) created once they are Ready; OpenMPI's
    variables on the launcher only; the trainer's env on both; the key pair at
    /home/mpiuser/.ssh on both, the hostfile at /etc/mpi on the launcher's."""
    data = trainjob(
        runtime,
        numNodes=3,
        command=["mpirun", "python", "train.py"],
        env=[{"name": "A", "value": "1"}],
    )
    jobs = node_jobs(data)
    assert list(jobs) == ["tj-node-0", "tj-launcher-0"]
    node, launcher = jobs["tj-node-0"], jobs["tj-launcher-0"]
    assert (node["spec"]["parallelism"], launcher["spec"]["parallelism"]) == (2, 1)
    assert container(node)["command"][-1] == "/usr/sbin/sshd -De -f /home/mpiuser/.sshd_config"
    assert container(node)["readinessProbe"]["tcpSocket"]["port"] == 2222
    assert container(launcher)["command"][-1] == "mpirun python train.py"
    assert node["metadata"]["annotations"]["pulumi.com/waitFor"] == (
        "jsonpath={$[?@.ready==2 || @.succeeded==2]}"
    )
    index = "field:metadata.annotations['batch.kubernetes.io/job-completion-index']"
    assert env(container(launcher)) == {**OMPI, "A": "1", "JOB_COMPLETION_INDEX": index}
    assert env(container(node)) == {"A": "1", "JOB_COMPLETION_INDEX": index}
    assert "ports" not in container(node)  # (no trainer port: the MPI plugin adds none)
    assert mounts(node) == {"mpi-ssh-auth": "/home/mpiuser/.ssh"}
    assert mounts(launcher) == {"mpi-ssh-auth": "/home/mpiuser/.ssh", "mpi-hostfile": "/etc/mpi"}
    ssh = volumes(launcher)["mpi-ssh-auth"]["projected"]
    assert ssh["defaultMode"] == 0o400
    assert [(i["key"], i["path"], i["mode"]) for i in ssh["sources"][0]["secret"]["items"]] == [
        ("ssh-privatekey", "id_rsa", 0o640),
        ("ssh-publickey", "id_rsa.pub", 0o644),
        ("ssh-publickey", "authorized_keys", 0o644),
    ]
    assert (
        hostfile(data)
        == "tj-node-0-0.tj slots=1\ntj-node-0-1.tj slots=1\ntj-launcher-0-0.tj slots=1\n"
    )
    objects = expand(data, name="tj").objects
    (secret,) = [o for o in objects if o["kind"] == "Secret"]
    assert secret["type"] == "kubernetes.io/ssh-auth"
    for obj in objects:
        schemas.validate(obj)
    assert limits.check(objects) == []


@pytest.mark.parametrize(
    ("trainer", "slots"),
    [
        ({}, "1"),
        ({"numProcPerNode": 4}, "4"),
        ({"resourcesPerNode": {"limits": {"nvidia.com/gpu": 8}}}, "8"),
        ({"resourcesPerNode": {"limits": {"nvidia.com/gpu": 1}}}, "1"),
        ({"numProcPerNode": 2, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 8}}}, "2"),
    ],
)
def test_slots_as_the_mpi_plugin_counts_them(trainer: dict[str, Any], slots: str) -> None:
    """The trainer's numProcPerNode, else the runtime's 1 — or the GPUs of a node with
    several — in the launcher's variable and the hostfile."""
    data = trainjob("deepspeed-distributed", numNodes=2, **trainer)
    launcher = node_jobs(data)["tj-launcher-0"]
    assert env(container(launcher))["OMPI_MCA_orte_set_default_slots"] == slots
    assert hostfile(data) == f"tj-node-0-0.tj slots={slots}\ntj-launcher-0-0.tj slots={slots}\n"


def mpi_runtime(as_node: bool = True, name: str = "mpi", **policy: Any) -> dict[str, Any]:
    runtime = copy.deepcopy(RUNTIMES["deepspeed-distributed"])
    runtime["kind"], runtime["metadata"] = "TrainingRuntime", {"name": name}
    runtime["spec"]["mlPolicy"]["mpi"].update(runLauncherAsNode=as_node, **policy)
    return runtime


def on(runtime: dict[str, Any], **trainer: Any) -> str:
    data = trainjob(runtime["metadata"]["name"], **trainer)
    data["spec"]["runtimeRef"]["kind"] = "TrainingRuntime"
    return yaml.safe_dump_all([data, runtime], sort_keys=False)


def test_a_launcher_that_does_not_rank_leaves_numnodes_to_the_nodes() -> None:
    """runLauncherAsNode false: `numNodes` sshd pods, the hostfile lists them alone."""
    jobs = node_jobs(on(mpi_runtime(as_node=False), numNodes=3))
    assert jobs["tj-node-0"]["spec"]["parallelism"] == 3
    assert jobs["tj-launcher-0"]["spec"]["parallelism"] == 1


@pytest.mark.parametrize(
    ("runtime", "trainer", "path", "message"),
    [
        (
            mpi_runtime(mpiImplementation="Intel"),
            {},
            "runtime: spec.mlPolicy.mpi.mpiImplementation",
            "OpenMPI",
        ),
        (
            mpi_runtime(),
            {"env": [{"name": "OMPI_MCA_plm_rsh_args", "value": "-v"}]},
            "spec.trainer.env.0",
            "reserved for the mpi runtime",
        ),
    ],
)
def test_what_the_mpi_plugin_refuses(
    runtime: dict[str, Any], trainer: dict[str, Any], path: str, message: str
) -> None:
    with pytest.raises(ManifestError) as error:
        doors.parse(on(runtime, **trainer), source="test.yaml")
    found = {p.path: p.message for p in error.value.problems}
    assert path in found and message in found[path], found


def test_several_nodes_need_a_launcher_and_nodes_when_the_launcher_ranks() -> None:
    runtime = mpi_runtime()
    jobs = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    jobs[:] = [jobs[1]]  # the launcher alone
    jobs[0]["dependsOn"] = []
    with pytest.raises(ManifestError) as error:
        doors.parse(on(runtime, numNodes=2), source="test.yaml")
    assert [p.path for p in error.value.problems] == ["spec.trainer.numNodes"]


MPI_TOOLS = (
    all(shutil.which(t) for t in ("mpirun", "ssh", "ssh-keygen"))
    and Path("/usr/sbin/sshd").exists()
)
# The image's sshd config (/home/mpiuser/.sshd_config: port 2222, the mounted keys) on the
# command line, since that image is not on this machine; host keys made at start.
LOCAL_SSHD = (
    "mkdir -p /run/sshd && ssh-keygen -q -t ed25519 -N '' -f /tmp/host_key && "
    "exec /usr/sbin/sshd -De -p 2222 -h /tmp/host_key "
    "-o AuthorizedKeysFile=/home/mpiuser/.ssh/authorized_keys -o StrictModes=no -o UsePAM=no"
)


@pytest.mark.skipif(
    not (MPI_TOOLS and LocalCluster.available() and os.geteuid() == 0),
    reason="needs Debian's openmpi-bin and openssh-server (installed by `make test` as root) "
    "and `ip netns`",
)
def test_real_mpi_trainjob_runs_mpirun_over_the_nodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the local cluster, deepspeed-distributed's shape (DeepSpeed itself needs CUDA and
    its runtime image: the launch path is the same with an mpi4py program): 3 nodes of 2 slots,
    the launcher ranking too; `mpirun` finds the hosts and slots in the plugin's hostfile and
    variables alone, reaches the 2 sshd nodes with the generated key, and 6 ranks, 2 per host,
    all-reduce.
    The pods run as root here (the image's user 1000 is not): the key is copied to the 0600
    that ssh wants of its owner's key, mpirun is allowed to run as root and passes on the PATH
    of this environment's Python (an image has mpi4py on its default one)."""
    runtime = mpi_runtime(name="deepspeed-local")
    node = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]
    sshd = container({"spec": node["template"]["spec"]})
    sshd.update(command=["/bin/sh", "-c", LOCAL_SSHD])
    sshd.pop("args")
    agent = "ssh -p 2222 -i /tmp/id_rsa -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"
    command = (
        "install -m 600 /home/mpiuser/.ssh/id_rsa /tmp/id_rsa && "
        "exec mpirun --allow-run-as-root -x PATH python3 -u train_mpi.py --epochs 20"
    )
    data = yaml.safe_load_all(
        on(
            runtime,
            numNodes=3,
            numProcPerNode=2,
            command=["/bin/sh", "-c", command],
            env=[{"name": "OMPI_MCA_plm_rsh_agent", "value": agent}],
        )
    )
    lines = run_locally(list(data), "train_mpi.py", tmp_path, monkeypatch)
    said = [line for pod, line in lines if pod == "tj-launcher-0-0"]
    assert any(line.startswith("epoch 20 loss") for line in said), lines[-40:]
    ranks = sorted(line.split()[1:6:2] for line in said if line.startswith("rank "))
    assert [int(r) for r, _, _ in ranks] == list(range(6)), said  # ("rank 0 of 6 on host:")
    hosts = sorted(host for _, _, host in ranks)
    assert hosts == sorted(["tj-launcher-0-0:", "tj-node-0-0:", "tj-node-0-1:"] * 2), said
    assert all(line.endswith("weights match True") for line in said if line.startswith("rank "))


def test_convert_says_the_mpi_wiring_is_lost() -> None:
    """AIchor's jobset has no key pair or hostfile: `convert` lists them as lost."""
    data = trainjob("deepspeed-distributed", numNodes=2, command=["mpirun", "python", "t.py"])
    lost = convert(doors.parse(yaml.safe_dump(data), source="t.yaml")).lost
    assert any(line.startswith("mlPolicy.mpi: no key pair, hostfile") for line in lost), lost
