"""The CLI as a shell user meets it (issue 17): argv and standard input → exit status and
what stdout and stderr say. One row per behaviour."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
CLI = str(Path(sys.executable).parent / "aichor-iac")
PYTORCH = (ROOT / "examples" / "pytorch.yaml").read_text()


@pytest.mark.parametrize(
    ("argv", "stdin", "status", "out", "err"),
    [
        (["--version"], "", 0, f"aichor-iac {version('aichor-iac')}\n", ""),
        # `-` is standard input, as for kubectl and most tools
        (["validate", "-"], PYTORCH, 0, "<stdin>: valid pytorch manifest", ""),
        (["render", "-"], PYTORCH, 0, "name: pytorch-ddp-master", ""),
        (["validate", "-"], "x: [\n", 2, "", "<stdin>:2: invalid YAML"),
        (["validate", "-"], "", 2, "", "<stdin>"),
    ],
)
def test_the_cli(argv: list[str], stdin: str, status: int, out: str, err: str) -> None:
    result = subprocess.run([CLI, *argv], input=stdin, capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == status, result.stderr
    assert out in result.stdout and err in result.stderr, (result.stdout, result.stderr)
