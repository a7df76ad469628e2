"""No command prints anything after its result (issue 50): every event loop, socket and file
it opened is closed before the interpreter exits. With ResourceWarning shown, an event loop
left open says so at exit: Pulumi's mocks left the loops they made (the render's, and one per
worker thread), and their finaliser, under load, printed `Exception ignored in:
BaseEventLoop.__del__ ... Invalid file descriptor: -1` after a render had succeeded."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "command",
    [
        ["render", "tests/katib/random.yaml"],  # a sweep: 12 trials' objects
        ["render", "examples/sweep.yaml", "-o", "{tmp}"],
        ["preview", "examples/pytorch.yaml", "--stack-config", "stacks/Pulumi.pytorch.yaml"],
        ["preview", "examples/trainjob.yaml", "--output", "markdown"],
        ["validate", "examples/jobset.yaml"],
        ["convert", "tests/kubeflow/pytorch-simple.yaml"],
    ],
    ids=lambda c: " ".join(c[:2]),
)
def test_a_command_prints_nothing_after_its_result(command: list[str], tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONWARNINGS": "always::ResourceWarning"}
    argv = [a.replace("{tmp}", str(tmp_path)) for a in command]
    result = subprocess.run(
        [sys.executable, "-m", "aichor_iac.cli", *argv],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stderr == "", result.stderr
