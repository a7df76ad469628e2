"""What a check of a custom resource imports (start-up: editors and hooks call `validate` on
every save): neither jsonschema (its schemas are walked by reading/openapi.py) nor cel-python
(the CRDs' CEL rules are compiled at vendor time), while their checks still refuse. In a fresh
interpreter: what a command's process imports is the point."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT

TRAINJOB = ROOT / "tests" / "trainer" / "yaml.01-multi-node.yaml"
HEAVY = ("jsonschema", "referencing", "attrs", "celpy", "lark")


def test_a_check_imports_neither_jsonschema_nor_cel_python_and_still_refuses():
    # A TrainJob: its CRD's schema, its CEL rules and its pod templates' schema are checked.
    program = f"""
import sys, yaml
from aichor_iac.doors import load, parse
load({str(TRAINJOB)!r})
for field, value in (("name", "Upper-Case"), ("labels", {{"a": 1}})):
    bad = yaml.safe_load(open({str(TRAINJOB)!r}))
    bad["metadata"][field] = value
    try:
        parse(yaml.safe_dump(bad), "bad.yaml")
    except Exception as error:
        print(str(error).splitlines()[0])
print(sorted(m for m in {HEAVY!r} if m in sys.modules))
"""
    found = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True
    ).stdout
    cel_rule, schema, imported = found.splitlines()
    assert "metadata.name must match RFC 1035 DNS label format" in cel_rule
    assert "metadata.labels.a" in schema and "must be of type string" in schema
    assert imported == "[]"
