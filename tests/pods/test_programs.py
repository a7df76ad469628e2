"""The programs that run in the user's pods (aichor_iac/pods): what the image needs of them is
Python 3.8 and the standard library; what a pod's command holds is their code."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from aichor_iac import pods

FILES = {name: Path(pods.__file__).with_name(f"{name}.py") for name in pods.PROGRAMS}
OLDEST = "3.8"  # the oldest python3 an ML image still ships (the docs promise it)


def imported(path: Path) -> set[str]:
    """The top-level modules `path` imports; "." for a relative import."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            found.add("." if node.level else (node.module or "").split(".")[0])
    return found


def test_every_program_in_the_package_is_listed() -> None:
    here = {p.stem for p in Path(pods.__file__).parent.glob("*.py")} - {"__init__"}
    assert here == set(pods.PROGRAMS)


@pytest.mark.parametrize("name", pods.PROGRAMS)
def test_a_program_imports_the_standard_library_alone(name: str) -> None:
    allowed = {"__future__", *pods.PROGRAMS[name]}
    outside = imported(FILES[name]) - set(sys.stdlib_module_names) - allowed
    assert not outside, f"{name} imports {sorted(outside)}: the user's image has none of them"


def vermin(*files: Path) -> subprocess.CompletedProcess:
    """vermin's reading of `files` (their syntax and standard-library use) against OLDEST."""
    program = Path(sys.executable).with_name("vermin")
    argv = [str(program), "--no-tips", "--violations", f"-t={OLDEST}-", *map(str, files)]
    return subprocess.run(argv, capture_output=True, text=True)


def test_every_program_runs_on_the_oldest_python_promised() -> None:
    run = vermin(*FILES.values())
    assert run.returncode == 0, run.stdout + run.stderr


def test_vermin_would_say_so_of_a_newer_program(tmp_path: Path) -> None:
    """The check above can fail: a `match` statement (3.10) is refused."""
    newer = tmp_path / "newer.py"
    newer.write_text("import sys\nmatch sys.argv:\n    case _:\n        pass\n")
    assert vermin(newer).returncode != 0


@pytest.mark.parametrize("name", pods.PROGRAMS)
def test_a_pod_is_given_the_code_without_the_docstring(name: str) -> None:
    text = pods.source(name)
    module = ast.parse(text)
    assert ast.get_docstring(module) is None
    assert ast.get_docstring(ast.parse(FILES[name].read_text()))  # (the file keeps it)
    assert text == text.strip() + "\n"
    compile(text, name, "exec")


def test_a_program_not_in_the_package_is_refused() -> None:
    with pytest.raises(ValueError, match="no program 'shell' runs in a pod"):
        pods.source("shell")
