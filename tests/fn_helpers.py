"""Training functions for tests/doors/test_function.py, at module level as users write them: they
use a helper, a class, a constant, an imported module and function of this module."""

from __future__ import annotations

import functools
import json
import os
import socket
from math import sqrt
from os.path import join as joined

SCALE = 2.5
NAMES = ("a", "b")
LOCK = socket.socket  # a class from another module: imported by name


class Counter:
    start = SCALE

    def __init__(self) -> None:
        self.total = Counter.start

    def add(self, value: float) -> float:
        self.total += value * SCALE
        return self.total


def helper(value: float) -> float:
    return Counter().add(value)


def report(prefix: str = "$HOME $(id) `id`", count: int = 1) -> None:
    """Prints what it computed and what it saw, with `$` that no shell may expand."""
    result = {
        "prefix": prefix,
        "helper": helper(count),
        "names": list(NAMES),
        "rank": os.environ.get("RANK"),
        "path": joined("a", "b"),
        "json": json.dumps([1]),
        "socket": LOCK.__name__,
        "sqrt": sqrt(16),  # a builtin function of another module
    }
    print("RESULT " + json.dumps(result, sort_keys=True), flush=True)


OPEN = open(os.devnull)  # noqa: SIM115 (a live object, on purpose)


def uses_a_live_object() -> None:
    OPEN.read()


def make_closure():
    secret = 3

    def inner() -> int:
        return secret

    return inner


SHOUT = functools.partial(print, "!")  # a callable that is no module's name


def uses_a_partial() -> None:
    SHOUT("x")
