"""The house holds: no import circle between modules, and no import from a floor to a higher
one (benchmarks/structure.py measures the rest: sizes of modules, classes and functions)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("structure", ROOT / "benchmarks" / "structure.py")
structure = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(structure)  # type: ignore[union-attr]


def graph() -> dict[str, set[str]]:
    paths = sorted(structure.PACKAGE.rglob("*.py"))
    modules = {structure.module_name(p) for p in paths}
    return {structure.module_name(p): structure.imports(p, modules) for p in paths}


def test_no_module_imports_one_that_imports_it_back():
    assert structure.circles(graph()) == []


def test_imports_only_point_down_the_floors():
    assert structure.climbs(graph()) == []


def test_the_checks_see_a_circle_and_a_climb():
    # The house before: the AIchor model imported the doors built on it.
    old = {"aichor_iac.experiment.model": {"aichor_iac.doors.kubeflow.door"}}
    old["aichor_iac.doors.kubeflow.door"] = {"aichor_iac.experiment.model"}
    assert structure.circles(old) == [
        ["aichor_iac.doors.kubeflow.door", "aichor_iac.experiment.model"]
    ]
    assert structure.climbs(old) == [
        ("aichor_iac.experiment.model", "aichor_iac.doors.kubeflow.door")
    ]


def test_every_module_has_its_floor():
    floors = {m: structure.floor(m) for m in graph()}
    assert floors["aichor_iac.problems"] == 0
    assert floors["aichor_iac.experiment.model"] < floors["aichor_iac.doors.router"]
    assert floors["aichor_iac.frameworks.pytorch"] < floors["aichor_iac.k8s.objects"]
    assert floors["aichor_iac.k8s.objects"] < floors["aichor_iac.components"]
    assert floors["aichor_iac.components"] < floors["aichor_iac.cli"]


def test_the_tests_mirror_the_packages():
    """Each folder of tests is a package's (tests/doors: aichor_iac/doors), and each package
    with logic of its own has its folder of tests."""
    tests = {p.parent.name for p in (ROOT / "tests").glob("*/test_*.py")}
    packages = {p.parent.name for p in structure.PACKAGE.glob("*/__init__.py")}
    assert tests <= packages, tests - packages
    assert packages - tests <= {"experiment"}, packages - tests  # (its checks: tests/doors)


def test_no_class_is_longer_than_a_person_can_hold():
    long = [
        (structure.module_name(path), name, size)
        for path in sorted(structure.PACKAGE.rglob("*.py"))
        for kind, name, size in structure.long_definitions(path)
        if kind == "class"
    ]
    assert long == []
