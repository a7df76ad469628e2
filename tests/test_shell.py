"""The shell programs around the user's command, run for real with /bin/sh: the bounded TCP
wait of the init container and the follower that ends a replica once the entry point is gone."""

from __future__ import annotations

import socket
import subprocess
import threading
import time

import pytest

from aichor_iac.frameworks import Endpoint
from aichor_iac.k8s import shell

GONE_HOST = "aichor-entry-point.invalid"


def sh(script: str, *args: str, env: dict | None = None, timeout: float = 30):
    import os

    return subprocess.run(
        ["/bin/sh", "-c", script, "aichor", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={"PATH": os.environ["PATH"], **(env or {})},
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_wait_returns_once_the_peer_accepts_connections():
    port = free_port()
    server = socket.socket()

    def listen_later():
        time.sleep(3)
        server.bind(("127.0.0.1", port))
        server.listen()

    threading.Thread(target=listen_later, daemon=True).start()
    try:
        result = sh(shell.wait_script(Endpoint("127.0.0.1", port), 60))
    finally:
        server.close()
    assert result.returncode == 0, result.stderr
    assert f"aichor: waiting for 127.0.0.1:{port} to accept connections" in result.stdout
    assert result.stdout.strip().endswith(f"aichor: 127.0.0.1:{port} accepts connections")


def test_wait_gives_up_after_its_deadline():
    port = free_port()
    result = sh(shell.wait_script(Endpoint("127.0.0.1", port), 3))
    assert result.returncode == 1
    assert "gave up after" in result.stderr and f"127.0.0.1:{port}" in result.stderr


def test_a_replica_never_waits_for_itself():
    script = shell.wait_script(Endpoint("exp-worker-0.exp.default.svc.cluster.local", 1), 3)
    result = sh(script, env={"HOSTNAME": "exp-worker-0"})
    assert result.returncode == 0
    assert "is this replica, not waiting" in result.stdout


def _name_is_unknown() -> bool:
    try:
        socket.getaddrinfo(GONE_HOST, None)
    except socket.gaierror as error:
        return error.errno == socket.EAI_NONAME
    return False


def test_follower_keeps_the_command_while_the_entry_point_exists():
    command = shell.main_command("sleep 1; exit 7", (), "localhost")
    result = sh(
        command[2].replace("$$", "$"), "sleep 1; exit 7", env={"AICHOR_FOLLOW_INTERVAL": "0.2"}
    )
    assert result.returncode == 7  # the command's own status


@pytest.mark.skipif(
    not _name_is_unknown(), reason=f"this resolver does not answer NXDOMAIN for {GONE_HOST}"
)
def test_follower_stops_the_command_once_the_entry_point_is_gone():
    command = shell.main_command("sleep 600", (), GONE_HOST)
    started = time.monotonic()
    result = sh(
        command[2].replace("$$", "$"),
        "sleep 600",
        env={"AICHOR_FOLLOW_INTERVAL": "0.2", "AICHOR_FOLLOW_MISSES": "3"},
    )
    assert result.returncode == 0  # the replica succeeds: its Job completes, GPUs are released
    assert f"aichor: {GONE_HOST} has ended; stopping this replica" in result.stdout
    assert time.monotonic() - started < 20


def test_rank_zero_does_not_follow_itself():
    host = "exp-worker-0.exp.default.svc.cluster.local"
    command = shell.main_command("exit 0", (), host)
    result = sh(command[2].replace("$$", "$"), "exit 0", env={"HOSTNAME": "exp-worker-0"})
    assert result.returncode == 0 and "has ended" not in result.stdout
