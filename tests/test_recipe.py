"""docs/architecture.md's recipe, followed to the letter on a copy of the package: a toy
framework (its RULES entry, its plan in frameworks/ named in PLANNERS, its component class)
and a toy custom-resource kind (its row of ENTRANCES, its door, its CRD's schema), then a
manifest of each rendered, in a fresh interpreter that imports the copy."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from conftest import ROOT

TOY_PLAN = """
from ..experiment.model import Spec
from .base import Endpoint, Env, Names, Plan, Slot, coordinated, ranked


def plan(spec: Spec, names: Names) -> Plan:
    slots = ranked(spec.types, ("Worker",))
    leader = Endpoint(names.host(slots[0].role, 0), 7000)

    def env(slot: Slot) -> tuple[Env, ...]:
        return (Env("TOY_LEADER", str(leader)), Env.index("TOY_RANK", slot.offset))

    return coordinated("toy", slots, leader, env)
"""
TOY_COMPONENT = '''
class ToyJob(ExperimentComponent):
    """The toy framework's component."""

    TYPE = "aichor:index:ToyJob"
    OPERATORS = ("toy",)


'''
TOY_DOOR = """
from collections.abc import Mapping, Sequence
from typing import Any

from ..experiment.model import Experiment
from ..reading.text import Document
from . import aichor


def release(data: dict[str, Any]) -> str | None:
    return None


def fixes(data: dict[str, Any]) -> Mapping[str, str]:
    return {}


def validate(
    data: dict[str, Any],
    source: str,
    lines: dict,
    companions: list[dict[str, Any]],
    runtimes: Sequence[Document] = (),
) -> Experiment:
    spec = data["spec"]
    workers = {"count": spec["workers"], "resources": {"cpus": 1, "ramRatio": 2}}
    manifest = {
        "kind": "AIchorManifest",
        "apiVersion": "0.2.2",
        "spec": {
            "operator": "toy",
            "image": spec["image"],
            "command": spec["command"],
            "types": {"Worker": workers},
        },
    }
    return aichor.read(manifest, source, lines).model_copy(update={"name": data["metadata"]["name"]})
"""
TOY_CRD = {
    "group": "toy.example.com",
    "kind": "ToyJob",
    "scope": "Namespaced",
    "source": "github.com/example/toy@v1.0.0",
    "versions": {
        "v1": {
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object"},
                "spec": {
                    "type": "object",
                    "required": ["image", "command", "workers"],
                    "properties": {
                        "image": {"type": "string"},
                        "command": {"type": "string"},
                        "workers": {"type": "integer", "minimum": 1},
                    },
                },
            },
        }
    },
}


def inserted(path: Path, anchor: str, text: str, after: bool = True) -> None:
    """`text` written beside the line that starts with `anchor` (a step of the recipe)."""
    source = path.read_text()
    assert source.count(anchor) == 1, (path, anchor)
    at = source.index(anchor) + (len(anchor) if after else 0)
    path.write_text(source[:at] + text + source[at:])


def follow_the_recipe(package: Path) -> None:
    # A framework: one entry of RULES; a module in frameworks/ named in PLANNERS; a class.
    rule = '    "toy": OperatorRule({"Worker": TypeRule()}),\n'
    inserted(package / "experiment" / "groups.py", "RULES: dict[str, OperatorRule] = {\n", rule)
    (package / "frameworks" / "toy.py").write_text(TOY_PLAN)
    frameworks = package / "frameworks" / "__init__.py"
    inserted(frameworks, "from . import ", "toy, ")
    inserted(frameworks, "PLANNERS: dict[str, Planner] = {\n", '    "toy": toy.plan,\n')
    inserted(package / "components.py", "# The component of each operator", TOY_COMPONENT, False)
    # A kind: one row of ENTRANCES; its door; its CRD's schema.
    row = '    Entrance("toy.example.com/v1", "ToyJob", "toy"),\n'
    inserted(package / "doors" / "identities.py", "ENTRANCES = (\n", row)
    (package / "doors" / "toy.py").write_text(TOY_DOOR)
    crd = package / "reading" / "crds" / "toy.example.com_ToyJob_v1.0.0.json"
    crd.write_text(json.dumps(TOY_CRD))


def test_a_framework_and_a_kind_added_by_the_recipe_render(tmp_path):
    package = tmp_path / "aichor_iac"
    shutil.copytree(ROOT / "aichor_iac", package, ignore=shutil.ignore_patterns("__pycache__"))
    follow_the_recipe(package)
    manifest = {
        "kind": "AIchorManifest",
        "apiVersion": "0.2.2",
        "spec": {
            "operator": "toy",
            "image": "python:3.11",
            "command": "python toy.py",
            "types": {"Worker": {"count": 2, "resources": {"cpus": 1, "ramRatio": 2}}},
        },
    }
    resource = {
        "apiVersion": "toy.example.com/v1",
        "kind": "ToyJob",
        "metadata": {"name": "toys"},
        "spec": {"image": "python:3.11", "command": "python toy.py", "workers": 3},
    }
    (tmp_path / "toy.yaml").write_text(yaml.safe_dump(manifest))
    (tmp_path / "toyjob.yaml").write_text(yaml.safe_dump(resource))
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump({**resource, "spec": {"workers": 0}}))
    program = """
import json, sys
import aichor_iac
from aichor_iac.components import COMPONENTS
found = {"component": COMPONENTS["toy"].__name__, "package": aichor_iac.__file__}
for name in ("toy.yaml", "toyjob.yaml"):
    jobs = [o for o in aichor_iac.render(name) if o["kind"] == "Job"]
    env = jobs[0]["spec"]["template"]["spec"]["containers"][0]["env"]
    found[name] = (len(jobs), jobs[0]["spec"]["completions"], sorted(e["name"] for e in env))
try:
    aichor_iac.load("bad.yaml")
except aichor_iac.ManifestError as error:
    found["bad"] = [p.path for p in error.problems]
print(json.dumps(found))
"""
    environment = {**os.environ, "PYTHONPATH": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-c", program],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["package"] == str(package / "__init__.py")  # (the copy, not the checkout)
    assert found["component"] == "ToyJob"
    for name, workers in (("toy.yaml", 2), ("toyjob.yaml", 3)):
        jobs, completions, env = found[name]
        assert (jobs, completions) == (1, workers)
        assert {"TOY_LEADER", "TOY_RANK"} <= set(env)
    assert "spec.image" in " ".join(found["bad"])  # (refused by its CRD's schema)
