"""The shell programs around the user's command, run for real with /bin/sh: the bounded TCP
wait of the init container and the follower that ends a replica once the entry point is gone."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time

import pytest
from waiting import until

from aichor_iac.frameworks import Endpoint
from aichor_iac.k8s import shell

GONE_HOST = "aichor-entry-point.invalid"


def sh(script: str, *args: str, env: dict | None = None, timeout: float = 30):
    return subprocess.run(
        ["/bin/sh", "-c", script, "aichor", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={"PATH": os.environ["PATH"], **(env or {})},
    )


@pytest.fixture(params=["python3", "no python3"])
def image_path(request, tmp_path) -> str:
    """PATH of an image with python3 (pods/wait.py), or of one without it (the shell loop with
    bash's /dev/tcp, nc or getent)."""
    if request.param == "python3":
        return os.environ["PATH"]
    tools = "sh bash date sleep timeout cat getent nc setsid mount unshare"
    for tool in tools.split():
        if found := shutil.which(tool):
            (tmp_path / tool).symlink_to(found)
    return str(tmp_path)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait(targets: tuple[Endpoint, ...], deadline: int, **env: str) -> subprocess.CompletedProcess:
    """Run a replica's command that waits for `targets`, then says it runs."""
    command = shell.main_command(RAN, (), None, waits=targets, deadline_seconds=deadline)
    return sh(command[2].replace("$$", "$"), RAN, env=env)


RAN = "echo the command runs"


def test_wait_returns_once_the_peer_accepts_connections(image_path):
    port = free_port()
    server = socket.socket()

    def listen_later():
        time.sleep(3)
        server.bind(("127.0.0.1", port))
        server.listen()

    threading.Thread(target=listen_later, daemon=True).start()
    try:
        result = wait((Endpoint("127.0.0.1", port),), 60, PATH=image_path)
    finally:
        server.close()
    assert result.returncode == 0, result.stderr
    assert f"aichor: waiting for 127.0.0.1:{port} to accept connections" in result.stdout
    last = result.stdout.strip().splitlines()[-2:]
    assert last == [f"aichor: 127.0.0.1:{port} accepts connections", "the command runs"]


def test_wait_for_every_replica_of_a_group(image_path):
    port = free_port()
    with socket.socket() as server:
        server.bind(("0.0.0.0", port))  # 127.0.0.1, 127.0.1.1, 127.0.2.1: all loopback
        server.listen()
        result = wait((Endpoint("127.0.$i.1", port, replicas=3),), 20, PATH=image_path)
    assert result.returncode == 0, result.stderr
    done = [line for line in result.stdout.splitlines() if "accepts connections" in line]
    assert done == [f"aichor: 127.0.{i}.1:{port} accepts connections" for i in range(3)]


def test_wait_gives_up_after_its_deadline(image_path):
    port = free_port()
    result = wait((Endpoint("127.0.0.1", port),), 3, PATH=image_path)
    assert result.returncode == 1 and "the command runs" not in result.stdout
    assert f"waiting for 127.0.0.1:{port} to accept connections" in result.stderr


def test_a_replica_never_waits_for_itself(image_path):
    me = (Endpoint("exp-worker-0.exp.default.svc.cluster.local", 1),)
    result = wait(me, 3, HOSTNAME="exp-worker-0", PATH=image_path)
    assert result.returncode == 0
    assert "is this replica, not waiting" in result.stdout and "the command runs" in result.stdout


def _name_is_unknown() -> bool:
    try:
        socket.getaddrinfo(GONE_HOST, None)
    except socket.gaierror as error:
        return error.errno == socket.EAI_NONAME
    return False


def test_follower_keeps_the_command_while_the_entry_point_exists(image_path):
    command = shell.main_command("sleep 1; exit 7", (), "localhost")
    result = sh(
        command[2].replace("$$", "$"),
        "sleep 1; exit 7",
        env={"AICHOR_FOLLOW_INTERVAL": "0.2", "PATH": image_path},
    )
    assert result.returncode == 7  # the command's own status


def test_wait_for_a_host_to_resolve(image_path):
    # Followers without a port to wait for (e.g. TF parameter servers) wait for the entry
    # point's host to exist, so that its disappearance later means it has ended.
    ok = wait((Endpoint("localhost"),), 5, PATH=image_path)
    assert ok.returncode == 0
    assert ok.stdout.strip().splitlines()[-2:] == ["aichor: localhost resolves", "the command runs"]
    if _name_is_unknown():
        missing = wait((Endpoint(GONE_HOST),), 3, PATH=image_path)
        assert missing.returncode == 1 and "the command runs" not in missing.stdout
        assert (
            "gave up after" in missing.stderr
            and f"waiting for {GONE_HOST} to resolve" in missing.stderr
        )


def _private_mounts() -> bool:
    return subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(
    not _name_is_unknown(), reason=f"the resolver does not answer NXDOMAIN for {GONE_HOST}"
)
@pytest.mark.skipif(
    not _private_mounts(), reason="needs `unshare --mount` (root) for a private /etc/hosts"
)
def test_follower_stops_the_command_once_the_entry_point_is_gone(tmp_path, image_path):
    """The entry point's host resolves (from a private /etc/hosts), then disappears as it does
    from the cluster DNS when its pod ends: the command is stopped and the replica succeeds."""

    hosts = tmp_path / "hosts"
    hosts.write_text(f"127.0.0.1 localhost\n10.1.2.3 {GONE_HOST}\n")
    script = shell.main_command("sleep 600", (), GONE_HOST)[2].replace("$$", "$")
    wrapper = f'mount --bind {hosts} /etc/hosts && exec /bin/sh -c "$0" aichor "$1"'
    process = subprocess.Popen(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "/bin/sh",
            "-c",
            wrapper,
            script,
            "sleep 600",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"PATH": image_path, "AICHOR_FOLLOW_INTERVAL": "0.2"},
    )
    time.sleep(2)
    assert process.poll() is None  # resolvable: the command keeps running
    with hosts.open("r+") as f:  # same inode, so the bind mount sees the change
        f.truncate(0)
        f.write("127.0.0.1 localhost\n")
    out, err = process.communicate(timeout=20)
    assert process.returncode == 0, err  # the replica succeeds: its Job completes, GPUs freed
    assert f"aichor: {GONE_HOST} (its host has left DNS); stopping this replica" in out


def test_rank_zero_does_not_follow_itself(image_path):
    host = "exp-worker-0.exp.default.svc.cluster.local"
    command = shell.main_command("exit 3", (), host)
    env = {"HOSTNAME": "exp-worker-0", "PATH": image_path}
    result = sh(command[2].replace("$$", "$"), "exit 3", env=env)
    assert result.returncode == 3 and "stopping" not in result.stdout


def test_an_entry_point_lingers_one_follow_interval_with_its_own_status():
    # Followers created before the entry point (Ray's head and pools, MPI's workers) count it
    # gone only once they have seen it: an entry point that ends at once stays in DNS long
    # enough for one lookup of each of them (a launcher that failed at once left MPI workers
    # running forever).
    script = shell.main_command("exit 7", (), None, linger=1)[2].replace("$$", "$")
    began = time.monotonic()
    result = sh(script, "exit 7", env={"AICHOR_FOLLOW_INTERVAL": "1"})
    assert result.returncode == 7
    assert 3 <= time.monotonic() - began < 10  # the interval, then 2 s more


def test_a_stopped_entry_point_does_not_linger():
    import os
    import signal

    script = shell.main_command("sleep 607", (), None, linger=1)[2].replace("$$", "$")
    process = subprocess.Popen(
        ["/bin/sh", "-c", script, "aichor", "sleep 607"],
        env={"PATH": os.environ["PATH"], "AICHOR_FOLLOW_INTERVAL": "60"},
    )
    running = ["pgrep", "-f", "sleep 607"]

    def begun() -> bool:  # (the command runs beside the wrapper: the wrapper's trap is set)
        found = subprocess.run(running, capture_output=True, text=True).stdout.split()
        return bool(set(map(int, found)) - {process.pid})

    until(begun, timeout=30)
    began = time.monotonic()
    process.send_signal(signal.SIGTERM)  # the pod deleted: pass it on, end without lingering
    assert process.wait(10) == 143 and time.monotonic() - began < 5
    assert subprocess.run(running, capture_output=True).returncode == 1
