"""TensorBoard's log shipping, run for real on loopback: the receiver beside TensorBoard and
the replicas' shipper (`aichor_iac.k8s.tensorboard`), as the rendered containers run them."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from waiting import until

from aichor_iac import pods
from aichor_iac.k8s.tensorboard import _SHIP
from aichor_iac.local import containers

RECEIVER, SHIPPER = pods.source("tensorboard_receiver"), pods.source("tensorboard_shipper")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def receiver(tmp_path):
    """(URL, directory) of a running receiver."""
    root, port = tmp_path / "volume", free_port()
    root.mkdir()
    process = subprocess.Popen([sys.executable, "-c", RECEIVER, str(root), str(port)])
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            break
        except OSError:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    yield url, root
    process.kill()
    process.wait()


def put(url: str, path: str, data: bytes, offset: int) -> tuple[int, str]:
    request = urllib.request.Request(
        f"{url}/{path}", data=data, method="PUT", headers={"X-Offset": str(offset)}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_receiver_appends_at_offsets_and_resends_are_harmless(receiver):
    url, root = receiver
    assert put(url, "run/events", b"abc", 0) == (200, "3")
    assert put(url, "run/events", b"abc", 0) == (200, "3")  # a resend: nothing twice
    assert put(url, "run/events", b"cdef", 2) == (200, "6")  # overlaps: only the new bytes
    assert put(url, "run/events", b"zz", 9) == (409, "6")  # a gap: the size it has
    assert (root / "run" / "events").read_bytes() == b"abcdef"


@pytest.mark.parametrize("path", ["..%2Fescaped", "run/..%2F..%2Fescaped", "", "run/.."])
def test_receiver_keeps_every_file_inside_its_directory(receiver, path):
    url, root = receiver
    assert put(url, path, b"x", 0)[0] == 400
    assert not (root.parent / "escaped").exists()
    assert list(root.rglob("*")) == []


def test_receiver_stores_absolute_paths_inside_its_directory(receiver):
    url, root = receiver
    assert put(url, "%2Fetc%2Fpasswd", b"x", 0) == (200, "1")
    assert (root / "etc" / "passwd").read_bytes() == b"x"


def ship(directory: Path, url: str) -> subprocess.Popen:
    """A running shipper, once it would heed TERM (as a sidecar that has started)."""
    process = subprocess.Popen(
        [sys.executable, "-c", SHIPPER, str(directory), url, "0.2", "10"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout.readline().startswith("aichor: shipping TensorBoard logs from")
    return process


def stop(process: subprocess.Popen) -> str:
    process.send_signal(signal.SIGTERM)  # what the kubelet does once the main container ends
    out, _ = process.communicate(timeout=30)
    assert process.returncode == 0, out
    return out


def test_shipper_sends_what_grows_and_the_rest_when_stopped(receiver, tmp_path):
    url, root = receiver
    local = tmp_path / "pod-a"
    (local / "train").mkdir(parents=True)
    first = local / "train" / "events.1"
    first.write_bytes(b"step0;")
    shipper = ship(local, url)
    deadline = time.monotonic() + 10
    while not (root / "train" / "events.1").exists():  # shipped while the replica runs
        assert time.monotonic() < deadline
        time.sleep(0.05)
    with first.open("ab") as log:
        log.write(b"step1;" * 1000)
    (local / "eval.txt").write_text("last words")
    assert "shipped" in stop(shipper)
    assert (root / "train" / "events.1").read_bytes() == first.read_bytes()
    assert (root / "eval.txt").read_text() == "last words"

    # The replica restarts: a new pod, an empty local directory, new event files. What the
    # first pod shipped stays.
    again = tmp_path / "pod-b"
    (again / "train").mkdir(parents=True)
    (again / "train" / "events.2").write_bytes(b"resumed")
    stop(ship(again, url))
    assert (root / "train" / "events.1").read_bytes() == first.read_bytes()
    assert (root / "train" / "events.2").read_bytes() == b"resumed"


def test_shipper_waits_for_a_receiver_that_starts_late(tmp_path):
    port = free_port()
    local, volume = tmp_path / "pod", tmp_path / "volume"
    local.mkdir()
    volume.mkdir()
    (local / "events").write_bytes(b"early")
    shipper = ship(local, f"http://127.0.0.1:{port}")
    # It has found no receiver (however loaded this machine is) before it is stopped, and the
    # receiver starts only after that.
    assert "not reachable" in shipper.stdout.readline()
    shipper.send_signal(signal.SIGTERM)  # stopped before TensorBoard is up
    late = subprocess.Popen([sys.executable, "-c", RECEIVER, str(volume), str(port)])
    try:
        out, _ = shipper.communicate(timeout=30)
        assert shipper.returncode == 0 and "shipped 5 bytes" in out
        assert (volume / "events").read_bytes() == b"early"
    finally:
        late.kill()
        late.wait()


@pytest.mark.skipif(
    subprocess.run(["unshare", "--pid", "--fork", "true"], capture_output=True).returncode != 0,
    reason="needs a PID namespace (root)",
)
def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _handles_term(pid: int) -> bool:
    """Whether process `pid` has a handler for TERM (its status' caught-signals mask)."""
    status = Path(f"/proc/{pid}/status").read_text()
    caught = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught, 16) & (1 << (signal.SIGTERM - 1)))


@pytest.mark.parametrize("delay", [0.0, 0.02, 0.2])
def test_a_sidecar_stopped_as_it_starts_still_ships_its_logs(receiver, tmp_path, delay):
    """The sidecar's command as a container's first process (PID 1 of its PID namespace),
    which drops a TERM it has no handler for: TERM sent at once, or while Python starts, is
    heeded all the same. Before, the shipper ran on until the grace period's KILL, and the
    last logs were lost (issue 50: `unshare: sigprocmask unblock failed`)."""
    url, root = receiver
    (local := tmp_path / "pod").mkdir()
    (local / "events").write_text("the only step")
    sidecar = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--kill-child", "/bin/sh", "-c", _SHIP, "ship",
         SHIPPER, str(local), url, "5", "10"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    containers.started(sidecar)  # (as the local kubelet: the command runs, then the next)
    # TERM once the shell can take it (its first line: before it, PID 1 drops it, as any
    # container's first process without a handler), then `delay` later: while Python starts
    first = until(lambda: _children(sidecar.pid), timeout=10, every=0.001)[0]
    until(lambda: _handles_term(first), timeout=10, every=0.001)
    time.sleep(delay)
    os.kill(first, signal.SIGTERM)  # the container's first process, as the kubelet
    out, _ = sidecar.communicate(timeout=15)  # (before: no end until a KILL)
    assert sidecar.returncode == 0, out
    assert "shipped 13 bytes of logs in 1 files" in out
    assert (root / "events").read_text() == "the only step"
