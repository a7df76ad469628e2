"""Test helpers on top of `aichor_iac.local` (the local cluster and Kubernetes' expansion of
pod templates): running one container's command here, as if its peers were up."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from typing import Any

import pytest

from aichor_iac.k8s import shell
from aichor_iac.local import (  # noqa: F401  (what the tests import from here)
    KUEUE_QUEUE,
    LocalCluster,
    container_argv,
    container_env,
    container_of,
    expand,
    gang_of,
)
from aichor_iac.local.prepare import base_env

# Real Ray clusters run one at a time (`make test` runs the suite with --dist loadgroup): Ray
# gives a starting node 30 s to register, which two clusters starting at once on two cores
# (a dozen Python processes each) made it miss.
ONE_RAY_CLUSTER_AT_A_TIME = pytest.mark.xdist_group("ray")
# Pods on the local cluster: only where it can be made (root, for `ip netns`). A test skipped
# for want of `ip netns` runs real processes: it is slow (conftest.py marks it so).
NEEDS_CLUSTER = pytest.mark.skipif(
    not LocalCluster.available(), reason="needs `ip netns` (root) for the local cluster"
)


def needs(module: str) -> pytest.MarkDecorator:
    """Skipped unless `module` is installed, found without importing it: a module-level
    `importorskip("torch")` imports torch (or mlflow) in every test process, seconds each."""
    missing = importlib.util.find_spec(module) is None
    return pytest.mark.skipif(missing, reason=f"needs {module} (make test installs it)")


def pod_env(**extra: str) -> dict[str, str]:
    """What the local cluster's pods start from, as in `run --local` (`base_env`: this
    Python environment's programs first on PATH), with a test's own variables."""
    return {**base_env(), **extra}


def run_container(
    job: dict[str, Any],
    index: int,
    container: str | None = None,
    timeout: float = 60,
    extra_env: dict[str, str] | None = None,
    entrypoint: list[str] | None = None,
) -> subprocess.CompletedProcess:
    """Run the container's command (or, where it gives none, `entrypoint`, its image's) here,
    with the env Kubernetes would give it, as if every peer it waits for were up (its wait
    is left out: their host names resolve only in a cluster, `LocalCluster`)."""
    main = container_of(job["spec"]["template"]["spec"], container)
    env = container_env(job, index, container)
    command = container_argv(main, env, {main["image"]: entrypoint or []})
    if len(command) > 2 and shell.WAIT_BEGIN in command[2]:
        before, rest = command[2].split(shell.WAIT_BEGIN, 1)
        command[2] = before + rest.split(shell.WAIT_END, 1)[1]
    # Its peers' hosts never resolve here: a follower that was told it saw its entry point
    # (its wait is left out) must not count it gone and stop the command (under load, a command
    # slower than the follow interval times misses was stopped before it printed).
    process_env = {
        "PATH": os.environ["PATH"],
        "AICHOR_FOLLOW_MISSES": "1000000",
        **env,
        **(extra_env or {}),
    }
    return subprocess.run(
        command, env=process_env, capture_output=True, text=True, timeout=timeout, check=False
    )


def process_env(job: dict[str, Any], index: int, **kwargs: Any) -> dict[str, str]:
    """The environment the user's command sees, when that command is `PRINT_ENV`."""
    result = run_container(job, index, **kwargs)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


PRINT_ENV = "python3 -c 'import json, os; print(json.dumps(dict(os.environ)))'"
