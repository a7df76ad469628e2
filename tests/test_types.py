"""The package's types are checked (issue 68): mypy with the pydantic plugin, as configured in
pyproject.toml, finds no error in `aichor_iac/`. `make lint` runs the same command; `make test`
runs it here, beside the other tests, rather than alone before them (42 s of one core on a fresh
clone, while the suite's processes wait on theirs)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT


@pytest.mark.slow  # (make check runs mypy itself, in make lint)
def test_the_package_type_checks_with_no_error():
    done = subprocess.run(
        [sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("Success: no issues found"), done.stdout
