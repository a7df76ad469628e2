"""Waiting on a condition, never a fixed time: the one `until` of the suite's tests."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def until(check: Callable[[], Any], timeout: float = 60, every: float = 0.2) -> Any:
    """What `check` gives once it gives something true, polled `every` seconds; an
    AssertionError if it gives none within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(every)
    raise AssertionError(f"not within {timeout} s")


def linked(pid: int, port: int) -> bool:
    """Whether process `pid` holds an established TCP connection to `port` on this machine
    (from /proc: its sockets' inodes, found in the kernel's connection tables)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            if (target := os.readlink(fd)).startswith("socket:["):
                inodes.add(target[8:-1])
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()  # (sl, local, remote, state, ..., inode at 9)
            remote_port, state = int(fields[2].rsplit(":", 1)[1], 16), fields[3]
            if remote_port == port and state == "01" and fields[9] in inodes:
                return True
    return False
