"""Waiting on a condition, never a fixed time: the one `until` of the suite's tests."""

from __future__ import annotations

import time
from collections.abc import Callable
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
