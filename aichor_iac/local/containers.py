"""A container as local processes: its command in the pod's network namespace, with a host
name, PID namespace, /tmp and working directory of its own, its volumes bind-mounted and its
security context's privileges dropped; its output in files as it is printed; the kubelet's
signals at its end."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from shlex import quote as q
from typing import Any

from .host import install_hint, lacked

# `unshare` waits for the container's first process and exits as it did; if `unshare` is
# killed, so is the container.
CONTAINER = ["unshare", "--uts", "--pid", "--fork", "--mount-proc", "--kill-child=KILL"]

Mount = tuple[str, str, bool]  # (source, target, read-only)
GRACE_SECONDS = 30  # a pod's terminationGracePeriodSeconds by default
# The end of a container's set-up (a shell of ours: host name, mounts, working directory),
# which then becomes the container's command (through setpriv, which drops privileges)
SETUP_END = 'exec "$@"'


def launch(
    ns: str,
    pod: str,
    name: str,
    command: list[str],
    env: dict[str, str],
    mounts: list[Mount],
    security: dict[str, Any],
    root: Path,
    workdir: Path,
) -> subprocess.Popen:
    """Start container `name` of `pod` (whose files are under `root / pod`); its output,
    stdout and stderr as they come, goes to `<name>.out` there."""
    private = root / pod / "tmp"
    # What the test itself runs from (a checkout or virtualenv under /tmp) stays visible
    # in the pod's private /tmp, as an image's own files would be.
    tmp = [(f"/tmp/{top}", str(private / top), False) for top in _under_tmp(workdir)]
    tmp += [(str(private), "/tmp", False)]
    # A host name of its own (a UTS namespace), as a pod has: gethostname() is the pod's;
    # processes of its own (a PID namespace, as a container has): `ps`, `pkill` or
    # `ray stop` see this container's alone, and its command is its first process; the
    # working directory as its image's copy (an overlay: what it writes stays its own).
    own = _own_copy(root / pod / "image" / name, workdir)
    setup = f"hostname {pod} && {_binds(tmp)} && {own} && {_binds(mounts)}"
    argv = ["ip", "netns", "exec", ns, *CONTAINER]
    argv += ["/bin/sh", "-c", f"{setup} && {SETUP_END}"]
    argv += ["pod", *_privileges(security), *command]
    out = root / pod / f"{name}.out"
    with out.open("w") as printed:  # (both streams, in the order written, as a terminal shows)
        process = subprocess.Popen(argv, env=env, stdout=printed, stderr=printed, cwd=workdir)
    process.printed = out  # type: ignore[attr-defined]
    return process


def _own_copy(own: Path, workdir: Path) -> str:
    """Shell that lays an overlay (its layers under `own`) over the working directory, so
    that the container reads the manifest's directory (the image built from it) and keeps
    what it writes to itself, as each container on a cluster has its own copy of its image;
    then goes there. Where no overlay can be made, the directory is shared (and it says so)."""
    shared = "aichor: the working directory is shared with the other pods (no overlay)"
    if workdir.resolve() == Path("/"):
        return f"echo {q(shared)} >&2 && cd /"
    # (`own` has no comma or colon: safe in -o)
    lower, upper, work = (q(str(own / part)) for part in ("lower", "upper", "work"))
    options = q(f"lowerdir={own / 'lower'},upperdir={own / 'upper'},workdir={own / 'work'}")
    overlay = (
        f"mkdir -p {lower} {upper} {work} && mount --bind {q(str(workdir))} {lower} && "
        f"mount -t overlay overlay -o {options} {q(str(workdir))}"
    )
    return f"{{ {overlay} || echo {q(shared)} >&2; }} && cd {q(str(workdir))}"


def _binds(mounts: list[Mount]) -> str:
    """Shell that bind-mounts each (source, target, read-only) in turn."""
    return " && ".join(
        [
            f"mkdir -p {q(target)} && mount --rbind {q(source)} {q(target)}"
            + (f" && mount -o remount,bind,ro {q(target)}" if read_only else "")
            for source, target, read_only in mounts
        ]
        or ["true"]
    )


def _under_tmp(workdir: Path) -> list[str]:
    """The top folders under /tmp that the pods need to see (a pod's /tmp is its own): the
    working directory and this process's Python, as an image holds its own files."""
    paths = [workdir, Path.cwd(), Path(sys.prefix), Path(sys.executable).resolve()]
    parts = [q.resolve().parts for q in paths]
    return sorted({p[2] for p in parts if p[:2] == ("/", "tmp") and len(p) > 2})


def _privileges(security: dict[str, Any]) -> list[str]:
    """What the container runtime does with a security context: capabilities outside
    `add` are dropped (from the bounding set, so root has them no more) and, without
    privilege escalation, no_new_privs is set. Needs util-linux's setpriv."""
    capabilities = security.get("capabilities", {})
    if capabilities.get("drop") != ["ALL"] or not shutil.which("setpriv"):
        return []
    keep = "".join(f",+{c.lower()}" for c in capabilities.get("add", []))
    command = ["setpriv", f"--bounding-set=-all{keep}", f"--inh-caps=-all{keep}"]
    if security.get("allowPrivilegeEscalation") is False:
        command.append("--no-new-privs")
    return command


def wait(process: subprocess.Popen) -> subprocess.CompletedProcess:
    """A container's end, however long it runs (leaving the cluster kills what still
    runs: the caller's timeout bounds a run): its exit code and, as its `stdout`, what it
    printed on both streams in the order written (as the kubelet's log keeps them)."""
    code = process.wait()
    out = process.printed  # type: ignore[attr-defined]
    # (gone when the cluster was left while this pod still ran)
    text = out.read_text(errors="replace") if out.exists() else ""
    # a container killed by a signal as the kubelet reports it: 128 + the signal (137: KILL)
    return subprocess.CompletedProcess(process.args, 128 - code if code < 0 else code, text, "")


def started(process: subprocess.Popen, timeout: float = 10.0) -> None:
    """Wait until the container has started: its first process (the child of its `unshare`)
    runs the container's command, as the kubelet starts the next container once a native
    sidecar has started. Before that it is `unshare` forking, our set-up's shell or setpriv,
    which, as the first process of its PID namespace, would drop a TERM it has no handler
    for: a sidecar stopped then ran on until the grace period's KILL, its last work lost.
    At most `timeout` seconds; at once if it has ended."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        with contextlib.suppress(OSError, IndexError):
            argv = Path(f"/proc/{_children(process)[0]}/cmdline").read_bytes().split(b"\0")
            setting_up = argv[1:2] == [b"-c"] and argv[2].endswith(SETUP_END.encode())
            if argv[0] not in (b"unshare", b"setpriv") and not setting_up:
                return
        time.sleep(0.01)


def first_process(process: subprocess.Popen) -> int | None:
    """The container's first process (inside its namespaces), while it runs."""
    if process.poll() is not None:
        return None
    with contextlib.suppress(OSError, IndexError):
        return _children(process)[0]
    return None


def _children(process: subprocess.Popen) -> list[int]:
    return [
        int(p) for p in Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
    ]


def stop(running: list[subprocess.Popen], grace: float) -> None:
    """What the kubelet does to a pod's containers it stops (native sidecars once the main
    container has ended, a deleted pod's): TERM to each container's first process, KILL
    once the pod's grace period is over. A first process that does not handle TERM is
    killed at once: the first process of a PID namespace never gets a signal it does not
    handle (pid_namespaces(7)), so the grace period could do nothing for it."""
    for process in running:
        _signal_init(process, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for process in running:
        try:
            process.wait(max(0.0, deadline - time.monotonic()) if _handles_term(process) else 0)
        except subprocess.TimeoutExpired:
            process.kill()  # (its `unshare`, which KILLs the container's first process with it)
            process.wait()


def _handles_term(process: subprocess.Popen) -> bool:
    """Whether a container's first process has a handler for TERM (`SigCgt` in /proc)."""
    with contextlib.suppress(OSError, IndexError, ValueError, StopIteration):
        status = Path(f"/proc/{_children(process)[0]}/status").read_text()
        caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
        return bool(int(caught.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    return False


def _signal_init(process: subprocess.Popen, number: int) -> None:
    """Signal a container's first process (the child of its `unshare`), as the kubelet does;
    being the first process of its PID namespace, it ignores TERM unless it handles it."""
    with contextlib.suppress(OSError, IndexError):
        os.kill(_children(process)[0], number)


def tail(
    process: subprocess.Popen,
    prefix: str,
    on_line: Callable[[str, str], None] | None,
    stamped: Path,
) -> None:
    """Hand each line a container prints to `on_line` as it comes (both streams, in the order
    written), and append it to `stamped` after the time it came, as the kubelet keeps a
    container's log (`<RFC 3339 time> <line>`, read by the API's pod logs). A container that
    failed for a Python module or a program this environment lacks gets a last line to
    `on_line` saying so (not in its log: the pod did not print it)."""
    offset, partial, missing = 0, b"", None
    while True:
        ended = process.poll() is not None
        try:
            with process.printed.open("rb") as stream:  # type: ignore[attr-defined]
                stream.seek(offset)
                data = stream.read()
        except FileNotFoundError:  # the cluster was left
            return
        offset += len(data)
        *lines, partial = (partial + data).split(b"\n")  # (bytes: a character may be cut)
        for line in [*lines, *([partial] if ended and partial else [])]:
            text = line.decode(errors="replace")
            try:
                with stamped.open("a") as log:
                    log.write(f"{rfc3339(time.time())} {text}\n")
                if on_line is not None:
                    on_line(prefix, latest_state(text))
            except OSError:  # where lines go is gone (a closed pipe, the cluster left)
                return
            missing = lacked(text) or missing
        if ended:
            if missing and process.returncode and on_line is not None:
                with contextlib.suppress(OSError):
                    on_line(prefix, install_hint(*missing))
            return
        time.sleep(0.1)


def latest_state(line: str) -> str:
    """What a terminal would show of a line: a progress bar's (tqdm's, as transformers draws
    it) last state, not every state it redrew after a carriage return. The log keeps it all,
    as the kubelet's does."""
    return line.rstrip("\r").rsplit("\r", 1)[-1]


def rfc3339(when: float) -> str:
    """A time as Kubernetes writes it with nanoseconds (`2026-11-26T15:04:05.123456789Z`)."""
    seconds = int(when)
    nanos = int((when - seconds) * 1e9)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{nanos:09d}Z"
