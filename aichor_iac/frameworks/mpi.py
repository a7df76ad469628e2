"""MPI (Kubeflow MPI Operator v2 contract; `operator: mpi` extends AIchor's manifest).

`Worker` × N replicas run only sshd. The `Launcher` runs the manifest command (typically
`mpirun …`), which starts the ranks on the workers over SSH: the key pair is generated once per
stack (`Plan.secret`), the hostfile lists every worker's stable host with its slots in the
chosen implementation's syntax. Workers are Ready when sshd accepts connections; the launcher
is created only then, checks each worker itself, and the workers stop once it has ended.
"""

from __future__ import annotations

from typing import Any

from ..experiment.model import Spec
from .base import Endpoint, Env, File, Group, Mount, Names, Plan

PORT = 22
SSH_DIR = "/root/.ssh"  # the MPI Operator's default sshAuthMountPath: images run as root
CONFIG_DIR = "/etc/mpi"
HOSTFILE = f"{CONFIG_DIR}/hostfile"
SSH_ARGS = "-o ConnectionAttempts=10"
HOST_KEYS = "/tmp/aichor-sshd"  # per pod, generated at start: no host key is rendered or shared

# sshd as root with every other capability dropped: bind port 22, chroot and drop privileges
# for privilege separation, give sessions to root, signal its own children.
SSHD_CAPABILITIES = ("AUDIT_WRITE", "KILL", "NET_BIND_SERVICE", "SETGID", "SETUID", "SYS_CHROOT")

# Host keys are made per pod at start, so they cannot be pinned: trust comes from the
# generated client key and the experiment's network (see aichor:networkPolicy).
SSH_CONFIG = """\
Host *
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  LogLevel ERROR
  IdentityFile ~/.ssh/id_ed25519
"""

SSHD = f"""\
mkdir -p /run/sshd {HOST_KEYS} && chmod 700 {HOST_KEYS}
key={HOST_KEYS}/ssh_host_ed25519_key
[ -f "$key" ] || ssh-keygen -q -t ed25519 -N "" -f "$key" || exit 1
sshd=$(command -v sshd || echo /usr/sbin/sshd)
echo "aichor: sshd listening on port {PORT}"
exec "$sshd" -D -e -p {PORT} -h "$key" -o AuthorizedKeysFile={SSH_DIR}/authorized_keys \\
  -o PasswordAuthentication=no -o PermitRootLogin=prohibit-password -o UsePAM=no \\
  -o StrictModes=no"""
# StrictModes=no: Kubernetes mounts the key files in a directory sshd would find too open;
# they are read-only and owned by root.


# The workers' sshd runs as root, as the MPI Operator's does
SSHD_AS_ROOT = "MPI workers run sshd as root"


def plan(spec: Spec, names: Names) -> Plan:
    if spec.origin is not None:
        return kubeflow_plan(spec, names)
    workers, launcher = spec.types.get("Worker"), spec.types.get("Launcher")
    assert workers is not None and launcher is not None  # the manifest rules require both
    slots = spec.slots_per_worker or workers.resources.gpus or 1
    launcher_host = names.host("launcher", 0)
    # 0600: what ssh accepts for a private key and its configuration
    ssh = key_pair("ssh", SSH_DIR, "id_ed25519", 0o600, File("config", "ssh_config", "config"))
    hostfile_mount = Mount("mpi", CONFIG_DIR, (File("config", "hostfile", "hostfile"),))
    worker_group = Group(
        role="worker",
        replica_type="Worker",
        spec=workers,
        env=(Env("K_MPI_JOB_ROLE", "worker"),),
        ports=(("ssh", PORT),),
        follows=launcher_host,
        leader_first=False,
        program=SSHD,
        ready_port=PORT,
        capabilities=SSHD_CAPABILITIES,
        mounts=(ssh,),
        # Intel MPI's and MPICH's proxies call back to the launcher by its short host name
        # (the MPI Operator adds this search domain to its workers too).
        dns_searches=(names.service_host(names.service),),
    )
    launcher_group = Group(
        role="launcher",
        replica_type="Launcher",
        spec=launcher,
        env=(Env("K_MPI_JOB_ROLE", "launcher"), *launcher_env(spec.mpi_implementation, slots)),
        waits_for=(Endpoint(names.host("worker", "$i"), PORT, workers.count),),
        after=("worker",),
        mounts=(ssh, hostfile_mount),
    )
    hosts = [names.host("worker", i) for i in range(workers.count)]
    return Plan(
        framework="mpi",
        groups=(worker_group, launcher_group),
        entry_point="launcher",
        runs_as_root=SSHD_AS_ROOT,
        addresses={"launcher": launcher_host, "worker": f"{hosts[0]}:{PORT}"},
        secret="ssh",
        files={
            "hostfile": hostfile(spec.mpi_implementation, hosts, slots),
            "ssh_config": SSH_CONFIG,
        },
        outputs={"hostfile": HOSTFILE, "slots": slots * workers.count},
    )


def key_pair(name: str, path: str, key: str, mode: int, *more: File) -> Mount:
    """The generated key pair in `path` as the files `key`, `key.pub` and `authorized_keys`
    (and `more`), every replica's identity and the one key each accepts."""
    files = (
        File("secret", "ssh-privatekey", key),
        File("secret", "ssh-publickey", f"{key}.pub"),
        File("secret", "ssh-publickey", "authorized_keys"),
    )
    return Mount(name, path, (*files, *more), mode=mode)


def hostfile(implementation: str, hosts: list[str], slots: int) -> str:
    """OpenMPI's `host slots=N` lines, or Hydra's `host:N` (Intel MPI, MPICH)."""
    line = "{} slots={}" if implementation == "OpenMPI" else "{}:{}"
    return "".join(line.format(host, slots) + "\n" for host in hosts)


def launcher_env(implementation: str, slots: int) -> tuple[Env, ...]:
    """Where the hostfile is, and SSH retries while a worker's sshd comes up, per launcher."""
    if implementation == "Intel":
        return (
            Env("I_MPI_HYDRA_HOST_FILE", HOSTFILE),
            Env("I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", SSH_ARGS),
        )
    if implementation == "MPICH":
        return (Env("HYDRA_HOST_FILE", HOSTFILE), Env("HYDRA_LAUNCH_EXTRA_ARGS", SSH_ARGS))
    return (
        Env("OMPI_MCA_orte_default_hostfile", HOSTFILE),
        Env("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
        Env("OMPI_MCA_orte_set_default_slots", str(slots)),
        Env("OMPI_MCA_plm_rsh_args", SSH_ARGS),
        # The replicas run as root (SSH_DIR): let `mpirun` start without --allow-run-as-root.
        Env("OMPI_ALLOW_RUN_AS_ROOT", "1"),
        Env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"),
    )


DISCOVER_HOSTS = "discover_hosts.sh"


def kubeflow_plan(spec: Spec, names: Names) -> Plan:
    """A `kubeflow.org/v2beta1` MPIJob as the MPI Operator v2 runs it (`pkg/controller/
    mpi_job_controller.go`), host names aside: the replicas' own commands (a worker with none
    runs `/usr/sbin/sshd -De`, on whatever port its image configures), the generated key pair at
    `sshAuthMountPath` (`id_rsa`, `id_rsa.pub`, `authorized_keys`), the hostfile and
    `discover_hosts.sh` at /etc/mpi on the launcher (the launcher first with
    `runLauncherAsWorker`), `K_MPI_JOB_ROLE` everywhere, the implementation's variables and no
    GPU for a launcher that is not a worker. Workers look up the launcher's short host name in
    the experiment's domain (Intel MPI and MPICH call back to it).

    The launcher starts once every worker's host resolves (the SSH port is the image's, so it
    is not waited for: `mpirun` retries, ConnectionAttempts=10); with
    `launcherCreationPolicy: WaitForWorkersReady` its Job is created only once every worker is
    Ready. Workers stop once the launcher has ended."""
    assert spec.origin is not None
    options = spec.origin.fields
    slots = options.get("slotsPerWorker", 1)
    implementation = options.get("mpiImplementation", "OpenMPI")
    as_worker = options.get("runLauncherAsWorker", False)
    wait_ready = options.get("launcherCreationPolicy") == "WaitForWorkersReady"
    mount_path = options.get("sshAuthMountPath", SSH_DIR)
    workers = spec.types.get("Worker")
    count = workers.count if workers else 0
    launcher_host = names.host("launcher", 0)
    ssh = key_pair("ssh-auth", mount_path, "id_rsa", 0o600 if mount_path == SSH_DIR else 0o644)
    hosts = [names.host("worker", i) for i in range(count)]
    if as_worker:  # the launcher runs ranks too: first in the hostfile
        hosts.insert(0, launcher_host)
    gpu_off = (
        () if as_worker else (Env("NVIDIA_VISIBLE_DEVICES"), Env("NVIDIA_DRIVER_CAPABILITIES"))
    )
    launcher = Group(
        role="launcher",
        replica_type="Launcher",
        spec=spec.types.get("Launcher"),
        env=(
            Env("K_MPI_JOB_ROLE", "launcher"),
            *operator_launcher_env(implementation, slots),
            *gpu_off,
        ),
        waits_for=(Endpoint(names.host("worker", "$i"), None, count),) if count else (),
        after=("worker",) if count and wait_ready else (),
        mounts=(ssh, OPERATOR_CONFIG),
    )
    groups: tuple[Group, ...] = (launcher,)
    if count:
        groups = (_operator_worker(workers, names, ssh, wait_ready), launcher)
    return Plan(
        framework="mpi",
        groups=groups,
        entry_point="launcher",
        runs_as_root=SSHD_AS_ROOT,
        addresses={"launcher": launcher_host},
        secret="ssh",
        files={
            "hostfile": hostfile(implementation, hosts, slots),
            DISCOVER_HOSTS: "#!/bin/sh\n" + "".join(f"echo {h}\n" for h in hosts),
        },
        outputs={"hostfile": HOSTFILE, "slots": slots * len(hosts)},
    )


# The MPI Operator's ConfigMap on the launcher: the hostfile and discover_hosts.sh.
OPERATOR_CONFIG = Mount(
    "mpi-job-config",
    CONFIG_DIR,
    (
        File("config", "hostfile", "hostfile", 0o444),
        File("config", DISCOVER_HOSTS, DISCOVER_HOSTS, 0o555),
    ),
)


def _operator_worker(workers: Any, names: Names, ssh: Mount, wait_ready: bool) -> Group:
    """An MPIJob's workers: their own command (sshd), following the launcher."""
    return Group(
        role="worker",
        replica_type="Worker",
        spec=workers,
        env=(Env("K_MPI_JOB_ROLE", "worker"),),
        follows=names.host("launcher", 0),
        leader_first=False,
        gate="ready" if wait_ready else "",
        mounts=(ssh,),
        dns_searches=(names.service_host(names.service),),
    )


def operator_launcher_env(implementation: str, slots: int) -> tuple[Env, ...]:
    """The MPI Operator's launcher variables per implementation (`ompiEnvVars`,
    `intelEnvVars`, `mpichEnvVars`, and the slots variable), in its order."""
    if implementation == "Intel":
        return (
            Env("I_MPI_HYDRA_HOST_FILE", HOSTFILE),
            Env("I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", SSH_ARGS),
            Env("I_MPI_PERHOST", str(slots)),
        )
    if implementation == "MPICH":
        return (Env("HYDRA_HOST_FILE", HOSTFILE), Env("HYDRA_LAUNCH_EXTRA_ARGS", SSH_ARGS))
    return (
        Env("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
        Env("OMPI_MCA_orte_default_hostfile", HOSTFILE),
        Env("OMPI_MCA_plm_rsh_args", SSH_ARGS),
        Env("OMPI_MCA_orte_set_default_slots", str(slots)),
    )


def trainer_mounts(path: str) -> tuple[Mount, Mount]:
    """Kubeflow Trainer's MPI volumes (v2.3.0, `mpi.go`): the key pair at `path` for every
    `node` container (`id_rsa` 0640, `id_rsa.pub` and `authorized_keys` 0644, others 0400),
    and the hostfile at /etc/mpi (0444) for the launcher's."""
    ssh = Mount(
        "mpi-ssh-auth",
        path,
        (
            File("secret", "ssh-privatekey", "id_rsa", 0o640),
            File("secret", "ssh-publickey", "id_rsa.pub", 0o644),
            File("secret", "ssh-publickey", "authorized_keys", 0o644),
        ),
        mode=0o400,
    )
    return ssh, Mount("mpi-hostfile", CONFIG_DIR, (File("config", "hostfile", "hostfile", 0o444),))
