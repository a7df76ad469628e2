"""The command line as a process of its own (aichor_iac/cli/process.py): `import aichor_iac`
imports nothing heavy, so the program decides when its imports happen; reading runs without
cyclic collections; the console script freezes what is alive when its command is done."""

from __future__ import annotations

import gc
import json
import subprocess
import sys

import pytest
from conftest import ROOT

from aichor_iac.cli.process import collector_paused


def test_importing_the_package_and_its_command_line_imports_no_model_or_schema_library():
    program = (
        "import json, sys; import aichor_iac, aichor_iac.cli; "
        "print(json.dumps(sorted(m for m in ('pydantic', 'yaml', 'jsonschema', 'celpy', "
        "'pulumi', 'aichor_iac.doors', 'aichor_iac.experiment') if m in sys.modules)))"
    )
    found = subprocess.run([sys.executable, "-c", program], capture_output=True, check=True)
    assert json.loads(found.stdout) == []


def test_the_package_still_gives_its_names_on_first_use():
    import aichor_iac
    from aichor_iac.doors import load
    from aichor_iac.experiment.model import Experiment

    assert (aichor_iac.Experiment, aichor_iac.load) == (Experiment, load)
    assert aichor_iac.ManifestError.__module__ == "aichor_iac.problems"
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        aichor_iac.nothing  # noqa: B018


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_paused_inside_and_as_it_was_after_even_on_an_error(enabled):
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        with pytest.raises(ValueError), collector_paused():
            assert not gc.isenabled()
            raise ValueError
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


@pytest.mark.parametrize("module", ["aichor_iac.cli", "aichor_iac.cli.__main__"])
def test_the_program_gives_the_commands_status_and_leaves_nothing_to_scan_at_exit(module):
    """As the console script runs it (and `python -m aichor_iac.cli`): a command's status
    comes out as main's; what is alive at its end is frozen, and the collector is on again."""
    program = f"""
import gc, json, sys
sys.argv = ["aichor-iac", "validate", sys.argv[1]]
if {module!r} == "aichor_iac.cli.__main__":
    import runpy
    try:
        runpy.run_module("aichor_iac.cli", run_name="__main__")
    except SystemExit as end:
        status = end.code
else:
    from aichor_iac.cli import command
    status = command()
print(json.dumps([status, gc.get_freeze_count() > 10000, gc.isenabled()]))
"""
    for path, status in (("examples/pytorch.yaml", 0), ("does-not-exist.yaml", 2)):
        found = subprocess.run(
            [sys.executable, "-c", program, path], capture_output=True, cwd=ROOT, check=True
        )
        assert json.loads(found.stdout.splitlines()[-1]) == [status, True, True]


def test_validate_imports_no_server_and_no_pulumi():
    """The progress receiver is a program the package ships, not a module it imports to
    render: its server and TLS imports cost `validate` 20 ms; Pulumi's, far more."""
    program = (
        "import json, sys; from aichor_iac.cli import main; main(['validate', sys.argv[1]]); "
        "print(json.dumps(sorted(m for m in ('http.server', 'ssl', 'aichor_iac.pods.receiver', "
        "'pulumi') if m in sys.modules)))"
    )
    found = subprocess.run(
        [sys.executable, "-c", program, "examples/pytorch.yaml"],
        capture_output=True,
        cwd=ROOT,
        check=True,
    )
    assert json.loads(found.stdout.splitlines()[-1]) == []


@pytest.mark.parametrize("entry", ["command", "main"])
def test_a_render_in_a_process_of_its_own_makes_its_objects_with_no_collection(entry):
    """`render` (and `preview`) in the console script: no cyclic collection from the expansion
    to the end (`batch`), the collector on again once what is alive is frozen; called in a
    process that goes on (`main`), collections as usual."""
    program = f"""
import gc, json, sys
import aichor_iac.engine as engine
from aichor_iac.cli import command, main
seen, expand = [], engine.expand
engine.expand = lambda *a, **k: seen.append(gc.isenabled()) or expand(*a, **k)
sys.argv = ["aichor-iac", "render", sys.argv[1]]
status = command() if {entry!r} == "command" else main()
print(json.dumps([status, seen, gc.isenabled(), gc.get_freeze_count() > 0]))
"""
    found = subprocess.run(
        [sys.executable, "-c", program, "examples/pytorch.yaml"],
        capture_output=True,
        cwd=ROOT,
        check=True,
    )
    ended = entry == "command"
    assert json.loads(found.stdout.splitlines()[-1]) == [0, [not ended], True, ended]
