"""A run without root (`aichor-iac run --local` as a user): the rendered run in a child
process inside a user namespace of its own (root there), the run on its standard input, its
lines, progress and outcomes back on its standard output, a JSON line each; a growing run's
Batches sent on as the child tells each outcome."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

from . import egress, host
from .api import forwarded
from .driving import Run, announcing, unannounced
from .growth import Batch, Growth
from .host import UNSHARE, LocalUnavailable
from .parts import Outcome, Part, first_failure


def in_user_namespace(
    run: Run,
    on_line: Callable[[str, str], None] | None,
    on_progress: Callable[[Mapping[str, str]], None] | None,
    growth: Growth | None = None,
) -> dict[str, Outcome]:
    """Without root: the run in a child process inside a user namespace (`child`), the
    rendered experiment on its standard input, its lines and progress back as JSON lines. The
    child leaving (or being killed) ends every pod with it: they are in its PID namespace.
    A growing run's child tells each outcome, and gets its Batch back on its standard input,
    a JSON line each."""
    root = tempfile.mkdtemp(prefix="aichor-root-", dir="/var/tmp")  # the child's own root
    sockets = tempfile.mkdtemp(prefix="aichor-api-", dir="/var/tmp")  # (seen from both sides)
    run = dataclasses.replace(run, api_socket=os.path.join(sockets, "api.sock"))
    code = f"from aichor_iac.local.namespaced import child; child({root!r})"
    # --kill-child: a TERM to the child if `unshare` is ended, so that it leaves cleanly
    argv = [*UNSHARE, "--mount-proc", "--kill-child=TERM", sys.executable, "-c", code]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, root, ignore_errors=True)  # (the mount was the child's)
        stack.callback(shutil.rmtree, sockets, ignore_errors=True)
        if egress.addresses(run.objects):  # (the stores, reached from this side)
            env[egress.EGRESS] = stack.enter_context(egress.served(os.path.join(sockets, "egress")))
        announced: Callable[[list[Part]], None] = unannounced
        if run.announced and run.api_socket is not None:
            url = stack.enter_context(forwarded(run.api_socket))
            announced = stack.enter_context(announcing(run, url))
        child = stack.enter_context(
            subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
            )
        )
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write(json.dumps(dataclasses.asdict(run)) + "\n")
        child.stdin.flush()
        if growth is None:
            child.stdin.close()
        outcomes: dict[str, Outcome] = {}
        try:
            for message in child.stdout:
                kind, *value = json.loads(message)
                if kind == "line" and on_line is not None:
                    on_line(*value)
                elif kind == "progress" and on_progress is not None:
                    on_progress(*value)
                if growth is not None and kind in ("decided", "line"):
                    _answered(growth, child.stdin, announced, kind, value)
                if kind == "outcomes":
                    outcomes = {name: (code, pod) for name, code, pod in value[0]}
                elif kind == "unavailable":
                    raise LocalUnavailable(*value)
        finally:
            if child.poll() is None:
                child.terminate()
            status = child.wait()
    # (a child killed before it could tell: its status, for every experiment)
    return outcomes or {p.name: (status, None) for p in run.parts}


def _answered(
    growth: Growth,
    to_child: IO[str],
    announced: Callable[[list[Part]], None],
    kind: str,
    value: list[Any],
) -> None:
    """A growing run's child told: each decided outcome answered with its Batch."""
    if kind != "decided":
        return
    batch = growth.batch({name: (code, pod) for name, code, pod in value[0]})
    announced(batch.parts)
    to_child.write(json.dumps(["batch", dataclasses.asdict(batch)]) + "\n")
    to_child.flush()


def child(root: str) -> None:
    """The run inside the user namespace (root there): a root directory of its own, so that a
    volume can be mounted where no directory exists yet (`/aichor/function`), then the run."""
    run = Run(**json.loads(sys.stdin.readline()))
    lock = threading.Lock()

    def send(*message: Any) -> None:
        with lock:
            print(json.dumps(message), flush=True)

    if run.growing:  # (each outcome told; each Batch back, a line of the standard input)
        run.asking(lambda found: send("decided", [[n, c, p] for n, (c, p) in found.items()]))
        batches = threading.Thread(target=_batches, args=(run,), daemon=True)
        batches.start()

    host.own_root(Path(root))
    try:
        outcomes = run.drive(
            lambda pod, line: send("line", pod, line),
            lambda states: send("progress", states),
            private=True,
        )
        send("outcomes", [[name, code, pod] for name, (code, pod) in outcomes.items()])
        status = first_failure(outcomes)[0]
    except LocalUnavailable as error:
        send("unavailable", str(error))
        status = 2
    sys.exit(status)


def _batches(run: Run) -> None:
    """A growing run's Batches, as its parent sends them."""
    for line in sys.stdin:
        _, value = json.loads(line)
        run.more.put(Batch(**value))
