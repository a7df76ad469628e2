"""The lifeline between an entry point and its followers (aichor_iac/pods/lifeline.py), run for
real: an entry point's end stops every follower at once and they succeed; an entry point
killed without warning is noticed from refused redials when its Job cannot restart it; a
failed entry point that its Job will retry, or a merely slow one, stops nobody; TERM stops a
follower's command and the follower succeeds; a follower's own command keeps its status."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from waiting import linked, until

from aichor_iac import pods
from aichor_iac.k8s import shell
from aichor_iac.pods import lifeline

pytestmark = pytest.mark.slow  # (the lifeline's processes, timed as in a pod)

ENV = {"PATH": os.environ["PATH"], "AICHOR_FOLLOW_INTERVAL": "1", "AICHOR_STOP_GRACE": "5"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def entry(command: str, port: int, restarts: bool = False, linger: int = 0, **env: str):
    args = [command, "entry", str(int(restarts)), str(linger), str(port)]
    return subprocess.Popen(
        [sys.executable, "-c", pods.source("lifeline"), *args],
        env={**ENV, **env},
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def follower(
    port: int,
    command: str = "sleep 600",
    restarts: bool = False,
    seen: bool = True,
    name: str = "follower-0",
):
    args = [command, "follow", "127.0.0.1", str(port), str(int(seen)), str(int(restarts))]
    return subprocess.Popen(
        [sys.executable, "-c", pods.source("lifeline"), *args],
        env={**ENV, "HOSTNAME": name},
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def connected(port: int, timeout: float = 10) -> None:
    """Until the entry point listens."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listens on {port}")


@pytest.fixture
def processes():
    """Processes a test starts; each is killed at the end with everything it started (the
    programs start the command in a session of its own, which a pod's end would kill)."""
    started: list[subprocess.Popen] = []
    yield started
    for process in started:
        for pid in [process.pid, *descendants(process.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process.wait()


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (from /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def test_followers_stop_when_the_entry_point_ends(processes):
    port = free_port()
    processes.append(main := entry("sleep 2; exit 0", port))
    connected(port)
    processes += (followers := [follower(port) for _ in range(3)])
    assert main.wait(20) == 0
    for f in followers:
        out, _ = f.communicate(timeout=10)
        assert f.returncode == 0  # the follower succeeds: its Job completes, GPUs freed
        assert "127.0.0.1 (it has ended); stopping this replica" in out


def test_a_failed_entry_point_that_cannot_restart_ends_its_followers(processes):
    port = free_port()
    processes.append(main := entry("sleep 1; exit 3", port, restarts=False))
    connected(port)
    processes.append(f := follower(port))
    assert main.wait(20) == 3  # the entry point keeps its command's status
    out, _ = f.communicate(timeout=10)
    assert f.returncode == 0 and "(it has ended)" in out


def test_an_entry_point_killed_without_warning_is_noticed(processes):
    port = free_port()
    processes.append(main := entry("sleep 600", port))
    connected(port)
    processes.append(f := follower(port))
    until(lambda: linked(f.pid, port), timeout=30)
    for pid in [main.pid, *descendants(main.pid)]:  # every process of the entry point's pod
        os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    out, _ = f.communicate(timeout=lifeline.LOST + 15)
    assert f.returncode == 0 and "(its lifeline is gone)" in out
    assert time.monotonic() - killed >= lifeline.LOST - 1  # not at the first refusal


def test_an_entry_point_its_job_restarts_stops_nobody_until_it_ends(processes):
    port = free_port()
    processes.append(first := entry("sleep 1; exit 3", port, restarts=True))
    connected(port)
    processes.append(f := follower(port, restarts=True))
    assert first.wait(20) == 3
    time.sleep(3)  # the Job's next attempt is not there yet
    assert f.poll() is None
    processes.append(second := entry("sleep 2; exit 0", port, restarts=True))  # the retry
    assert second.wait(20) == 0
    out, _ = f.communicate(timeout=15)
    assert f.returncode == 0 and "(it has ended)" in out


def test_a_slow_entry_point_stops_nobody(processes):
    port = free_port()
    # The command is busy and silent; the lifeline answers regardless.
    processes.append(entry("python3 -c 'while True: pass'", port))
    connected(port)
    processes.append(f := follower(port))
    time.sleep(lifeline.SILENCE + 2)
    assert f.poll() is None


def test_term_stops_a_follower_at_once_and_it_succeeds(processes, tmp_path):
    port = free_port()
    processes.append(entry("sleep 600", port))
    connected(port)
    begun = tmp_path / "begun"  # (its trap is set)
    command = f"trap 'exit 9' TERM; touch {begun}; sleep 600 & wait"
    processes.append(f := follower(port, command=command))
    until(lambda: begun.exists() and linked(f.pid, port), timeout=30)
    f.send_signal(signal.SIGTERM)
    began = time.monotonic()
    assert f.wait(10) == 0
    assert time.monotonic() - began < 5  # not after a follow interval


def test_a_followers_own_end_keeps_its_status(processes):
    port = free_port()
    processes.append(entry("sleep 600", port))
    connected(port)
    processes.append(f := follower(port, command="sleep 1; exit 7"))
    assert f.wait(10) == 7


def test_a_stopped_entry_point_says_it_may_come_back(processes):
    """TERM (the pod deleted, e.g. a drained node whose pod the Job replaces): followers are
    told `failed`, so only DNS decides; the entry point ends with the command's status."""
    port = free_port()
    processes.append(main := entry("sleep 600", port))
    connected(port)
    with socket.create_connection(("127.0.0.1", port), 5) as conn:
        conn.settimeout(5)
        received = conn.recv(64)  # (once the entry point has taken the connection)
        main.send_signal(signal.SIGTERM)
        assert main.wait(10) == 143
        while chunk := conn.recv(64):
            received += chunk
    assert received.endswith(b"failed\n") and b"end" not in received


def test_a_lingering_entry_point_tells_late_followers_it_has_ended(processes):
    port = free_port()
    processes.append(main := entry("exit 0", port, linger=1))
    time.sleep(0.5)  # the command has ended; the entry point lingers (interval 1 s + 2 s)
    processes.append(f := follower(port, seen=False))
    out, _ = f.communicate(timeout=10)
    assert f.returncode == 0 and "(it has ended)" in out
    assert main.wait(10) == 0


@pytest.mark.parametrize(
    ("names", "linger", "stays"),
    [
        (["worker-0", "worker-1"], 2, False),  # both told: no need to stay
        (["worker-0"], 2, True),  # one of two told: the other may not have looked yet
        (["worker-0", "worker-0"], 2, True),  # one follower redialled is still one
    ],
)
def test_a_lingering_entry_point_ends_once_every_follower_has_been_told(
    processes, names: list[str], linger: int, stays: bool
):
    # A 20 s follow interval: staying for it (22 s) and not staying (a second) are far apart.
    port = free_port()
    processes.append(main := entry("sleep 1", port, linger=linger, AICHOR_FOLLOW_INTERVAL="20"))
    connected(port)
    followers = [follower(port, name=name) for name in names]
    processes.extend(followers)
    for f in followers:
        out, _ = f.communicate(timeout=15)
        assert f.returncode == 0 and "(it has ended)" in out
    ended = time.monotonic()
    if stays:
        with pytest.raises(subprocess.TimeoutExpired):
            main.wait(3)
    else:
        assert main.wait(5) == 0 and time.monotonic() - ended < 2


def test_the_rendered_commands_run_the_lifeline_when_python3_is_there():
    entry_command = shell.main_command("train", (), None, lifeline=True)
    follow_command = shell.main_command("train", (), "exp-master-0.exp.ns.svc.cluster.local")
    assert "python3 -S -c" in entry_command[2] and str(pods.LIFELINE_PORT) in entry_command[2]
    assert "python3 -S -c" in follow_command[2] and "aichor_lookup" in follow_command[2]
