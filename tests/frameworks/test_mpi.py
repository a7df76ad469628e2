"""MPIJob: the MPI Operator v2 contract (SSH key Secret, hostfile ConfigMap, sshd workers, a
launcher created once they accept SSH) and a real `mpirun` over OpenSSH between local pods."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import ROOT, by_name, expand, wait_of
from kube import LocalCluster, container_env, pod_env

from aichor_iac import doors, engine
from aichor_iac.k8s import progress, shell

EXAMPLE = ROOT / "examples" / "mpi-horovod.yaml"
HOST = "exp-worker-{i}.exp.default.svc.cluster.local"


def mpi(workers: int = 2, gpus: int = 0, command: str = "mpirun true", **spec: Any) -> dict:
    worker: dict[str, Any] = {"cpus": 4, "ramRatio": 2}
    if gpus:
        worker["accelerators"] = {"gpu": {"count": gpus, "type": "gpu"}}
    return {
        "kind": "AIchorManifest",
        "apiVersion": "0.2.2",
        "spec": {
            "operator": "mpi",
            "image": "mpi:latest",
            "command": command,
            "types": {
                "Launcher": {"count": 1, "resources": {"cpus": 1, "ramRatio": 2}},
                "Worker": {"count": workers, "resources": worker},
            },
            **spec,
        },
    }


def test_example_gives_secret_hostfile_workers_and_a_launcher_after_them():
    rendering = engine.expand(doors.load(EXAMPLE), name="horovod")
    objects = by_name(rendering.objects)
    assert [k for k in objects if k.split("/")[0] in ("Secret", "ConfigMap", "Job")] == [
        "Secret/horovod-secret",
        "ConfigMap/horovod-config",
        "Job/horovod-worker",
        "Job/horovod-launcher",
    ]
    secret = objects["Secret/horovod-secret"]
    assert secret["type"] == "kubernetes.io/ssh-auth"
    assert secret["stringData"] == {
        "ssh-privatekey": engine.REDACTED,
        "ssh-publickey": engine.REDACTED,
        **dict.fromkeys(progress.KEYS, engine.REDACTED),  # (the progress receiver's)
    }
    hostfile = objects["ConfigMap/horovod-config"]["data"]["hostfile"]
    assert hostfile == "".join(
        f"horovod-worker-{i}.horovod.default.svc.cluster.local slots=4\n" for i in range(2)
    )
    assert objects["Job/horovod-worker"]["spec"]["completions"] == 2
    launcher = next(r for r in rendering.resources if r.name == "horovod-launcher")
    worker = next(r for r in rendering.resources if r.name == "horovod-worker")
    assert worker.urn in launcher.dependencies
    assert objects["Job/horovod-worker"]["metadata"]["annotations"] == {
        "pulumi.com/waitFor": "jsonpath={$[?@.ready==2 || @.succeeded==2]}",
        "pulumi.com/deletionPropagationPolicy": "background",
    }


def test_key_material_never_rendered_and_renders_are_identical(tmp_path):
    first = subprocess.run(
        [sys.executable, "-m", "aichor_iac.cli", "render", str(EXAMPLE)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    second = cli_render(EXAMPLE)
    assert first == second
    for material in engine.GENERATED["tls:index/privateKey:PrivateKey"].values():
        assert material.strip() not in first
    assert "PRIVATE KEY" not in first


def cli_render(path: Path) -> str:
    return subprocess.run(
        [sys.executable, "-m", "aichor_iac.cli", "render", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


@pytest.mark.parametrize(
    ("implementation", "line", "env"),
    [
        (
            "OpenMPI",
            "{host} slots=2\n",
            {
                "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
                "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
                "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
                "OMPI_MCA_orte_set_default_slots": "2",
            },
        ),
        (
            "Intel",
            "{host}:2\n",
            {
                "I_MPI_HYDRA_HOST_FILE": "/etc/mpi/hostfile",
                "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS": "-o ConnectionAttempts=10",
            },
        ),
        (
            "MPICH",
            "{host}:2\n",
            {
                "HYDRA_HOST_FILE": "/etc/mpi/hostfile",
                "HYDRA_LAUNCH_EXTRA_ARGS": "-o ConnectionAttempts=10",
            },
        ),
    ],
)
def test_hostfile_syntax_and_launcher_env_per_implementation(render, implementation, line, env):
    objects = render(mpi(workers=3, mpiImplementation=implementation, slotsPerWorker=2))
    hostfile = objects["ConfigMap/exp-config"]["data"]["hostfile"]
    assert hostfile == "".join(line.format(host=HOST.format(i=i)) for i in range(3))
    launcher_env = container_env(objects["Job/exp-launcher"], 0)
    assert env.items() <= launcher_env.items()
    assert launcher_env["NVIDIA_VISIBLE_DEVICES"] == "void"  # no GPU asked: none seen
    worker_env = container_env(objects["Job/exp-worker"], 0)
    assert not {k for k in worker_env if k.startswith(("OMPI_", "I_MPI_", "HYDRA_"))}


@pytest.mark.parametrize(("gpus", "slots", "expected"), [(0, None, 1), (4, None, 4), (4, 2, 2)])
def test_slots_default_to_gpus_per_worker(render, gpus, slots, expected):
    data = mpi(gpus=gpus, **({"slotsPerWorker": slots} if slots else {}))
    hostfile = render(data)["ConfigMap/exp-config"]["data"]["hostfile"]
    assert hostfile.splitlines()[0].endswith(f" slots={expected}")
    assert expand(data).outputs["slots"] == 2 * expected


def test_mounts_modes_and_sshd_capabilities(render):
    objects = render(mpi())
    worker = objects["Job/exp-worker"]["spec"]["template"]["spec"]
    launcher = objects["Job/exp-launcher"]["spec"]["template"]["spec"]
    ssh = next(v for v in worker["volumes"] if v["name"] == "ssh")["projected"]
    assert ssh["defaultMode"] == 0o600
    secret_items = ssh["sources"][0]["secret"]
    assert secret_items["name"] == "exp-secret"
    assert [(i["key"], i["path"]) for i in secret_items["items"]] == [
        ("ssh-privatekey", "id_ed25519"),
        ("ssh-publickey", "id_ed25519.pub"),
        ("ssh-publickey", "authorized_keys"),
    ]
    assert ssh["sources"][1]["configMap"]["items"] == [{"key": "ssh_config", "path": "config"}]
    mounts = {m["mountPath"]: m for m in launcher["containers"][0]["volumeMounts"]}
    ours = progress.MOUNT_PATH  # (the progress receiver's CA and token)
    assert set(mounts) == {"/root/.ssh", "/etc/mpi", ours}
    assert all(m["readOnly"] for m in mounts.values())
    assert [m["mountPath"] for m in worker["containers"][0]["volumeMounts"]] == ["/root/.ssh", ours]
    caps = worker["containers"][0]["securityContext"]["capabilities"]
    assert caps["drop"] == ["ALL"] and "SYS_CHROOT" in caps["add"]
    assert "add" not in launcher["containers"][0]["securityContext"]["capabilities"]
    assert worker["containers"][0]["readinessProbe"]["tcpSocket"] == {"port": 22}
    for pod in (worker, launcher):
        assert pod["automountServiceAccountToken"] is False


def test_launcher_checks_every_worker_before_running(render):
    launcher = render(mpi(workers=1000))["Job/exp-launcher"]["spec"]["template"]["spec"]
    script = wait_of(launcher)
    assert 'while [ "$$i" -lt 1000 ]' in script
    assert 'aichor_wait "exp-worker-$$i.exp.default.svc.cluster.local" 22' in script
    # The launcher runs the command, then stays in DNS one follow interval for the workers,
    # which were created before it and count it gone only once they have seen it.
    command = launcher["containers"][0]["command"]
    assert command[3:] == ["aichor", "mpirun true"] and shell.k8s_escape(shell.LINGER) in command[2]


@pytest.mark.parametrize(
    ("types", "path", "message"),
    [
        ({"Launcher": 1}, "spec.types.Worker.count", "at least one Worker"),
        ({"Launcher": 2, "Worker": 1}, "spec.types.Launcher.count", "must be 1"),
        ({"Worker": 2}, "spec.types.Launcher", "needs a Launcher"),
    ],
)
def test_bad_mpi_manifests(types, path, message):
    data = mpi()
    data["spec"]["types"] = {
        name: {"count": n, "resources": {"cpus": 1, "ramRatio": 1}} for name, n in types.items()
    }
    errors = validate(data)
    assert any(path in line and message in line for line in errors), errors


def test_unknown_implementation_is_named():
    errors = validate(mpi(mpiImplementation="MVAPICH"))
    assert any("spec.mpiImplementation" in e and "OpenMPI" in e for e in errors), errors


def validate(data: dict) -> list[str]:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(data, f)
    result = subprocess.run(
        [sys.executable, "-m", "aichor_iac.cli", "validate", f.name],
        capture_output=True,
        text=True,
    )
    os.unlink(f.name)
    assert result.returncode == 2, result.stdout
    return result.stderr.splitlines()


# --- a real run: OpenMPI's mpirun reaching two sshd workers --------------------------------------

MPI_TOOLS = (
    all(shutil.which(t) for t in ("mpirun", "ssh", "ssh-keygen"))
    and Path("/usr/sbin/sshd").exists()
)


@pytest.mark.skipif(
    not (MPI_TOOLS and LocalCluster.available() and os.geteuid() == 0),
    reason="needs Debian's openmpi-bin and openssh-server (installed by `make test` as root) "
    "and `ip netns`",
)
def test_mpirun_reaches_every_worker_over_ssh(tmp_path):
    key = tmp_path / "key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    command = (
        "mpirun sh -c 'echo rank $OMPI_COMM_WORLD_RANK of $OMPI_COMM_WORLD_SIZE on $(hostname -I)'"
    )
    objects = expand(mpi(workers=2, slotsPerWorker=2, command=command)).objects
    env = pod_env(AICHOR_FOLLOW_INTERVAL="0.2")
    secrets = {
        "ssh-privatekey": key.read_text(),
        "ssh-publickey": key.with_suffix(".pub").read_text(),
    }
    with LocalCluster(objects, env, secrets) as cluster:
        results = cluster.run(timeout=180)
        ips = {pod: cluster.ips[pod] for pod in ("exp-worker-0", "exp-worker-1")}
    launcher = results["exp-launcher-0"]
    assert launcher.returncode == 0, launcher.stdout + launcher.stderr
    ranks = sorted(
        line.split()[1:] for line in launcher.stdout.splitlines() if line.startswith("rank")
    )
    assert [r[0] for r in ranks] == ["0", "1", "2", "3"] and {r[2] for r in ranks} == {"4"}
    assert sorted(r[4] for r in ranks) == sorted(
        [ips["exp-worker-0"]] * 2 + [ips["exp-worker-1"]] * 2
    )
    for pod in ips:  # sshd stopped once the launcher ended; the worker succeeded
        assert results[pod].returncode == 0, results[pod].stderr
        assert "exp-launcher-0.exp.default.svc.cluster.local (it has ended)" in results[pod].stdout
