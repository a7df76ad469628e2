"""What this machine must have for a local run (Linux, root or user namespaces, iproute2,
util-linux), the refusal when it does not, and a user namespace's own root."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path


class LocalUnavailable(RuntimeError):
    """This machine cannot run pods locally (what it lacks is the message)."""


# A user namespace where this user is root, with mount, network and PID namespaces of its
# own: the pods' namespaces, mounts and processes live and die inside it.
UNSHARE = ["unshare", "--user", "--map-root-user", "--mount", "--net", "--pid", "--fork"]


def missing() -> list[str]:
    """What this machine lacks for a local run (nothing: it can run one)."""
    lacks = []
    if not sys.platform.startswith("linux"):
        lacks.append("Linux (network namespaces)")
    elif os.geteuid() != 0 and not _user_namespaces():
        lacks.append(
            "root or unprivileged user namespaces, for network namespaces and bind mounts "
            "(run it with sudo, or allow them: sysctl kernel.unprivileged_userns_clone=1 "
            "user.max_user_namespaces=15000; on Ubuntu 24.04 also "
            "kernel.apparmor_restrict_unprivileged_userns=0)"
        )
    lacks += [
        f"`{tool}` ({package})"
        for tool, package in (("ip", "iproute2"), ("unshare", "util-linux"), ("mount", "mount"))
        if shutil.which(tool) is None
    ]
    return lacks


def _user_namespaces() -> bool:
    try:
        return subprocess.run([*UNSHARE, "true"], capture_output=True).returncode == 0
    except FileNotFoundError:
        return False


def network_namespaces() -> bool:
    """Whether this process may make network namespaces (root): it makes one and deletes
    it, named for this call alone (two probes at once, a test process each, must not
    see each other's as a refusal)."""
    name = f"aichor-probe-{uuid.uuid4().hex[:12]}"
    try:
        made = subprocess.run(["ip", "netns", "add", name], capture_output=True).returncode == 0
    except FileNotFoundError:
        return False
    if made:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return made


def own_root(root: Path) -> None:
    """Change root to a tmpfs holding a bind mount of each entry of `/` (an empty tmpfs at
    /run, for `ip netns`): this namespace's root may then make directories at the top, where volumes
    are mounted. The tmpfs is unbindable, so that binding /var (where it is) skips it."""
    subprocess.run(["mount", "-t", "tmpfs", "aichor-root", root], check=True)
    subprocess.run(["mount", "--make-unbindable", root], check=True)
    for entry in sorted(os.scandir("/"), key=lambda e: e.name):
        target = root / entry.name
        if entry.is_symlink():
            target.symlink_to(os.readlink(entry.path))
        elif entry.name == "run":  # (a mount of its own: `ip netns` binds /run/netns)
            target.mkdir()
            subprocess.run(["mount", "-t", "tmpfs", "aichor-run", target], check=True)
        elif not entry.is_dir():
            target.touch()
            subprocess.run(["mount", "--bind", entry.path, target], check=True)
        else:
            target.mkdir()
            subprocess.run(["mount", "--rbind", entry.path, target], check=True)
    cwd = os.getcwd()
    os.chroot(root)
    os.chdir(cwd)


# The last words of a replica that lacked something of this machine's: Python's on an import
# that found nothing, setpriv's (which execs a container's command) or a shell's on a program
# not on PATH
LACKED = (
    ("module", re.compile(r"ModuleNotFoundError: No module named '([^']+)'")),
    ("program", re.compile(r"setpriv: failed to execute (\S+): No such file or directory")),
    ("program", re.compile(r"^(?:/bin/)?sh: (?:\d+: )?(\S+): not found$")),
)


def lacked(line: str) -> tuple[str, str] | None:
    """What a replica's line says it lacked: ("module", name) or ("program", name)."""
    for kind, words in LACKED:
        if found := words.search(line):
            return kind, found[1]
    return None


def install_hint(kind: str, name: str) -> str:
    """Where a replica looked for the module or program `name` (this Python environment: its
    programs come first on the pods' PATH, in place of the image's) and how to add it."""
    where = (
        f"{sys.prefix} (Python {sys.version_info.major}.{sys.version_info.minor})"
        if kind == "module"
        else f"the pods' PATH ({Path(sys.executable).parent} first, then this machine's)"
    )
    top = name.split(".")[0]
    return (
        f"aichor-iac: no {kind} named '{name}' in {where}: a local run's replicas take their "
        f"programs and Python from this environment, not the image's; install what provides "
        f"it there, e.g. {sys.executable} -m pip install {top}"
    )
