"""Third-party imports made lighter for start-up (aichor_iac/reading/imports.py): jsonschema
without the format modules it would import, cel-python's parser from Lark's cache. Each in a
fresh interpreter: what a command's process imports is the point."""

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


def test_the_cel_parser_is_cached_and_a_bad_or_unwritable_cache_changes_nothing(tmp_path):
    # The TrainJob's CEL rules hold or not the same way whatever the cache holds.
    program = f"""
import yaml
from aichor_iac.doors import load, parse
load({str(TRAINJOB)!r})
bad = yaml.safe_load(open({str(TRAINJOB)!r}))
bad["metadata"]["name"] = "Upper-Case"
try:
    parse(yaml.safe_dump(bad), "bad.yaml")
except Exception as error:
    print(str(error).splitlines()[0])
"""
    cache = tmp_path / "cache"
    first = python(program, XDG_CACHE_HOME=str(cache))
    parser = cache / "aichor-iac" / "cel-parser.lark"
    assert parser.stat().st_size > 10_000
    assert python(program, XDG_CACHE_HOME=str(cache)) == first
    parser.write_bytes(b"not a parser\n")
    assert python(program, XDG_CACHE_HOME=str(cache)) == first
    unwritable = tmp_path / "file"
    unwritable.write_text("")
    assert python(program, XDG_CACHE_HOME=str(unwritable)) == first
    assert "metadata.name must match RFC 1035 DNS label format" in first  # (a CEL rule's)
