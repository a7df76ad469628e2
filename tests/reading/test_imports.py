"""Third-party imports made lighter for start-up (aichor_iac/reading/imports.py): jsonschema
without the format modules it would import, no cel-python where the CRDs' rules are compiled.
Each in a fresh interpreter: what a command's process imports is the point."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import ROOT

TRAINJOB = ROOT / "tests" / "trainer" / "yaml.01-multi-node.yaml"


def python(program: str, **env: str) -> str:
    found = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **env},
    )
    return found.stdout


def test_jsonschema_is_imported_without_its_format_modules_which_stay_importable():
    program = """
import importlib.util, json, sys
from aichor_iac.reading import imports
imports.jsonschema()
installed = [m for m in imports.FORMAT_MODULES if importlib.util.find_spec(m)]
imported = [m for m in imports.FORMAT_MODULES if m in sys.modules]
for module in installed:
    __import__(module)  # (a later import of its own still works)
print(json.dumps({"installed": installed, "imported": imported}))
"""
    found = json.loads(python(program))
    assert found["imported"] == []
    assert "rfc3987_syntax" in found["installed"]  # (the test extra brings it, as Jupyter does)


def test_a_check_of_crds_cel_rules_imports_neither_cel_python_nor_its_parser():
    # The TrainJob's rules are compiled at vendor time (cel_rules.py); one still refuses.
    program = f"""
import sys, yaml
from aichor_iac.doors import load, parse
load({str(TRAINJOB)!r})
bad = yaml.safe_load(open({str(TRAINJOB)!r}))
bad["metadata"]["name"] = "Upper-Case"
try:
    parse(yaml.safe_dump(bad), "bad.yaml")
except Exception as error:
    print(str(error).splitlines()[0])
print(sorted(m for m in ("celpy", "lark") if m in sys.modules))
"""
    refused, imported = python(program).splitlines()
    assert "metadata.name must match RFC 1035 DNS label format" in refused
    assert imported == "[]"
